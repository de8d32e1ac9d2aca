"""Connection: hello rule, id parity, channel lifecycle, flow control and limits."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunnel.proto import (
    DEFAULT_LIMITS,
    MAX_CAST_GROUPS,
    MAX_CHANNEL_ID,
    Cast,
    CastCut,
    CastJoined,
    CastParted,
    CastReceived,
    ChannelClosed,
    ChannelNotOpenError,
    ChannelOpened,
    ChannelState,
    Close,
    CloseCode,
    Connection,
    Cut,
    Data,
    DataReceived,
    FlowControlError,
    Frame,
    Hello,
    HelloReceived,
    Join,
    LimitError,
    Limits,
    LocalProtocolError,
    Open,
    Part,
    RemoteProtocolError,
    Side,
    Window,
    WindowUpdated,
    encode_frame,
)

from .links import deliver, linked

KIB = 1024
WHOLE_WINDOW = Limits(initial_window=256 * KIB, max_data_size=256 * KIB)
"""A window no larger than the largest message: the second grant rule of docs/protocol.md."""


def expect_remote(
    conn: Connection, frame: Any, error: type[RemoteProtocolError], code: int
) -> None:
    with pytest.raises(error) as info:
        conn.receive_data(encode_frame(frame))
    assert info.value.code == code
    assert conn.failure is info.value


# --- hello --------------------------------------------------------------------------------------


def test_hellos_are_reported_first_with_their_payload() -> None:
    dialer = Connection(Side.DIALER)
    accepter = Connection(Side.ACCEPTER)
    accepter.send_hello({"role": "relay", "challenge": b"c" * 32})
    assert deliver(accepter, dialer) == [
        HelloReceived(payload={"role": "relay", "challenge": b"c" * 32})
    ]
    dialer.send_hello({"role": "teammate"})
    assert deliver(dialer, accepter) == [HelloReceived(payload={"role": "teammate"})]


def test_a_frame_before_the_peers_hello_fails_the_link() -> None:
    accepter = Connection(Side.ACCEPTER)
    accepter.send_hello({})
    expect_remote(accepter, Open(channel=1, path="s", meta={}), RemoteProtocolError, 4000)


def test_a_second_hello_fails_the_link() -> None:
    dialer, _ = linked()
    expect_remote(dialer, Hello(payload={}), RemoteProtocolError, 4000)


def test_a_channel_frame_before_our_hello_was_sent_fails_the_link() -> None:
    accepter = Connection(Side.ACCEPTER)
    accepter.receive_data(encode_frame(Hello(payload={})))
    expect_remote(accepter, Open(channel=1, path="s", meta={}), RemoteProtocolError, 4000)


def test_channel_calls_before_both_hellos_are_local_errors() -> None:
    dialer = Connection(Side.DIALER)
    with pytest.raises(LocalProtocolError):
        dialer.open_channel("session", {})
    dialer.send_hello({})
    with pytest.raises(LocalProtocolError):
        dialer.send_hello({})
    with pytest.raises(LocalProtocolError):
        dialer.open_channel("session", {})
    assert dialer.failure is None
    dialer.receive_data(encode_frame(Hello(payload={})))
    assert dialer.open_channel("session", {}) == 1


def test_an_invalid_hello_payload_is_a_local_error() -> None:
    dialer = Connection(Side.DIALER)
    with pytest.raises(LocalProtocolError):
        dialer.send_hello({"x": float("nan")})
    with pytest.raises(LocalProtocolError) as info:
        dialer.send_hello({"x": "y" * 5000})
    assert info.value.code == CloseCode.LIMIT_REACHED
    dialer.send_hello({"x": "ok"})
    assert len(dialer.data_to_send()) == 1


# --- ids ----------------------------------------------------------------------------------------


def test_the_dialer_opens_odd_ids_and_the_accepter_even_ids() -> None:
    dialer, accepter = linked()
    assert [dialer.open_channel("s", {}) for _ in range(3)] == [1, 3, 5]
    assert [accepter.open_channel("s", {}) for _ in range(3)] == [2, 4, 6]
    opened = deliver(dialer, accepter)
    assert [e.channel for e in opened if isinstance(e, ChannelOpened)] == [1, 3, 5]
    opened = deliver(accepter, dialer)
    assert [e.channel for e in opened if isinstance(e, ChannelOpened)] == [2, 4, 6]
    assert dialer.open_channels == accepter.open_channels == 6


@pytest.mark.parametrize(
    ("side", "channel"), [(Side.ACCEPTER, 2), (Side.DIALER, 1), (Side.DIALER, 0)]
)
def test_a_peer_open_with_the_wrong_parity_fails_the_link(side: Side, channel: int) -> None:
    dialer, accepter = linked()
    receiver = accepter if side is Side.ACCEPTER else dialer
    expect_remote(receiver, Open(channel=channel, path="s", meta={}), RemoteProtocolError, 4000)


def test_a_peer_open_of_an_id_in_use_fails_the_link() -> None:
    dialer, accepter = linked()
    channel = dialer.open_channel("s", {})
    deliver(dialer, accepter)
    expect_remote(accepter, Open(channel=channel, path="s", meta={}), RemoteProtocolError, 4000)


def test_id_allocation_wraps_around_and_skips_ids_in_use() -> None:
    dialer, _ = linked()
    first = dialer.open_channel("s", {})
    # Jump to the end of the id space rather than open 2**31 channels.
    dialer._next_id = MAX_CHANNEL_ID
    assert dialer.open_channel("s", {}) == MAX_CHANNEL_ID
    assert dialer.open_channel("s", {}) == first + 2  # 1 is still in use
    assert dialer.channel_state(first) is ChannelState.OPEN


# --- lifecycle ----------------------------------------------------------------------------------


def test_a_peer_close_is_answered_and_frees_the_id_on_both_sides() -> None:
    dialer, accepter = linked()
    channel = dialer.open_channel("session", {"role": "view"})
    deliver(dialer, accepter)
    dialer.close_channel(channel, CloseCode.REFUSED, "no such path")
    assert dialer.channel_state(channel) is ChannelState.CLOSE_SENT
    assert deliver(dialer, accepter) == [
        ChannelClosed(channel=channel, code=CloseCode.REFUSED, reason="no such path")
    ]
    assert accepter.channel_state(channel) is None
    # The automatic reply echoes the code; its arrival completes the close.
    assert deliver(accepter, dialer) == [
        ChannelClosed(channel=channel, code=CloseCode.REFUSED, reason="")
    ]
    assert dialer.channel_state(channel) is None
    assert dialer.open_channels == accepter.open_channels == 0


def test_crossing_closes_complete_without_extra_frames() -> None:
    dialer, accepter = linked()
    channel = dialer.open_channel("s", {})
    deliver(dialer, accepter)
    dialer.close_channel(channel)
    accepter.close_channel(channel, CloseCode.GOING_AWAY)
    assert deliver(dialer, accepter) == [ChannelClosed(channel=channel, code=1000, reason="")]
    assert deliver(accepter, dialer) == [ChannelClosed(channel=channel, code=1001, reason="")]
    assert dialer.data_to_send() == accepter.data_to_send() == []
    assert dialer.open_channels == accepter.open_channels == 0


def test_data_and_window_crossing_our_close_are_discarded() -> None:
    dialer, accepter = linked()
    channel = dialer.open_channel("s", {})
    deliver(dialer, accepter)
    assert accepter.send_data(channel, b"late")
    accepter.receive_data(encode_frame(Data(channel=channel, data=b"x")))
    accepter.acknowledge(channel, 1)
    dialer.close_channel(channel)
    events = deliver(accepter, dialer)
    assert events == []
    assert dialer.channel_state(channel) is ChannelState.CLOSE_SENT


def test_data_crossing_our_close_still_counts_against_the_window() -> None:
    limits = Limits(initial_window=100, max_data_size=100)
    dialer, accepter = linked(limits)
    channel = dialer.open_channel("s", {})
    deliver(dialer, accepter)
    dialer.close_channel(channel)
    dialer.receive_data(encode_frame(Data(channel=channel, data=b"x" * 100)))
    expect_remote(dialer, Data(channel=channel, data=b"x"), FlowControlError, 4004)


def test_a_frame_for_a_channel_never_opened_fails_the_link() -> None:
    for frame in (
        Data(channel=2, data=b"x"),
        Window(channel=2, n=1),
        Close(channel=2, code=1000, reason=""),
    ):
        dialer, _ = linked()
        expect_remote(dialer, frame, RemoteProtocolError, 4000)


def test_data_after_the_peer_closed_the_channel_fails_the_link() -> None:
    dialer, accepter = linked()
    channel = dialer.open_channel("s", {})
    deliver(dialer, accepter)
    accepter.receive_data(encode_frame(Close(channel=channel, code=1000, reason="")))
    expect_remote(accepter, Data(channel=channel, data=b"x"), RemoteProtocolError, 4000)


def test_closing_or_acknowledging_a_closed_channel_does_nothing() -> None:
    dialer, accepter = linked()
    channel = dialer.open_channel("s", {})
    deliver(dialer, accepter)
    dialer.close_channel(channel)
    dialer.close_channel(channel)
    dialer.acknowledge(channel, 5)
    assert len(dialer.data_to_send()) == 1
    dialer.close_channel(999)
    dialer.acknowledge(999, 1)
    assert dialer.data_to_send() == []


def test_sending_on_a_closing_or_gone_channel_raises_channel_not_open() -> None:
    dialer, accepter = linked()
    channel = dialer.open_channel("s", {})
    deliver(dialer, accepter)
    dialer.close_channel(channel)
    with pytest.raises(ChannelNotOpenError):
        dialer.send_data(channel, b"x")
    assert dialer.send_window(channel) == 0
    deliver(dialer, accepter)
    with pytest.raises(ChannelNotOpenError):
        accepter.send_data(channel, b"x")
    with pytest.raises(ChannelNotOpenError):
        accepter.send_data(12345, b"x")
    assert dialer.failure is None
    assert accepter.failure is None


def test_an_invalid_close_is_a_local_error() -> None:
    dialer, _ = linked()
    channel = dialer.open_channel("s", {})
    for code, reason in ((999, ""), (5000, ""), (1000, "r" * 5000)):
        with pytest.raises(LocalProtocolError):
            dialer.close_channel(channel, code, reason)
    assert dialer.channel_state(channel) is ChannelState.OPEN


# --- limits -------------------------------------------------------------------------------------


def test_a_peer_opening_more_than_max_channels_fails_the_link_with_4006() -> None:
    _, accepter = linked(Limits(max_channels=2))
    for channel in (1, 3):
        accepter.receive_data(encode_frame(Open(channel=channel, path="s", meta={})))
    expect_remote(accepter, Open(channel=5, path="s", meta={}), LimitError, 4006)


def test_opening_more_than_max_channels_ourselves_is_refused_until_a_close_completes() -> None:
    dialer, accepter = linked(Limits(max_channels=1))
    channel = dialer.open_channel("s", {})
    deliver(dialer, accepter)
    dialer.close_channel(channel)
    with pytest.raises(LocalProtocolError) as info:
        dialer.open_channel("s", {})
    assert info.value.code == CloseCode.LIMIT_REACHED
    assert dialer.failure is None
    deliver(dialer, accepter)
    deliver(accepter, dialer)
    assert dialer.open_channel("s", {}) == channel + 2
    deliver(dialer, accepter)
    # The limit counts each side's own channels: the accepter may still open one.
    assert accepter.open_channel("s", {}) == 2
    deliver(accepter, dialer)
    assert dialer.open_channels == 2


def test_an_oversized_open_is_a_local_error() -> None:
    dialer, _ = linked()
    with pytest.raises(LocalProtocolError):
        dialer.open_channel("p" * 5000, {})
    with pytest.raises(LocalProtocolError):
        dialer.open_channel("s", {str(i): i for i in range(100)})
    with pytest.raises(LocalProtocolError):
        dialer.open_channel("s", {"salt": bytearray(16)})
    assert dialer.data_to_send() == []
    assert dialer.open_channels == 0


# --- flow control -------------------------------------------------------------------------------


def test_send_data_is_all_or_nothing() -> None:
    dialer, _ = linked(WHOLE_WINDOW)
    channel = dialer.open_channel("s", {})
    dialer.data_to_send()
    assert dialer.send_data(channel, b"a" * 200 * KIB)
    assert not dialer.send_data(channel, b"b" * 100 * KIB)
    assert dialer.send_window(channel) == 56 * KIB
    assert dialer.send_data(channel, b"c" * 56 * KIB)
    assert dialer.send_window(channel) == 0
    assert not dialer.send_data(channel, b"d")
    sent = dialer.data_to_send()
    assert len(sent) == 2


def test_data_that_could_never_fit_is_a_local_error() -> None:
    dialer, _ = linked(Limits(initial_window=1000))
    channel = dialer.open_channel("s", {})
    for data in (b"", b"x" * 1001):
        with pytest.raises(LocalProtocolError):
            dialer.send_data(channel, data)
    dialer2, _ = linked()
    channel = dialer2.open_channel("s", {})
    with pytest.raises(LocalProtocolError) as info:
        dialer2.send_data(channel, b"x" * (256 * KIB + 1))
    assert info.value.code == CloseCode.LIMIT_REACHED
    assert dialer2.send_window(channel) == DEFAULT_LIMITS.initial_window


def test_data_too_large_for_a_message_is_refused_without_costing_window() -> None:
    dialer, _ = linked(Limits(max_message_size=100, max_data_size=200, initial_window=1000))
    channel = dialer.open_channel("s", {})
    with pytest.raises(LocalProtocolError) as info:
        dialer.send_data(channel, b"x" * 150)
    assert info.value.code == CloseCode.LIMIT_REACHED
    assert dialer.send_window(channel) == 1000
    assert dialer.send_data(channel, b"x" * 50)
    assert dialer.send_window(channel) == 950


def test_data_beyond_the_receive_window_fails_the_link_with_4004() -> None:
    dialer, accepter = linked(WHOLE_WINDOW)
    channel = dialer.open_channel("s", {})
    deliver(dialer, accepter)
    accepter.receive_data(encode_frame(Data(channel=channel, data=b"x" * 256 * KIB)))
    expect_remote(accepter, Data(channel=channel, data=b"x"), FlowControlError, 4004)


def test_acknowledging_half_the_window_grants_it_back() -> None:
    dialer, accepter = linked(WHOLE_WINDOW)
    channel = dialer.open_channel("s", {})
    deliver(dialer, accepter)
    for _ in range(4):
        assert dialer.send_data(channel, b"x" * 64 * KIB)
    assert not dialer.send_data(channel, b"y")
    assert len(deliver(dialer, accepter)) == 4
    accepter.acknowledge(channel, 100 * KIB)
    assert accepter.data_to_send() == []
    accepter.acknowledge(channel, 28 * KIB)
    assert deliver(accepter, dialer) == [WindowUpdated(channel=channel, available=128 * KIB)]
    assert dialer.send_window(channel) == 128 * KIB


def test_a_peer_waiting_to_send_a_whole_window_is_not_left_waiting() -> None:
    dialer, accepter = linked(WHOLE_WINDOW)
    channel = dialer.open_channel("s", {})
    assert dialer.send_data(channel, b"x")
    assert not dialer.send_data(channel, b"y" * 256 * KIB)
    deliver(dialer, accepter)
    # Far less than half the window, but everything received is consumed: all of it comes back.
    accepter.acknowledge(channel, 1)
    assert deliver(accepter, dialer) == [WindowUpdated(channel=channel, available=256 * KIB)]
    assert dialer.send_data(channel, b"y" * 256 * KIB)


def test_a_receiver_that_lags_grants_only_per_half_window() -> None:
    dialer, accepter = linked(WHOLE_WINDOW)
    channel = dialer.open_channel("s", {})
    for _ in range(16):
        assert dialer.send_data(channel, b"x" * 16 * KIB)
    deliver(dialer, accepter)
    grants = []
    # 15 of the 16 messages consumed: one grant at the half, none for the 7 after it.
    for _ in range(15):
        accepter.acknowledge(channel, 16 * KIB)
        grants += deliver(accepter, dialer)
    assert grants == [WindowUpdated(channel=channel, available=128 * KIB)]


@pytest.mark.parametrize("size", [1000, 4 * KIB, 64 * KIB, 256 * KIB])
def test_a_receiver_that_keeps_up_grants_once_per_half_window_with_the_default_limits(
    size: int,
) -> None:
    dialer, accepter = linked()
    channel = dialer.open_channel("s", {})
    count = 4 * DEFAULT_LIMITS.initial_window // size
    grants = 0
    for _ in range(count):
        assert dialer.send_data(channel, b"x" * size)
        for event in deliver(dialer, accepter):
            if isinstance(event, DataReceived):
                accepter.acknowledge(channel, len(event.data))
        grants += len(deliver(accepter, dialer))
    # Four windows consumed, one grant per half window: 8 `window` frames however small the
    # messages (a grant per message would be `count` frames); 1000-byte messages leave the last
    # half window short of its grant.
    assert grants == (7 if size == 1000 else 8)


def test_acknowledging_more_than_received_is_a_local_error() -> None:
    dialer, accepter = linked()
    channel = dialer.open_channel("s", {})
    dialer.send_data(channel, b"abc")
    deliver(dialer, accepter)
    with pytest.raises(LocalProtocolError):
        accepter.acknowledge(channel, 4)
    with pytest.raises(LocalProtocolError):
        accepter.acknowledge(channel, -1)
    accepter.acknowledge(channel, 3)
    assert accepter.failure is None


def test_a_window_grant_beyond_2_32_bytes_fails_the_link_with_4004() -> None:
    dialer, accepter = linked()
    channel = dialer.open_channel("s", {})
    deliver(dialer, accepter)
    expect_remote(accepter, Window(channel=channel, n=2**32 - 1), FlowControlError, 4004)


def test_granting_more_than_was_consumed_fails_the_link_with_4004() -> None:
    # A peer that reads nothing but grants a huge window would make a relay queue for it without
    # bound; an honest receiver only gives back what it consumed.
    dialer, accepter = linked(WHOLE_WINDOW)
    channel = dialer.open_channel("s", {})
    deliver(dialer, accepter)
    assert accepter.send_data(channel, b"x" * 1000)
    accepter.data_to_send()
    accepter.receive_data(encode_frame(Window(channel=channel, n=1000)))
    assert accepter.send_window(channel) == 256 * KIB
    expect_remote(accepter, Window(channel=channel, n=1), FlowControlError, 4004)


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=1000), min_size=1, max_size=60),
    acks=st.lists(st.floats(min_value=0.25, max_value=1), min_size=1, max_size=20),
)
def test_a_sender_loop_never_exceeds_the_window(sizes: list[int], acks: list[float]) -> None:
    limits = Limits(initial_window=1000, max_data_size=1000)
    dialer, accepter = linked(limits)
    channel = dialer.open_channel("s", {})
    deliver(dialer, accepter)
    in_flight = 0  # sent by the dialer and not yet granted back by the accepter
    unacked = 0
    received = 0
    turn = 0
    pending = list(sizes)
    for _ in range(50 * len(sizes) + 100):
        if not pending:
            break
        if dialer.send_data(channel, b"x" * pending[0]):
            in_flight += pending.pop(0)
            assert in_flight <= limits.initial_window
            continue
        # Blocked: the receiver takes what arrived and consumes a varying part of it.
        for event in deliver(dialer, accepter):
            assert isinstance(event, DataReceived)
            unacked += len(event.data)
            received += len(event.data)
        consume = max(1, round(unacked * acks[turn % len(acks)])) if unacked else 0
        turn += 1
        accepter.acknowledge(channel, consume)
        unacked -= consume
        for event in deliver(accepter, dialer):
            assert isinstance(event, WindowUpdated)
            in_flight = limits.initial_window - event.available
    else:
        pytest.fail("the sender never finished")
    for event in deliver(dialer, accepter):
        received += len(event.data) if isinstance(event, DataReceived) else 0
    assert received == sum(sizes)


# --- broadcast ----------------------------------------------------------------------------------
#
# The host is the dialer, the relay the accepter; the relay opens the host's channels (even ids)
# and the teammate opens its own (odd ids). Direction is about who sends, not who opened.


def relay_channel(dialer: Connection, accepter: Connection) -> int:
    """A channel the accepter opened, known to both sides, with nothing left to deliver."""
    channel = accepter.open_channel("session", {})
    deliver(accepter, dialer)
    return channel


def test_the_broadcast_frames_are_reported_as_events() -> None:
    host, relay = linked()
    channel = relay_channel(host, relay)
    host.cast(b"sealed once")
    host.join(channel)
    host.part(channel)
    assert deliver(host, relay) == [
        CastReceived(channel=None, data=b"sealed once"),
        CastJoined(channel=channel),
        CastParted(channel=channel),
    ]
    teammate, relay = linked()
    channel = teammate.open_channel("session", {})
    deliver(teammate, relay)
    assert relay.send_cast(channel, b"copy")
    relay.cut(channel)
    assert deliver(relay, teammate) == [
        CastReceived(channel=channel, data=b"copy"),
        CastCut(channel=channel),
    ]


def test_a_hosts_casts_and_joins_carry_their_group_to_the_relay() -> None:
    host, relay = linked()
    channel = relay_channel(host, relay)
    host.cast(b"to group 0")
    host.cast(b"to group 7", group=7)
    host.join(channel, group=MAX_CAST_GROUPS - 1)
    host.join(channel)
    assert deliver(host, relay) == [
        CastReceived(channel=None, data=b"to group 0"),
        CastReceived(channel=None, data=b"to group 7", group=7),
        CastJoined(channel=channel, group=MAX_CAST_GROUPS - 1),
        CastJoined(channel=channel),
    ]


@pytest.mark.parametrize("group", [-1, MAX_CAST_GROUPS, True, 1.0, "1", None])
def test_a_group_out_of_range_or_of_another_type_is_a_local_error(group: Any) -> None:
    host, relay = linked()
    channel = relay_channel(host, relay)
    with pytest.raises(LocalProtocolError):
        host.cast(b"x", group=group)
    with pytest.raises(LocalProtocolError):
        host.join(channel, group=group)
    assert host.failure is None
    assert host.data_to_send() == []


@pytest.mark.parametrize("g", [MAX_CAST_GROUPS, -1, True, "1"])
def test_a_hosts_cast_or_join_with_a_bad_group_fails_the_relays_link_with_4000(g: Any) -> None:
    for kind, channel, payload in (("cast", None, {"d": b"x", "g": g}), ("join", 2, {"g": g})):
        host, relay = linked()
        assert relay_channel(host, relay) == 2
        with pytest.raises(RemoteProtocolError) as info:
            relay.receive_data(msgpack.packb({"c": channel, "k": kind, "p": payload}))
        assert info.value.code == CloseCode.PROTOCOL_ERROR, kind
        assert relay.failure is info.value


def test_a_cast_without_a_channel_costs_no_window() -> None:
    host, relay = linked(WHOLE_WINDOW)
    channel = relay_channel(host, relay)
    for _ in range(3):
        host.cast(b"x" * 256 * KIB)
    assert len(deliver(host, relay)) == 3
    assert host.send_window(channel) == relay.send_window(channel) == 256 * KIB


@pytest.mark.parametrize(
    ("receiver", "frame"),
    [
        (Side.ACCEPTER, Cut(channel=1)),
        (Side.ACCEPTER, Cast(channel=1, data=b"x")),
        (Side.DIALER, Cast(channel=None, data=b"x")),
        (Side.DIALER, Join(channel=1)),
        (Side.DIALER, Part(channel=1)),
    ],
    ids=["cut-to-accepter", "cast-with-id-to-accepter", "cast-nil-to-dialer", "join", "part"],
)
def test_a_broadcast_frame_in_the_wrong_direction_fails_the_link(
    receiver: Side, frame: Frame
) -> None:
    dialer, accepter = linked()
    # Channel 1 exists on both sides: only the direction is wrong.
    assert dialer.open_channel("session", {}) == 1
    deliver(dialer, accepter)
    expect_remote(
        accepter if receiver is Side.ACCEPTER else dialer, frame, RemoteProtocolError, 4000
    )


def test_broadcast_calls_in_the_wrong_direction_are_local_errors() -> None:
    dialer, accepter = linked()
    channel = dialer.open_channel("session", {})
    deliver(dialer, accepter)
    calls: list[Callable[[], object]] = [
        lambda: accepter.cast(b"x"),
        lambda: accepter.join(channel),
        lambda: accepter.part(channel),
        lambda: dialer.cut(channel),
        lambda: dialer.send_cast(channel, b"x"),
    ]
    for call in calls:
        with pytest.raises(LocalProtocolError):
            call()
    assert dialer.failure is accepter.failure is None
    assert dialer.data_to_send() == accepter.data_to_send() == []
    assert dialer.send_window(channel) == accepter.send_window(channel) == 1 << 20


def test_casts_that_could_never_be_sent_are_local_errors() -> None:
    host, relay = linked(Limits(initial_window=1000, max_data_size=500))
    channel = relay_channel(host, relay)
    bad: list[Any] = [b"", b"x" * 501, bytearray(b"x")]
    for data in bad:
        with pytest.raises(LocalProtocolError):
            host.cast(data)
    with pytest.raises(LocalProtocolError) as info:
        relay.send_cast(channel, b"x" * 501)
    assert info.value.code == CloseCode.LIMIT_REACHED
    for data in (b"", "abc", None, [b"x"]):
        with pytest.raises(LocalProtocolError):
            relay.send_cast(channel, data)
    assert host.data_to_send() == relay.data_to_send() == []
    assert relay.send_window(channel) == 1000


def test_a_cast_too_large_for_a_message_is_refused_without_costing_window() -> None:
    host, relay = linked(Limits(max_message_size=100, max_data_size=200, initial_window=1000))
    channel = relay_channel(host, relay)
    with pytest.raises(LocalProtocolError) as info:
        relay.send_cast(channel, b"x" * 150)
    assert info.value.code == CloseCode.LIMIT_REACHED
    assert relay.send_window(channel) == 1000
    assert relay.data_to_send() == []


def test_broadcast_calls_on_a_closing_or_gone_channel_raise_channel_not_open() -> None:
    host, relay = linked()
    channel = relay_channel(host, relay)
    host.close_channel(channel)
    relay.close_channel(channel)
    host.data_to_send()
    relay.data_to_send()
    for call in (
        lambda: host.join(channel),
        lambda: host.part(channel),
        lambda: relay.cut(channel),
        lambda: relay.send_cast(channel, b"x"),
        lambda: relay.send_cast(99, b"x"),
        lambda: host.join(99),
    ):
        with pytest.raises(ChannelNotOpenError):
            call()
    assert host.failure is relay.failure is None
    assert host.data_to_send() == relay.data_to_send() == []


def test_casts_to_a_channel_share_its_window_with_data() -> None:
    teammate, relay = linked(Limits(initial_window=100, max_data_size=100))
    channel = teammate.open_channel("s", {})
    deliver(teammate, relay)
    teammate.receive_data(encode_frame(Data(channel=channel, data=b"d" * 60)))
    teammate.receive_data(encode_frame(Cast(channel=channel, data=b"c" * 40)))
    expect_remote(teammate, Cast(channel=channel, data=b"c"), FlowControlError, 4004)


def test_a_cast_beyond_the_receive_window_fails_the_link_with_4004() -> None:
    teammate, relay = linked(WHOLE_WINDOW)
    channel = teammate.open_channel("s", {})
    deliver(teammate, relay)
    teammate.receive_data(encode_frame(Cast(channel=channel, data=b"x" * 256 * KIB)))
    expect_remote(teammate, Data(channel=channel, data=b"x"), FlowControlError, 4004)


def test_send_cast_is_all_or_nothing_and_shares_the_window_with_send_data() -> None:
    teammate, relay = linked(WHOLE_WINDOW)
    channel = teammate.open_channel("s", {})
    deliver(teammate, relay)
    assert relay.send_data(channel, b"a" * 200 * KIB)
    assert not relay.send_cast(channel, b"b" * 100 * KIB)
    assert relay.send_window(channel) == 56 * KIB
    assert len(relay.data_to_send()) == 1
    assert relay.send_cast(channel, b"c" * 56 * KIB)
    assert relay.send_window(channel) == 0
    assert not relay.send_cast(channel, b"d")
    assert relay.data_to_send() == [encode_frame(Cast(channel=channel, data=b"c" * 56 * KIB))]


def test_acknowledging_cast_bytes_grants_the_window_back_like_data() -> None:
    teammate, relay = linked(WHOLE_WINDOW)
    channel = teammate.open_channel("s", {})
    deliver(teammate, relay)
    for _ in range(4):
        assert relay.send_cast(channel, b"x" * 64 * KIB)
    assert not relay.send_cast(channel, b"y")
    assert len(deliver(relay, teammate)) == 4
    teammate.acknowledge(channel, 100 * KIB)
    assert teammate.data_to_send() == []
    teammate.acknowledge(channel, 28 * KIB)
    assert deliver(teammate, relay) == [WindowUpdated(channel=channel, available=128 * KIB)]
    assert relay.send_window(channel) == 128 * KIB
    with pytest.raises(LocalProtocolError):
        teammate.acknowledge(channel, 128 * KIB + 1)


def test_a_cast_crossing_our_close_is_dropped_but_still_costs_window() -> None:
    teammate, relay = linked(Limits(initial_window=100, max_data_size=100))
    channel = teammate.open_channel("s", {})
    deliver(teammate, relay)
    teammate.close_channel(channel)
    teammate.receive_data(encode_frame(Cast(channel=channel, data=b"x" * 100)))
    assert teammate.events_received() == []
    expect_remote(teammate, Cast(channel=channel, data=b"x"), FlowControlError, 4004)


def test_join_part_and_cut_crossing_our_close_are_dropped() -> None:
    host, relay = linked()
    channel = relay_channel(host, relay)
    relay.close_channel(channel)
    for frame in (Join(channel=channel), Part(channel=channel)):
        relay.receive_data(encode_frame(frame))
    assert relay.events_received() == []
    assert relay.channel_state(channel) is ChannelState.CLOSE_SENT
    teammate, relay = linked()
    channel = teammate.open_channel("s", {})
    deliver(teammate, relay)
    teammate.close_channel(channel)
    teammate.receive_data(encode_frame(Cut(channel=channel)))
    assert teammate.events_received() == []
    assert teammate.failure is relay.failure is None


@pytest.mark.parametrize(
    ("receiver", "frame"),
    [
        (Side.ACCEPTER, Join(channel=7)),
        (Side.ACCEPTER, Part(channel=7)),
        (Side.DIALER, Cut(channel=8)),
        (Side.DIALER, Cast(channel=8, data=b"x")),
    ],
    ids=["join", "part", "cut", "cast"],
)
def test_a_broadcast_frame_for_an_unknown_channel_fails_the_link(
    receiver: Side, frame: Frame
) -> None:
    dialer, accepter = linked()
    expect_remote(
        accepter if receiver is Side.ACCEPTER else dialer, frame, RemoteProtocolError, 4000
    )


def test_a_join_after_the_peer_closed_the_channel_fails_the_link() -> None:
    host, relay = linked()
    channel = relay_channel(host, relay)
    host.close_channel(channel)
    deliver(host, relay)  # the relay answered and forgot the channel
    expect_remote(relay, Join(channel=channel), RemoteProtocolError, 4000)


def test_a_broadcast_frame_before_the_hello_fails_the_link() -> None:
    accepter = Connection(Side.ACCEPTER)
    accepter.send_hello({})
    expect_remote(accepter, Cast(channel=None, data=b"x"), RemoteProtocolError, 4000)


# --- failure ------------------------------------------------------------------------------------


def test_after_a_remote_error_every_call_raises_a_local_error() -> None:
    dialer, accepter = linked()
    channel = accepter.open_channel("s", {})
    deliver(accepter, dialer)
    with pytest.raises(RemoteProtocolError):
        dialer.receive_data(b"\xc1")
    calls: list[Callable[[], object]] = [
        lambda: dialer.receive_data(encode_frame(Window(channel=channel, n=1))),
        lambda: dialer.send_hello({}),
        lambda: dialer.open_channel("s", {}),
        lambda: dialer.send_data(channel, b"x"),
        lambda: dialer.send_window(channel),
        lambda: dialer.acknowledge(channel, 0),
        lambda: dialer.close_channel(channel),
        lambda: dialer.cast(b"x"),
        lambda: dialer.join(channel),
        lambda: dialer.part(channel),
        lambda: dialer.channel_state(channel),
        dialer.events_received,
        dialer.data_to_send,
    ]
    for call in calls:
        with pytest.raises(LocalProtocolError) as info:
            call()
        assert info.value.code == CloseCode.PROTOCOL_ERROR


# --- many channels ------------------------------------------------------------------------------

Step = tuple[str, int, int]  # (who, channel index, size) or ("deliver", 0, 0)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["dialer", "accepter"]), st.integers(0, 15), st.integers(1, 300))
        | st.just(("deliver", 0, 0)),
        max_size=120,
    )
)
def test_data_never_shows_up_on_another_channel(steps: list[Step]) -> None:
    limits = Limits(initial_window=2000, max_data_size=2000)
    dialer, accepter = linked(limits)
    ends = {"dialer": dialer, "accepter": accepter}
    # Each side opens eight channels, so both directions carry interleaved streams.
    ids = [dialer.open_channel("s", {}) for _ in range(8)]
    ids += [accepter.open_channel("s", {}) for _ in range(8)]
    deliver(dialer, accepter)
    deliver(accepter, dialer)
    sent: dict[tuple[str, int], bytearray] = {}
    got: dict[tuple[str, int], bytearray] = {}
    counter = 0

    def pump() -> None:
        for source, target, target_name in (
            (dialer, accepter, "accepter"),
            (accepter, dialer, "dialer"),
        ):
            for event in deliver(source, target):
                if isinstance(event, DataReceived):
                    got.setdefault((target_name, event.channel), bytearray()).extend(event.data)
                    target.acknowledge(event.channel, len(event.data))

    for who, index, size in steps:
        if who == "deliver":
            pump()
            continue
        channel = ids[index]
        counter += 1
        # Every message names its channel, so a stray one is caught by content, not only count.
        message = f"<{channel}:{counter}>".encode().ljust(size + 12, b".")
        if ends[who].send_data(channel, message):
            peer = "accepter" if who == "dialer" else "dialer"
            sent.setdefault((peer, channel), bytearray()).extend(message)
    for _ in range(3):
        pump()
    assert got == sent
    for (_, channel), stream in got.items():
        assert {int(tag) for tag in re.findall(rb"<(\d+):", bytes(stream))} == {channel}
