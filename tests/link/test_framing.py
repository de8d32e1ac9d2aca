"""The link's WebSocket framing: websockets' own parser reads back exactly what was framed, and
what it parses is handed to a link taking messages as they come exactly as they were sent."""

from __future__ import annotations

import random

import pytest
from websockets.frames import Frame, Opcode
from websockets.protocol import Protocol, Side, State

from tunnel.link.framing import _Reassembler, apply_mask, frame_header, frame_pieces
from tunnel.proto import Outgoing
from tunnel.proto.frames import data_head

SIZES = [1, 2, 3, 4, 5, 100, 125, 126, 127, 200, 65535, 65536, 70000]
"""Around the boundaries of the three length forms, and of the 4-byte masking key."""


def parse(pieces: list[bytes | memoryview], *, from_client: bool) -> list[Frame]:
    """The frames a websockets end of the other side reads from `pieces`."""
    reader = Protocol(Side.SERVER if from_client else Side.CLIENT, state=State.OPEN, max_size=None)
    reader.receive_data(b"".join(pieces))
    frames = []
    for event in reader.events_received():
        assert isinstance(event, Frame)
        frames.append(event)
    assert reader.state is State.OPEN  # nothing malformed, no close
    return frames


@pytest.mark.parametrize("mask", [True, False], ids=["client", "server"])
def test_heads_and_data_are_read_back_as_one_binary_message_each(mask: bool) -> None:
    messages: list[Outgoing] = []
    for size in SIZES:
        data = bytes(range(256)) * (size // 256) + bytes(range(size % 256))
        # The data as the relay passes it on: a view into a larger received message.
        view = memoryview(b"xyz" + data)[3:]
        messages.append((data_head(size % 7, size), view))
        messages.append(data)
    frames = parse(frame_pieces(messages, mask=mask), from_client=mask)
    assert len(frames) == len(messages)
    for frame, message in zip(frames, messages, strict=True):
        assert frame.opcode is Opcode.BINARY
        assert frame.fin
        expected = message if isinstance(message, bytes) else message[0] + bytes(message[1])
        assert frame.data == expected


def test_text_is_framed_as_text() -> None:
    frames = parse(frame_pieces(["héllo", b"\x00"], mask=True), from_client=True)
    assert [(frame.opcode, bytes(frame.data)) for frame in frames] == [
        (Opcode.TEXT, "héllo".encode()),
        (Opcode.BINARY, b"\x00"),
    ]


def test_a_server_writes_the_data_it_forwards_as_a_piece_of_its_own() -> None:
    data = memoryview(bytes(4096))
    pieces = frame_pieces([(data_head(1, 4096), data)], mask=False)
    assert pieces[1] is data  # written as it is: no copy before the socket's


def test_a_client_masks_each_frame_with_its_own_key() -> None:
    data = bytes(64)
    first, second = (frame_pieces([data], mask=True)[1] for _ in range(2))
    assert first != data
    assert second != data
    assert first != second


class _Pongs:
    """What `_Reassembler` needs of a websockets connection: where a pong goes."""

    def __init__(self) -> None:
        self.pongs: list[bytes] = []

    def acknowledge_pings(self, data: bytes) -> None:
        self.pongs.append(data)


def _random_messages(rng: random.Random) -> tuple[list[bytes], list[bytes | str], list[bytes]]:
    """Client frames (the wire bytes of each), the messages they make, and the pongs among
    them: whole and fragmented binary and text messages, empty fragments, pings and pongs
    between fragments (RFC 6455, section 5.4: control frames may come in the middle)."""
    wire: list[bytes] = []
    messages: list[bytes | str] = []
    pongs: list[bytes] = []

    def frame(first_byte: int, payload: bytes) -> None:
        key = rng.randbytes(4)
        wire.append(frame_header(first_byte, len(payload), key) + apply_mask(payload, key))

    for _ in range(rng.randint(1, 30)):
        text = rng.random() < 0.2
        if text:
            message: bytes | str = "".join(rng.choice("aé€😀") for _ in range(rng.randint(0, 40)))
            data = message.encode()
        else:
            message = data = rng.randbytes(rng.choice([0, 1, 5, 125, 126, 300, 70000]))
        cuts = sorted(rng.randint(0, len(data)) for _ in range(rng.choice([0, 0, 1, 2, 5])))
        parts = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        for index, part in enumerate(parts):
            opcode = (0x01 if text else 0x02) if index == 0 else 0x00
            frame(opcode | (0x80 if index == len(parts) - 1 else 0), part)
            if rng.random() < 0.2:
                pong = rng.randbytes(rng.randint(0, 8))
                frame(0x8A, pong)  # a pong, FIN set
                pongs.append(pong)
            if rng.random() < 0.1:
                frame(0x89, b"ping")
        messages.append(message)
    return wire, messages, pongs


@pytest.mark.parametrize("seed", range(200))
def test_messages_taken_as_they_are_parsed_are_the_messages_sent(seed: int) -> None:
    # Seeded random frame sequences, cut into reads at random places: what `receive_with`
    # hands over is exactly the messages sent, in order, and every pong reaches keepalive.
    rng = random.Random(seed)
    wire, sent, pongs = _random_messages(rng)
    stream = b"".join(wire)
    connection = _Pongs()
    received: list[bytes | str] = []
    reassemble = _Reassembler(connection, received.append)  # type: ignore[arg-type]
    reader = Protocol(Side.SERVER, state=State.OPEN, max_size=None)
    start = 0
    while start < len(stream):
        end = min(len(stream), start + rng.choice([1, 7, 1000, 65536]))
        reader.receive_data(stream[start:end])
        for event in reader.events_received():
            reassemble(event)
        start = end
    assert reader.state is State.OPEN
    assert received == sent
    assert all(type(message) in (bytes, str) for message in received)
    assert connection.pongs == pongs
