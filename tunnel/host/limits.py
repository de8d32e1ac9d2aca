"""The host's limits that `tunnel host --help` shows as defaults: importing this loads nothing."""

from __future__ import annotations

from typing import Final

DEFAULT_MAX_CONVERSATIONS: Final = 8
"""Conversations a host runs at once unless `--max-conversations` says otherwise: each runs an
agent process (docs/agents.md, "Several agents")."""
