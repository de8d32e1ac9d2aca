"""The node link's wire (tunnel/relay/node_link.py): envelopes, and casts merged so that one
message carries a cast for every teammate of an entry node that takes it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunnel.proto import Outgoing
from tunnel.proto.frames import cast_channel, cast_head, data_head
from tunnel.relay.node_link import (
    ATTACH,
    CAST,
    CLOSE,
    MAX_RECIPIENTS,
    MESSAGE,
    TEXT,
    Envelope,
    EnvelopeError,
    merge,
    pack_attach,
    pack_cast,
    pack_close,
    pack_message,
    unpack,
)


def cast(channel: int, data: bytes) -> Outgoing:
    return (cast_head(channel, len(data)), data)


def data(channel: int, payload: bytes) -> Outgoing:
    return (data_head(channel, len(payload)), payload)


def joined(envelope: bytes | list[bytes | memoryview]) -> bytes:
    return envelope if isinstance(envelope, bytes) else b"".join(bytes(p) for p in envelope)


def test_every_envelope_reads_back_as_written() -> None:
    assert unpack(pack_message(7, b"\x83frame")) == Envelope(MESSAGE, 7, b"\x83frame")
    assert unpack(pack_message(2**32 - 1, "text")) == Envelope(TEXT, 2**32 - 1, "text")
    attach = unpack(pack_attach(3, "2001:db8::1", b"hello"))
    assert attach == Envelope(ATTACH, 3, b"hello", client="2001:db8::1")
    assert unpack(pack_close(4, 4007, "stopped reading")) == Envelope(
        CLOSE, 4, "stopped reading", code=4007
    )
    assert unpack(joined(pack_cast([(1, 3), (2, 5)], b"sealed"))) == Envelope(
        CAST, body=b"sealed", recipients=((1, 3), (2, 5))
    )


@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"\x00",
        b"\x09" + bytes(8),
        b"\x01\x00\x00",
        b"\x03\x00\x00",  # a cast to nobody
        b"\x03\x00\x01" + bytes(8),  # a cast of nothing
        b"\x03\x00\x02" + bytes(8),  # fewer pairs than it says
        b"\x04\x00\x00\x00\x01\x09abc",  # an address longer than the envelope
        b"\x05\x00\x00\x00\x01\x03",
        b"\x05\x00\x00\x00\x01\x03\xe8\xff",  # a reason that is not UTF-8
    ],
)
def test_what_is_not_an_envelope_is_refused(message: bytes) -> None:
    with pytest.raises(EnvelopeError):
        unpack(message)


def test_a_cast_goes_to_one_to_max_recipients_slots() -> None:
    with pytest.raises(ValueError, match="a cast goes to"):
        pack_cast([], b"x")
    with pytest.raises(ValueError, match="a cast goes to"):
        pack_cast([(1, 1)] * (MAX_RECIPIENTS + 1), b"x")


def test_cast_channel_reads_a_cast_head_and_nothing_else() -> None:
    for channel in (0, 1, 127, 128, 70000, 2**32 - 1):
        assert cast_channel(cast_head(channel, 300)) == channel
        assert cast_channel(data_head(channel, 300)) is None
    assert cast_channel(b"") is None
    assert cast_channel(b"\x83\xa1c") is None


def test_a_cast_several_slots_carry_becomes_one_envelope_in_its_place_in_each() -> None:
    sealed = b"the cast"
    written = [
        (1, [data(1, b"before"), cast(1, sealed), data(1, b"after")]),
        (2, [cast(3, sealed)]),
        # Two channels of one teammate: its two copies, one behind the other.
        (3, [cast(5, sealed), cast(7, sealed), data(5, b"later")]),
    ]
    envelopes = [unpack(joined(e)) for e in merge(written)]
    assert envelopes == [
        Envelope(MESSAGE, 1, data_head(1, 6) + b"before"),
        Envelope(CAST, body=sealed, recipients=((1, 1), (2, 3), (3, 5), (3, 7))),
        Envelope(MESSAGE, 1, data_head(1, 5) + b"after"),
        Envelope(MESSAGE, 3, data_head(5, 5) + b"later"),
    ]


def test_casts_keep_each_slots_order_when_slots_hold_different_casts() -> None:
    one, two = b"cast one", b"cast two"
    written = [
        (1, [cast(1, one), cast(1, two)]),
        (2, [cast(1, two)]),  # it was not joined when the first went out
        (3, ["a text message", cast(9, one)]),
    ]
    per_slot: dict[int, list[object]] = {1: [], 2: [], 3: []}
    for envelope in (unpack(joined(e)) for e in merge(written)):
        if envelope.type == CAST:
            for slot, channel in envelope.recipients:
                per_slot[slot].append((channel, envelope.body))
        else:
            per_slot[envelope.slot].append(envelope.body)
    assert per_slot == {
        1: [(1, one), (1, two)],
        2: [(1, two)],
        3: ["a text message", (9, one)],
    }


def test_only_the_same_bytes_object_is_merged() -> None:
    # Equal bytes that are not the one cast the switch copied stay apart: each slot's own.
    first, other = b"same", bytes(bytearray(b"same"))
    assert first is not other
    written = [(1, [cast(1, first)]), (2, [cast(1, other)])]
    envelopes = [unpack(joined(e)) for e in merge(written)]
    assert [e.recipients for e in envelopes] == [((1, 1),), ((2, 1),)]


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_are_an_envelope_or_an_envelope_error(message: bytes) -> None:
    try:
        envelope = unpack(message)
    except EnvelopeError:
        return
    assert envelope.type in (MESSAGE, TEXT, CAST, ATTACH, CLOSE)
    # What it read is what the same envelope, written again, holds.
    if envelope.type == CAST:
        assert joined(pack_cast(envelope.recipients, envelope.body)) == message


CASTS = [bytes([n]) * 3 for n in range(4)]
"""The casts of the property below: one bytes object each, as the switch copies one."""


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.lists(
            st.one_of(
                st.tuples(st.just("cast"), st.integers(0, 3), st.integers(1, 9)),
                st.tuples(st.just("data"), st.binary(min_size=1, max_size=4), st.integers(1, 9)),
                st.tuples(st.just("text"), st.text(max_size=4), st.just(0)),
            ),
            max_size=8,
        ),
        min_size=1,
        max_size=5,
    )
)
def test_every_slot_gets_exactly_its_messages_in_order_however_casts_merge(
    plans: list[list[tuple[str, object, int]]],
) -> None:
    written: list[tuple[int, list[Outgoing | str]]] = []
    expected: dict[int, list[object]] = {}
    for slot, plan in enumerate(plans, start=1):
        messages: list[Outgoing | str] = []
        for kind, value, channel in plan:
            if kind == "cast":
                assert isinstance(value, int)
                messages.append(cast(channel, CASTS[value]))
                expected.setdefault(slot, []).append((channel, CASTS[value]))
            elif kind == "data":
                assert isinstance(value, bytes)
                messages.append(data(channel, value))
                expected.setdefault(slot, []).append(data_head(channel, len(value)) + value)
            else:
                assert isinstance(value, str)
                messages.append(value)
                expected.setdefault(slot, []).append(value)
        written.append((slot, messages))
    got: dict[int, list[object]] = {}
    for envelope in (unpack(joined(e)) for e in merge(written)):
        if envelope.type == CAST:
            assert len({slot for slot, _ in envelope.recipients}) >= 1
            for slot, channel in envelope.recipients:
                got.setdefault(slot, []).append((channel, envelope.body))
        else:
            got.setdefault(envelope.slot, []).append(envelope.body)
    assert got == expected
