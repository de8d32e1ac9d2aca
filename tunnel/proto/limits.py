"""The configurable limits of the link protocol (docs/protocol.md, "Limits")."""

from __future__ import annotations

from dataclasses import dataclass

MAX_WINDOW = 2**32 - 1
"""Largest send window a channel may hold; a grant beyond it is a flow-control error."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """Bounds enforced on every frame received; `None` turns a limit off.

    Both ends of a link must agree on `initial_window` (the relay advertises its limits in its
    hello): each side starts its send window at its own `initial_window`.
    """

    max_message_size: int | None = 1 << 20
    """Bytes of one WebSocket message, checked before any decoding."""

    max_data_size: int | None = 256 * 1024
    """Bytes of one `data` frame's `d`."""

    max_string_length: int | None = 4096
    """UTF-8 bytes of any string in a frame (path, reason, map keys and values), and bytes of any
    binary value inside `meta` or a hello payload."""

    max_meta_entries: int | None = 64
    """Entries of any map or array inside `meta` or a hello payload."""

    max_meta_depth: int | None = 8
    """Nesting depth of `meta` and hello payloads: the payload map itself is depth 1."""

    max_channels: int | None = 256
    """Channels each side may have open on one link (opened by it and not yet fully closed)."""

    initial_window: int = 1024 * 1024
    """Send window of a new channel, per direction, in bytes of `d`.

    Four times `max_data_size`: a receiver that keeps up grants window back once per half window
    (docs/protocol.md, "Flow control"), so one `window` frame answers many `data` frames. With a
    window no larger than the largest message, it would answer nearly every one."""

    @property
    def largest_data(self) -> int:
        """The largest `d` a frame can ever carry: it must fit both max_data_size and a window."""
        return min(self.max_data_size or self.initial_window, self.initial_window)

    def __post_init__(self) -> None:
        for name in (
            "max_message_size",
            "max_data_size",
            "max_string_length",
            "max_meta_entries",
            "max_meta_depth",
            "max_channels",
        ):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value < 1):
                raise ValueError(f"{name} must be a positive int or None")
        if type(self.initial_window) is not int or not 1 <= self.initial_window <= MAX_WINDOW:
            raise ValueError(f"initial_window must be an int in 1..{MAX_WINDOW}")


DEFAULT_LIMITS = Limits()
