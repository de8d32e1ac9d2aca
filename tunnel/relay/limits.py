"""Defaults of the relay's own limits that its command line shows, kept free of heavy imports so
that `tunnel relay --help` stays fast (tests/test_cli.py)."""

from __future__ import annotations

MAX_CAST_BACKLOG = 1024 * 1024
"""Bytes of a host's casts the relay queues for one teammate channel beyond that channel's
window, by default (`--max-cast-backlog`); a channel further behind is cut from the broadcast
(docs/protocol.md, "Broadcast")."""

MAX_WINDOW_OPTION = 64 * 1024 * 1024
"""The largest channel window `tunnel relay --window` takes: what a peer that stops reading can
make the relay hold per channel, times the channels, is the relay's memory at risk."""
