"""Why a link or a channel stopped: the close code and reason, and who closed it."""

from __future__ import annotations

from tunnel.errors import TunnelError
from tunnel.proto.codes import code_name


class LinkClosedError(TunnelError):
    """The link (the whole WebSocket) is closed; nothing more can be sent or received on it.

    `code` is the WebSocket close code: ours if we closed, the peer's otherwise.
    """

    def __init__(self, code: int, reason: str = "", *, by_peer: bool) -> None:
        super().__init__(
            f"link closed {'by peer' if by_peer else 'locally'}: {code_name(code)}"
            + (f" ({reason})" if reason else ""),
            code=code,
            reason=reason,
            by_peer=by_peer,
        )


class ChannelClosedError(TunnelError):
    """A channel is closed: by the peer, by us, or because its link closed.

    `code` comes from the close frame, or is the link's close code if the link ended.
    """

    def __init__(self, code: int, reason: str = "", *, by_peer: bool) -> None:
        super().__init__(
            f"channel closed {'by peer' if by_peer else 'locally'}: {code_name(code)}"
            + (f" ({reason})" if reason else ""),
            code=code,
            reason=reason,
            by_peer=by_peer,
        )
