"""Close codes carried by `close` frames and WebSocket closes (docs/protocol.md, "Close codes")."""

from __future__ import annotations

import enum


class CloseCode(enum.IntEnum):
    """Why a channel or a whole link was closed.

    1000 and 1001 mean what they mean for WebSockets; 4000 and up are ours.
    """

    NORMAL = 1000
    """The work is done and both sides agree to stop."""

    GOING_AWAY = 1001
    """The sender is shutting down (process exit, host stopped sharing)."""

    PROTOCOL_ERROR = 4000
    """The peer sent something that is not a valid frame or broke the channel state machine."""

    REFUSED = 4001
    """The receiver will not serve this request (unknown path, host declined the joiner)."""

    UNAUTHORIZED = 4002
    """The token or signature does not match what the host registered."""

    DECRYPTION_FAILED = 4003
    """An end-to-end message did not authenticate: tampered, replayed, reordered or wrong key."""

    FLOW_CONTROL = 4004
    """The peer sent more `data` bytes than the receive window granted."""

    HOST_GONE = 4005
    """The host is offline or its link to the relay dropped."""

    LIMIT_REACHED = 4006
    """A configured limit (size, channels, connections, rate) was exceeded."""

    SLOW_CONSUMER = 4007
    """The peer stopped reading for too long and was cut off to protect the others."""

    REVOKED = 4008
    """The host revoked the share links this channel was opened with."""
