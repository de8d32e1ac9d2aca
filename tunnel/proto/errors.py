"""The protocol's exceptions: whose fault it was, and the close code to send.

Every error here carries a `CloseCode`. `str(e)` is a short message that is safe to log and to put
in a close reason: it never echoes bytes received from the peer.
"""

from __future__ import annotations

from tunnel.proto.codes import CloseCode


class ProtocolError(Exception):
    """Root of every error the protocol layer raises."""

    code: CloseCode = CloseCode.PROTOCOL_ERROR
    """The close code to send when this error ends a channel or a link."""

    def __init__(self, message: str, *, code: CloseCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class LocalProtocolError(ProtocolError):
    """The caller misused the API: the link is unchanged and may be used further.

    Exception: once the link has failed, every call raises this error.
    """


class ChannelNotOpenError(LocalProtocolError):
    """The caller tried to send on a channel that is closing or gone.

    A peer's close can always cross our send, so callers catch this to stop a channel's sender.
    """


class RemoteProtocolError(ProtocolError):
    """The peer broke the protocol: the link has failed and should be closed with `code`."""


class FrameError(RemoteProtocolError):
    """The bytes received are not one valid frame (docs/protocol.md, "Frames")."""


class FlowControlError(RemoteProtocolError):
    """The peer sent more `data` than its window allowed (docs/protocol.md, "Flow control")."""

    code = CloseCode.FLOW_CONTROL


class LimitError(RemoteProtocolError):
    """The peer exceeded a configured limit: message size, string length, channels, ..."""

    code = CloseCode.LIMIT_REACHED
