"""Why a link or a channel stopped: the close code and reason, and who closed it."""

from __future__ import annotations

from tunnel.proto.codes import CloseCode

ABNORMAL_CLOSURE = 1006
"""WebSocket code for a connection that ended without a close frame (network failure)."""


def code_name(code: int) -> str:
    """Return a readable name for a close code ("UNAUTHORIZED"), or the number."""
    try:
        return CloseCode(code).name
    except ValueError:
        return str(code)


class LinkClosedError(Exception):
    """The link (the whole WebSocket) is closed; nothing more can be sent or received on it."""

    def __init__(self, code: int, reason: str = "", *, by_peer: bool) -> None:
        super().__init__(
            f"link closed {'by peer' if by_peer else 'locally'}: {code_name(code)}"
            + (f" ({reason})" if reason else "")
        )
        self.code = code
        """The WebSocket close code (ours if we closed, the peer's otherwise)."""
        self.reason = reason
        """The close reason that went with it."""
        self.by_peer = by_peer
        """True if the peer (or the network) ended the link, False if we did."""


class ChannelClosedError(Exception):
    """A channel is closed: by the peer, by us, or because its link closed."""

    def __init__(self, code: int, reason: str = "", *, by_peer: bool) -> None:
        super().__init__(
            f"channel closed {'by peer' if by_peer else 'locally'}: {code_name(code)}"
            + (f" ({reason})" if reason else "")
        )
        self.code = code
        """The close code: from the close frame, or the link's close code if the link ended."""
        self.reason = reason
        """The close reason that went with it."""
        self.by_peer = by_peer
        """True if the other side (or the network) closed it, False if we did."""
