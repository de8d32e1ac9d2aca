"""Events: what `Connection.events_received()` reports after the peer's bytes were processed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

Payload: TypeAlias = bytes | memoryview
"""A message's bytes: a memoryview into the received WebSocket message on a connection made with
`payload_views` (a relay forwards it without copying it out), else bytes."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HelloReceived:
    """The peer's hello arrived; it is always the first event of a link."""

    payload: dict[str, Any]
    """The peer's hello payload, checked against the limits but not interpreted."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelOpened:
    """The peer opened a channel; it is OPEN and may carry data both ways at once."""

    channel: int
    """The id the peer picked."""

    path: str
    """What the channel is for."""

    meta: dict[str, Any]
    """The peer's parameters for the channel."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DataReceived:
    """One application message arrived; call `Connection.acknowledge` once it is consumed."""

    channel: int
    """The channel it arrived on."""

    data: Payload
    """The message, exactly as the peer passed it to `send_data` (bytes unless the connection
    was made with `payload_views`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelClosed:
    """A channel is gone: the peer closed it (our reply is queued) or answered our close.

    Its id may be reused from now on.
    """

    channel: int
    """The channel that is gone."""

    code: int
    """The code in the peer's close frame."""

    reason: str
    """The reason in the peer's close frame."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowUpdated:
    """The peer granted more send window on a channel: a blocked sender may retry."""

    channel: int
    """The channel whose send window grew."""

    available: int
    """Bytes we may send on it now."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CastReceived:
    """A cast of a host's broadcast arrived (docs/protocol.md, "Broadcast").

    At the relay, from a host: `channel` is None, and `group` the broadcast group it goes to. At
    a teammate: `channel` is the channel it came on, and it counts against that channel's window
    like data: call `Connection.acknowledge`; its `group` is always 0.
    """

    channel: int | None
    data: Payload
    group: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class CastJoined:
    """At the relay: the host asks for its casts of `group` to be copied to this channel of its
    link (and no other group's any more)."""

    channel: int
    group: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class CastParted:
    """At the relay: the host asks for its casts to stop on this channel of its link."""

    channel: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CastCut:
    """At a teammate: the relay stopped copying casts to this channel (it fell behind)."""

    channel: int


Event: TypeAlias = (
    HelloReceived
    | ChannelOpened
    | DataReceived
    | ChannelClosed
    | WindowUpdated
    | CastReceived
    | CastJoined
    | CastParted
    | CastCut
)
