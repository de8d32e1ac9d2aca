"""agent-tunnel: share and co-drive a local coding agent through an end-to-end encrypted relay."""

from __future__ import annotations

__version__ = "0.1.0"
