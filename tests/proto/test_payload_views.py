"""Connection: data received as views into the message and sent without being joined to its head
(what a relay forwards), judged exactly as the copying path judges it."""

from __future__ import annotations

import msgpack
import pytest

from tunnel.proto import (
    Connection,
    Data,
    DataReceived,
    FlowControlError,
    LimitError,
    Limits,
    LocalProtocolError,
    RemoteProtocolError,
    Side,
    encode_frame,
)

KIB = 1024
DEFAULT = Limits()


def viewing_pair(limits: Limits = DEFAULT) -> tuple[Connection, Connection]:
    """(dialer, accepter) with hellos exchanged; the accepter reports data as views."""
    dialer = Connection(Side.DIALER, limits=limits)
    accepter = Connection(Side.ACCEPTER, limits=limits, payload_views=True)
    accepter.send_hello({"role": "relay"})
    dialer.send_hello({"role": "teammate"})
    for message in accepter.data_to_send():
        dialer.receive_data(message)
    for message in dialer.data_to_send():
        accepter.receive_data(message)
    dialer.events_received()
    accepter.events_received()
    return dialer, accepter


def test_data_arrives_as_a_view_into_the_message_and_is_forwarded_uncopied() -> None:
    dialer, accepter = viewing_pair()
    channel = dialer.open_channel("s", {})
    out = accepter.open_channel("s", {})
    for message in dialer.data_to_send():
        accepter.receive_data(message)
    for message in accepter.data_to_send():
        dialer.receive_data(message)
    dialer.events_received()
    accepter.events_received()
    assert dialer.send_data(channel, b"payload" * 100)
    (message,) = dialer.data_to_send()
    accepter.receive_data(message)
    (event,) = accepter.events_received()
    assert isinstance(event, DataReceived)
    assert isinstance(event.data, memoryview)
    assert event.data == b"payload" * 100
    assert event.data.obj is message
    # Forwarded on the accepter's own channel: the view itself goes out behind a new head.
    assert accepter.send_data(out, event.data)
    (written,) = accepter.data_to_write()
    assert isinstance(written, tuple)
    assert written[1] is event.data
    assert written[0] + bytes(written[1]) == encode_frame(Data(channel=out, data=b"payload" * 100))


def test_data_in_any_other_msgpack_form_is_read_as_before() -> None:
    dialer, accepter = viewing_pair()
    channel = dialer.open_channel("s", {})
    for message in dialer.data_to_send():
        accepter.receive_data(message)
    accepter.events_received()
    # A 32-bit int where one byte would do: valid msgpack, not the form our encoder writes.
    odd = msgpack.packb({"c": channel, "k": "data", "p": {"d": b"hi"}})
    odd = odd.replace(bytes([0xA1, ord("c"), channel]), b"\xa1c\xce" + channel.to_bytes(4, "big"))
    accepter.receive_data(odd)
    (event,) = accepter.events_received()
    assert isinstance(event, DataReceived)
    assert event.data == b"hi"


def test_a_viewed_message_over_max_message_size_fails_the_link() -> None:
    limits = Limits(max_message_size=100, max_data_size=200, initial_window=1000)
    dialer, accepter = viewing_pair(limits)
    channel = dialer.open_channel("s", {})
    for message in dialer.data_to_send():
        accepter.receive_data(message)
    with pytest.raises(LimitError):
        accepter.receive_data(encode_frame(Data(channel=channel, data=b"x" * 150)))


def test_viewed_data_beyond_the_window_fails_the_link_with_4004() -> None:
    limits = Limits(initial_window=256 * KIB, max_data_size=256 * KIB)
    dialer, accepter = viewing_pair(limits)
    channel = dialer.open_channel("s", {})
    for message in dialer.data_to_send():
        accepter.receive_data(message)
    accepter.receive_data(encode_frame(Data(channel=channel, data=b"x" * 256 * KIB)))
    with pytest.raises(FlowControlError) as info:
        accepter.receive_data(encode_frame(Data(channel=channel, data=b"x")))
    assert info.value.code == 4004


def test_viewed_data_on_an_unknown_channel_fails_the_link() -> None:
    _, accepter = viewing_pair()
    with pytest.raises(RemoteProtocolError):
        accepter.receive_data(encode_frame(Data(channel=7, data=b"x")))


def test_data_before_the_hello_fails_a_viewing_connection() -> None:
    accepter = Connection(Side.ACCEPTER, payload_views=True)
    accepter.send_hello({"role": "relay"})
    with pytest.raises(RemoteProtocolError):
        accepter.receive_data(encode_frame(Data(channel=1, data=b"x")))


def test_a_bytearray_is_copied_and_a_bad_type_refused() -> None:
    dialer, _accepter = viewing_pair()
    channel = dialer.open_channel("s", {})
    buffer = bytearray(b"abc")
    assert dialer.send_data(channel, buffer)
    buffer[0] = ord("z")  # the caller's again once send_data returned
    assert dialer.data_to_send()[-1].endswith(b"abc")
    with pytest.raises(LocalProtocolError):
        dialer.send_data(channel, "abc")  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError):
        dialer.send_data(True, b"abc")
