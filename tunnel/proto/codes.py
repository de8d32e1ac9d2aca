"""Close codes carried by `close` frames and WebSocket closes (docs/protocol.md, "Close codes")."""

from __future__ import annotations

import enum


class CloseCode(enum.IntEnum):
    """Why a channel or a whole link was closed.

    1000 to 1011 mean what they mean for WebSockets (RFC 6455, section 7.4.1); 4000 and up are
    ours. Every close code the project sends, receives or reports is a member.
    """

    NORMAL = 1000
    """The work is done and both sides agree to stop."""

    GOING_AWAY = 1001
    """The sender is shutting down (process exit, host stopped sharing)."""

    ABNORMAL_CLOSURE = 1006
    """The connection ended without a close frame (network failure); never sent, only reported."""

    MESSAGE_TOO_BIG = 1009
    """A WebSocket message was larger than `max_message_size` (sent by the WebSocket layer)."""

    INTERNAL_ERROR = 1011
    """The sender hit an unexpected condition: a handler crashed, or a keepalive timed out."""

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

    HOST_ID_IN_USE = 4009
    """Another host process is online with the same key: a newcomer is refused, unless it asked to
    replace that one, which is then closed with this code."""

    CLUSTER_UNAVAILABLE = 4010
    """The relay node cannot reach the cluster's shared state to find the host's node; retry."""


FINAL_CODES = frozenset(
    {
        CloseCode.PROTOCOL_ERROR,
        CloseCode.REFUSED,
        CloseCode.UNAUTHORIZED,
        CloseCode.DECRYPTION_FAILED,
        CloseCode.REVOKED,
        CloseCode.HOST_ID_IN_USE,
    }
)
"""Codes after which reconnecting the same way meets the same answer: the link, the key or the
protocol version is wrong, the links were revoked, or another host process shares with this key.
Host, `tunnel attach` and the page stop on them (when the peer sent them) instead of retrying;
every other code is worth another try."""


def code_name(code: int) -> str:
    """Return a readable name for a close code ("UNAUTHORIZED"), or the number."""
    try:
        return CloseCode(code).name
    except ValueError:
        return str(code)
