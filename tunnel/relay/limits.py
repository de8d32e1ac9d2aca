"""Defaults of the relay's own limits that its command line shows, kept free of heavy imports so
that `tunnel relay --help` stays fast (tests/test_cli.py)."""

from __future__ import annotations

MAX_CAST_BACKLOG = 1024 * 1024
"""Bytes of a host's casts the relay queues for one teammate channel beyond that channel's
window, by default (`--max-cast-backlog`); a channel further behind is cut from the broadcast
(docs/protocol.md, "Broadcast")."""

DEFAULT_WINDOW = 1024 * 1024
"""`tunnel relay --window` by default: the protocol's `initial_window` (`DEFAULT_LIMITS`, which
this module cannot import and keep `--help` fast; tests/relay/test_window_option.py checks that
they agree)."""

MAX_WINDOW_OPTION = 64 * 1024 * 1024
"""The largest channel window `tunnel relay --window` takes. A peer that stops reading can make
the relay hold two windows per channel and direction (docs/relay.md, "Routing and forwarding"):
on a host link's 256 channels (`--max-channels-per-link`), 512 MiB at the default window and
32 GiB at this one."""
