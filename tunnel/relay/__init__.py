"""The relay: routes channels between hosts and teammates, reads nothing it routes."""

from __future__ import annotations
