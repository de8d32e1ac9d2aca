"""The one seam between a link and the WebSocket library under it: `Framing`, everything a `Link`
does with its WebSocket (read messages, write batches, close), and `WebsocketsFraming`, the
implementation over python-websockets.

A link hands over a batch of messages and expects their frames in one socket write
(tunnel/link/core.py says why). A message is bytes, or a head and the data behind it (a `data`
frame, `proto.Outgoing`): the data is written as it is, never joined into a message first, so a
relay forwards a received payload with one copy (the socket write's) and a client's masking is
the only other pass over it. `WebsocketsFraming` frames here (RFC 6455, section 5.2) and writes
to the connection's transport, leaving parsing, pings and the close to websockets; once the link
takes messages as they come, it takes websockets' parsed frames from the connection's
`process_event` (the hook its `data_received` calls per frame, which its client and server
classes override for the handshake) instead of from its message queue.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import AsyncIterable, Callable, Iterable
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from websockets.asyncio.connection import Connection as WebSocket
from websockets.exceptions import ConnectionClosed
from websockets.frames import Frame, Opcode
from websockets.protocol import Side, State

try:  # websockets' C masking; its pure Python fallback is two orders of magnitude slower
    from websockets.speedups import apply_mask
except ImportError:  # pragma: no cover - a build of websockets without its C extension
    from websockets.utils import apply_mask

from tunnel.proto import Outgoing
from tunnel.proto.codes import CloseCode

_OP_TEXT = 0x81
"""FIN and the text opcode: a whole text message in one frame."""
_OP_BINARY = 0x82
"""FIN and the binary opcode: a whole binary message in one frame."""
_MASKED = 0x80
_SHORT = struct.Struct("!BB")
_MEDIUM = struct.Struct("!BBH")
_LONG = struct.Struct("!BBQ")
_MASK_SIZE = 4


def frame_header(opcode: int, size: int, mask: bytes = b"") -> bytes:
    """The header of one unfragmented frame of `size` payload bytes, with the masking key `mask`
    (4 bytes, a client's) or none (a server's)."""
    bit = _MASKED if mask else 0
    if size < 126:
        header = _SHORT.pack(opcode, bit | size)
    elif size < 65536:
        header = _MEDIUM.pack(opcode, bit | 126, size)
    else:
        header = _LONG.pack(opcode, bit | 127, size)
    return header + mask if mask else header


def frame_pieces(messages: Iterable[Outgoing | str], *, mask: bool) -> list[bytes | memoryview]:
    """The frames of `messages` (bytes and heads with data as binary, str as text), as pieces to
    write in order: a data's bytes are a piece of their own, uncopied unless masked."""
    pieces: list[bytes | memoryview] = []
    append = pieces.append
    head: bytes
    data: bytes | memoryview
    for message in messages:
        if isinstance(message, str):
            head, data, opcode = b"", message.encode(), _OP_TEXT
        elif isinstance(message, bytes):
            head, data, opcode = b"", message, _OP_BINARY
        else:
            (head, data), opcode = message, _OP_BINARY
        size = len(head) + len(data)
        if not mask:
            append(frame_header(opcode, size) + head)
            append(data)
            continue
        # A client masks every frame with a fresh key (RFC 6455, section 5.3). The data's key is
        # the frame's, turned by the head's length, so the two are masked apart.
        key = os.urandom(_MASK_SIZE)
        turn = len(head) % _MASK_SIZE
        append(frame_header(opcode, size, key) + (apply_mask(head, key) if head else b""))
        append(apply_mask(data, key[turn:] + key[:turn]))
    return pieces


class Framing(Protocol):
    """What a link needs of the WebSocket library under it."""

    @property
    def closed_errors(self) -> tuple[type[BaseException], ...]:
        """What reading or a write guard raises once the WebSocket is closed or fails."""

    @property
    def is_open(self) -> bool:
        """Whether messages may be written now: open, and no close begun."""

    @property
    def is_closed(self) -> bool:
        """Whether the WebSocket is closed for good."""

    def messages(self) -> AsyncIterable[bytes | str]:
        """The messages received, in order; ends, or raises one of `closed_errors`, once the
        WebSocket closes."""

    def receive_with(self, on_message: Callable[[bytes | str], None]) -> bool:
        """From now on hand every message to `on_message` as it is parsed, from the socket's
        read callback, instead of through `messages()` (which then only ends once the WebSocket
        closes). Refused (False) while received messages still wait in `messages()`, and by a
        framing that cannot; then read on and ask again."""

    def write_messages(self, messages: Iterable[Outgoing | str]) -> None:
        """Frame `messages` and hand them to the socket in one write; the WebSocket is open."""

    def backed_up(self) -> bool:
        """Whether the socket's buffer is over its high-water mark (the writer must wait)."""

    def write_guard(self) -> AbstractAsyncContextManager[None]:
        """What a write that may wait runs in: raises one of `closed_errors` if the WebSocket is
        not open, and on exit waits until the socket's buffer drains."""

    async def close(self, code: int, reason: str) -> None:
        """Run the closing handshake with `code` and `reason`; returns once closed (at once if
        it already was). Never raises for a WebSocket that closed meanwhile."""

    async def wait_closed(self) -> None:
        """Wait until the WebSocket is closed."""

    def abort(self) -> None:
        """Drop the connection at once, without a closing handshake."""

    def close_reason(self) -> tuple[int, str, bool]:
        """Once closed without our asking: the code, the reason, and whether the peer closed
        (else the WebSocket layer did, e.g. a message too big or a keepalive timeout)."""


