"""The channel state machine: every (state, input) pair and its outcome, in one table.

docs/protocol.md, "Channel lifecycle", is generated from the same facts; `Connection` looks every
transition up here and performs only the side effects (windows, events, frames).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tunnel.proto.errors import (
    ChannelNotOpenError,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
)


class ChannelState(enum.Enum):
    """Where a channel stands; a channel that is gone (or never existed) has no state: `None`."""

    OPEN = "open"
    """Both directions carry data."""

    CLOSE_SENT = "close_sent"
    """We sent `close` and wait for the peer's; its id is still in use."""

    # Members are singletons compared by identity: hashing them by identity too keeps the table's
    # look-up (twice per data message received) off Enum's own __hash__, a Python call.
    __hash__ = object.__hash__


class Input(enum.Enum):
    """What can happen to a channel: a call of ours (SEND_*, ACKNOWLEDGE) or a frame (RECV_*)."""

    SEND_OPEN = "send open"
    RECV_OPEN = "recv open"
    SEND_DATA = "send data"
    RECV_DATA = "recv data"
    ACKNOWLEDGE = "acknowledge"
    RECV_WINDOW = "recv window"
    SEND_CLOSE = "send close"
    RECV_CLOSE = "recv close"

    __hash__ = object.__hash__  # as ChannelState's


class Action(enum.Enum):
    """What `Connection` does besides moving to the next state."""

    PROCEED = "proceed"
    """The input's normal effect: send the frame, or report the received one as an event."""

    DISCARD = "discard"
    """Drop a received frame that crossed our close (its data still counts against the window)."""

    REPLY = "reply"
    """The peer closed first: queue our close in reply and report `ChannelClosed`."""

    IGNORE = "ignore"
    """Do nothing: closing or acknowledging a channel that is closing or gone is harmless."""

    REJECT = "reject"
    """Raise `error`; nothing changes (a `RemoteProtocolError` fails the whole link)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Transition:
    """The outcome of one input in one state."""

    action: Action
    """What happens."""

    next: ChannelState | None = None
    """The state afterwards (`None`: the channel is gone); unchanged when the action rejects."""

    error: type[ProtocolError] | None = None
    """The error raised when the action is REJECT."""

    message: str = ""
    """The error's message."""


def _go(action: Action, next_state: ChannelState | None) -> Transition:
    return Transition(action=action, next=next_state)


def _reject(error: type[ProtocolError], message: str) -> Transition:
    return Transition(action=Action.REJECT, error=error, message=message)


OPEN = ChannelState.OPEN
CLOSE_SENT = ChannelState.CLOSE_SENT
_UNKNOWN = "frame for a channel that is not open"
_IN_USE = "open for a channel id already in use"

TRANSITIONS: dict[tuple[ChannelState | None, Input], Transition] = {
    # No channel with this id.
    (None, Input.SEND_OPEN): _go(Action.PROCEED, OPEN),
    (None, Input.RECV_OPEN): _go(Action.PROCEED, OPEN),
    (None, Input.SEND_DATA): _reject(ChannelNotOpenError, "channel is not open"),
    (None, Input.RECV_DATA): _reject(RemoteProtocolError, _UNKNOWN),
    (None, Input.ACKNOWLEDGE): _go(Action.IGNORE, None),
    (None, Input.RECV_WINDOW): _reject(RemoteProtocolError, _UNKNOWN),
    (None, Input.SEND_CLOSE): _go(Action.IGNORE, None),
    (None, Input.RECV_CLOSE): _reject(RemoteProtocolError, _UNKNOWN),
    # OPEN.
    (OPEN, Input.SEND_OPEN): _reject(LocalProtocolError, "channel id already in use"),
    (OPEN, Input.RECV_OPEN): _reject(RemoteProtocolError, _IN_USE),
    (OPEN, Input.SEND_DATA): _go(Action.PROCEED, OPEN),
    (OPEN, Input.RECV_DATA): _go(Action.PROCEED, OPEN),
    (OPEN, Input.ACKNOWLEDGE): _go(Action.PROCEED, OPEN),
    (OPEN, Input.RECV_WINDOW): _go(Action.PROCEED, OPEN),
    (OPEN, Input.SEND_CLOSE): _go(Action.PROCEED, CLOSE_SENT),
    (OPEN, Input.RECV_CLOSE): _go(Action.REPLY, None),
    # CLOSE_SENT: the peer may still send what it sent before our close reached it.
    (CLOSE_SENT, Input.SEND_OPEN): _reject(LocalProtocolError, "channel id already in use"),
    (CLOSE_SENT, Input.RECV_OPEN): _reject(RemoteProtocolError, _IN_USE),
    (CLOSE_SENT, Input.SEND_DATA): _reject(ChannelNotOpenError, "channel is closing"),
    (CLOSE_SENT, Input.RECV_DATA): _go(Action.DISCARD, CLOSE_SENT),
    (CLOSE_SENT, Input.ACKNOWLEDGE): _go(Action.IGNORE, CLOSE_SENT),
    (CLOSE_SENT, Input.RECV_WINDOW): _go(Action.DISCARD, CLOSE_SENT),
    (CLOSE_SENT, Input.SEND_CLOSE): _go(Action.IGNORE, CLOSE_SENT),
    (CLOSE_SENT, Input.RECV_CLOSE): _go(Action.PROCEED, None),
}


def transition(state: ChannelState | None, event: Input) -> Transition:
    """Return the outcome of `event` in `state`, raising the table's error if it is rejected."""
    outcome = TRANSITIONS[state, event]
    if outcome.error is not None:
        raise outcome.error(outcome.message)
    return outcome
