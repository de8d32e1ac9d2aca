"""The link's WebSocket framing: websockets' own parser reads back exactly what was framed."""

from __future__ import annotations

import pytest
from websockets.frames import Frame, Opcode
from websockets.protocol import Protocol, Side, State

from tunnel.link.framing import frame_pieces
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