class WebsocketsFraming:
    """`Framing` over a python-websockets connection."""

    __slots__ = ("_mask", "_websocket")

    closed_errors: tuple[type[BaseException], ...] = (ConnectionClosed,)

    def __init__(self, websocket: WebSocket) -> None:
        self._websocket = websocket
        self._mask = websocket.protocol.side is Side.CLIENT

    @property
    def is_open(self) -> bool:
        return self._websocket.protocol.state is State.OPEN

    @property
    def is_closed(self) -> bool:
        return self._websocket.state is State.CLOSED

    def messages(self) -> AsyncIterable[bytes | str]:
        return self._websocket

    def receive_with(self, on_message: Callable[[bytes | str], None]) -> bool:
        """Take websockets' frames as its connection parses them (`process_event`, which its
        `data_received` calls for each), skipping its message queue and a wake-up of the reader
        per message; only once that queue is empty, so that no message is passed over."""
        websocket = self._websocket
        if queued_frames(websocket) != 0:
            return False  # some wait in websockets' queue, or this version does not say
        websocket.process_event = _Reassembler(websocket, on_message)  # type: ignore[method-assign]
        return True

    def write_messages(self, messages: Iterable[Outgoing | str]) -> None:
        """Frame `messages` and write them to the transport at once.

        The connection must be open (checked by the caller, e.g. inside `write_guard()`), and
        no frame of websockets' own may be half written: websockets writes every frame whole
        within one call, on the same event loop, so frames never interleave.
        """
        self._websocket.transport.writelines(frame_pieces(messages, mask=self._mask))

    def backed_up(self) -> bool:
        """Whether the transport's buffer is over its high-water mark."""
        transport = self._websocket.transport
        return transport.get_write_buffer_size() > transport.get_write_buffer_limits()[1]

    def write_guard(self) -> AbstractAsyncContextManager[None]:
        # The guard websockets' own send() runs in: state check, errors become ConnectionClosed,
        # drain on exit.
        return self._websocket.send_context()

    async def close(self, code: int, reason: str) -> None:
        with contextlib.suppress(ConnectionClosed):
            await self._websocket.close(code, reason)

    async def wait_closed(self) -> None:
        await self._websocket.wait_closed()

    def abort(self) -> None:
        transport = getattr(self._websocket, "transport", None)
        if transport is not None:
            transport.abort()

    def close_reason(self) -> tuple[int, str, bool]:
        protocol = self._websocket.protocol
        sent, received = protocol.close_sent, protocol.close_rcvd
        if sent is not None and (received is None or not protocol.close_rcvd_then_sent):
            # websockets closed on its own: message too big (1009), keepalive timeout (1011), a
            # malformed WebSocket frame (1002).
            return sent.code, sent.reason, False
        if received is None:
            return CloseCode.ABNORMAL_CLOSURE, "", True
        return received.code, received.reason, True


def queued_frames(websocket: WebSocket) -> int | None:
    """Frames `websocket` has received and not yet handed out: what `recv()` returns without
    waiting. None when this version of websockets does not say."""
    frames = getattr(getattr(websocket, "recv_messages", None), "frames", None)
    return len(frames) if frames is not None else None


class _Reassembler:
    """What a websockets connection calls for each frame it parsed, once a link takes its
    messages as they come (`WebsocketsFraming.receive_with`): a whole binary message goes out
    as it is, a fragmented one once its last frame came (websockets' protocol bounds its size by
    `max_size`), text as `str` (a link refuses any text message, so text that is not UTF-8 needs
    no close code of its own); a pong answers websockets' keepalive as its own handler would."""

    __slots__ = ("_fragments", "_on_message", "_text", "_websocket")

    def __init__(self, websocket: WebSocket, on_message: Callable[[bytes | str], None]) -> None:
        self._websocket = websocket
        self._on_message = on_message
        self._fragments: bytearray | None = None
        self._text = False

    def __call__(self, event: object) -> None:
        assert isinstance(event, Frame)
        opcode = event.opcode
        if opcode is Opcode.BINARY and event.fin and self._fragments is None:
            data = event.data
            self._on_message(data if type(data) is bytes else bytes(data))
        elif opcode is Opcode.TEXT or opcode is Opcode.BINARY or opcode is Opcode.CONT:
            if opcode is not Opcode.CONT:
                self._fragments, self._text = bytearray(), opcode is Opcode.TEXT
            if self._fragments is None:
                return  # websockets' protocol refuses a continuation without a start
            self._fragments += event.data
            if event.fin:
                message, self._fragments = bytes(self._fragments), None
                self._on_message(message.decode("utf-8", "replace") if self._text else message)
        elif opcode is Opcode.PONG:
            self._websocket.acknowledge_pings(bytes(event.data))
