"""Connection: a `data` or `cast` frame taken by the fast form (`payload_at`, no frame object) is
judged exactly as the general decoder and `_handle` judge it, at either end and at the relay.

Seeded cases, under three sets of limits adopted after the hellos (as an end adopts its relay's):
each builds two connections through the same steps, feeds one message to the first
with `receive_data` and to the second through `decode_frame` and `_handle` (the path every other
frame takes), and compares the events, the error (type, close code and reason), the channel's
windows and what it queued to send.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.proto.links import deliver
from tunnel.proto import Connection, Limits, ProtocolError, Side, decode_frame
from tunnel.proto.frames import encode_cast, encode_data

CASES = 400
LIMITS = {
    "data-limit": Limits(
        initial_window=64 * 1024, max_data_size=16 * 1024, max_message_size=20 * 1024
    ),
    # No data limit: a large frame in the fast form is refused by the message size alone.
    "message-limit": Limits(
        initial_window=256 * 1024, max_data_size=None, max_message_size=20 * 1024
    ),
    # Strings too short for the fast form's: every frame goes the general way, which refuses
    # "data" and "cast" themselves (so no channel can be opened either).
    "short-strings": Limits(initial_window=64 * 1024, max_string_length=3),
}


def build(
    rng: random.Random, receiver_side: Side, views: bool, limits: Limits
) -> tuple[Connection, int]:
    """A receiver in a state drawn from `rng` (the same draws give the same state) and the channel
    the message will name."""
    # Adopted after the hellos, as an end adopts its relay's: the fast form follows.
    dialer = Connection(Side.DIALER, payload_views=views)
    accepter = Connection(Side.ACCEPTER, payload_views=views)
    receiver, peer = (dialer, accepter) if receiver_side is Side.DIALER else (accepter, dialer)
    before_hello = rng.random() < 0.05
    accepter.send_hello({})
    dialer.send_hello({})
    if before_hello:
        receiver.adopt_limits(limits)
        return receiver, 1
    deliver(accepter, dialer)
    deliver(dialer, accepter)
    dialer.adopt_limits(limits)
    accepter.adopt_limits(limits)
    strings = limits.max_string_length
    if strings is not None and strings < len("open"):
        return receiver, 1  # no `open` gets through: the message names a channel never opened
    channel = peer.open_channel("/x", {})
    deliver(peer, receiver)
    # Use part of the window, acknowledge some of it.
    for _ in range(rng.randrange(4)):
        peer.send_data(channel, bytes(rng.randrange(1, 8 * 1024)))
    for event in deliver(peer, receiver):
        if rng.random() < 0.5:
            receiver.acknowledge(channel, len(getattr(event, "data", b"")))
    receiver.data_to_send()
    roll = rng.random()
    if roll < 0.15:
        receiver.close_channel(channel)  # our close: the peer's data crossing it is discarded
        receiver.data_to_send()
    elif roll < 0.25:
        channel += 2  # a channel never opened
    return receiver, channel


def message(rng: random.Random, channel: int) -> bytes:
    size = rng.choice([1, 100, 4096, 16 * 1024, 16 * 1024 + 1, 70 * 1024])
    data = rng.randbytes(size)
    kind = rng.choice([encode_data, encode_cast])
    wire = kind(channel, data)
    mutation = rng.random()
    if mutation < 0.1:
        wire = wire[: rng.randrange(1, len(wire))]  # cut short
    elif mutation < 0.2:
        at = rng.randrange(min(len(wire), 24))
        wire = wire[:at] + bytes([rng.randrange(256)]) + wire[at + 1 :]  # a byte of the head
    elif mutation < 0.25:
        wire += b"\x00"  # one byte too many
    return wire


def outcome(connection: Connection, receive: Any, wire: bytes, channel: int) -> tuple[Any, ...]:
    try:
        receive(wire)
    except ProtocolError as exc:
        return type(exc).__name__, exc.code, str(exc)  # the link failed: nothing else is usable
    events = [
        (type(event).__name__, getattr(event, "channel", None), bytes(getattr(event, "data", b"")))
        for event in connection.events_received()
    ]
    # The channel's windows and state, as the protocol object keeps them.
    return events, repr(connection._channels.get(channel)), connection.data_to_send()


@pytest.mark.parametrize("limits", LIMITS.values(), ids=LIMITS.keys())
@pytest.mark.parametrize("views", [False, True], ids=["end", "relay"])
@pytest.mark.parametrize("side", [Side.DIALER, Side.ACCEPTER], ids=["dialer", "accepter"])
def test_the_fast_form_judges_as_the_general_decoder(
    views: bool, side: Side, limits: Limits
) -> None:
    taken = 0
    for seed in range(CASES):
        fast, channel = build(random.Random(seed), side, views, limits)
        general, _ = build(random.Random(seed), side, views, limits)
        wire = message(random.Random(f"m{seed}"), channel)

        def through_general(wire: bytes, general: Connection = general) -> None:
            general._handle(decode_frame(wire, limits=limits))

        expected = outcome(general, through_general, wire, channel)
        assert outcome(fast, fast.receive_data, wire, channel) == expected, seed
        taken += isinstance(expected[0], list)
    # The cases reach both sides of the judgement where a channel can be open at all.
    assert 0 < taken < CASES or (limits is LIMITS["short-strings"] and taken == 0)
