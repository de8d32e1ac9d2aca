"""The one root of the errors that end a link, a channel, a hello or a session with a close code.

Every layer outside `tunnel.proto` (whose errors are `ProtocolError`) and `tunnel.log` (whose
errors are `LogError`) raises a `TunnelError` subclass when something ends for a reason a peer
may be told: the link closed, a channel closed or was refused, a hello was refused, a message did
not decrypt. Each carries the close code to send or that was received, a reason that is safe to
log and to send (never a token, a key or received bytes), and whose decision it was.
"""

from __future__ import annotations

from tunnel.proto.codes import code_name

__all__ = ["TunnelError", "describe_close"]


class TunnelError(Exception):
    """Something ended with a close code.

    `by_peer` says whose decision it was: True when the other end (or the network) ended it or
    sent what made us end it, False when this process did, for its own reasons.
    """

    def __init__(self, message: str, *, code: int, reason: str = "", by_peer: bool) -> None:
        super().__init__(message)
        self.code = code
        """The close code (a `CloseCode` value, or any int the peer sent)."""
        self.reason = reason
        """The close reason that goes or went with it; informative only."""
        self.by_peer = by_peer
        """True if the peer or the network decided, False if we did."""


def describe_close(code: int, reason: str = "") -> str:
    """Return "NAME: reason" (or "NAME") for a close code, for log lines and messages."""
    return f"{code_name(code)}{': ' + reason if reason else ''}"
