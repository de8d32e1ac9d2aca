"""Two real websockets asyncio connections joined by an in-memory stream, and links running on them.

Why not a fake WebSocket: `Link` relies on the exact semantics of
`websockets.asyncio.connection.Connection` (`send` blocking under backpressure, the closing
handshake, `ConnectionClosed` from iteration, `protocol.close_sent/close_rcvd`, `state`,
`transport.abort()`), and a fake would encode our guesses about them. Here the WebSocket objects
are the library's own, each over a sans-I/O `websockets.protocol.Protocol` already OPEN (the HTTP
handshake precedes `Link` and is not what we test); only the byte stream beneath them is ours.
`MemoryTransport` is the smallest `asyncio.Transport` with a stream socket's semantics: bytes
arrive in order and later (never inside `write`), a reader that paused reading stops taking bytes
so the writer's buffer fills and `pause_writing()` makes `send` block, EOF follows the buffered
bytes, `close()` waits for them to be read, and `abort()` drops them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from websockets.asyncio.connection import Connection as WebSocket
from websockets.protocol import Protocol
from websockets.protocol import Side as WebSocketSide

from tunnel.link import ChannelMux, Link, LinkClosedError
from tunnel.proto import DEFAULT_LIMITS, Connection, Event, Limits, Side

READ_SIZE = 64 * 1024
"""Most bytes one `data_received` call gets, like one `recv()` of a socket."""


class MemoryTransport(asyncio.Transport):
    """One end of an in-memory stream connection; `MemoryTransport.pair` makes both ends.

    `_buffer` holds what this end wrote and its peer has not read yet: the write buffer, the
    network and the peer's receive buffer in one. It is bounded the way a socket's is: once the
    peer pauses reading it only grows by what the protocol writes before `pause_writing()`
    makes the protocol wait in `drain()`.
    """

    def __init__(self, protocol: asyncio.Protocol, name: str) -> None:
        super().__init__(extra={"sockname": ("memory", name), "peername": ("memory", "peer")})
        self._loop = asyncio.get_running_loop()
        self._protocol = protocol
        self._peer: MemoryTransport | None = None
        self._buffer = bytearray()
        self._fin = False
        """No byte follows `_buffer`: the peer reads EOF once it is empty."""
        self._eof_read = False
        self._reading = True
        self._read_scheduled = False
        self._closing = False
        self._lost = False
        self._write_paused = False
        self._high = 64 * 1024
        self._low = 16 * 1024

    @classmethod
    def pair(
        cls, first: asyncio.Protocol, second: asyncio.Protocol
    ) -> tuple[MemoryTransport, MemoryTransport]:
        """Connect two protocols; call `connection_made` on each, as a real loop would."""
        a, b = cls(first, "a"), cls(second, "b")
        a._peer, b._peer = b, a
        first.connection_made(a)
        second.connection_made(b)
        return a, b

    @property
    def peer(self) -> MemoryTransport:
        """The other end."""
        assert self._peer is not None
        return self._peer

    # -- asyncio.Transport --------------------------------------------------------------------

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        assert isinstance(protocol, asyncio.Protocol)
        self._protocol = protocol

    def is_closing(self) -> bool:
        return self._closing

    def is_reading(self) -> bool:
        return self._reading and not self._closing

    def pause_reading(self) -> None:
        self._reading = False

    def resume_reading(self) -> None:
        self._reading = True
        self._schedule_read()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        # asyncio's defaults and derivation (selector_events._SelectorTransport).
        if high is None:
            high = 64 * 1024 if low is None else 4 * low
        if low is None:
            low = high // 4
        self._high, self._low = high, low
        self._check_pause()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._low, self._high

    def get_write_buffer_size(self) -> int:
        return len(self._buffer)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or self._lost:
            return  # asyncio drops writes on a closed transport, after a warning
        if self._fin:
            raise RuntimeError("write() after write_eof()")
        if not data:
            return
        self._buffer += data
        self.peer._schedule_read()
        self._check_pause()

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self._fin = True
        self.peer._schedule_read()

    def close(self) -> None:
        """Stop reading; once the peer has read everything written, the connection is lost."""
        if self._closing:
            return
        self._closing = True
        self._fin = True
        self.peer._schedule_read()
        self._maybe_lose()

    def abort(self) -> None:
        """Drop what the peer has not read yet; the connection is lost at once."""
        self._closing = True
        self._fin = True
        self._buffer.clear()
        self.peer._schedule_read()
        self._lose()

    # -- the stream ---------------------------------------------------------------------------

    def _schedule_read(self) -> None:
        # A socket becomes readable later, never inside the peer's write().
        if not self._read_scheduled and not self._lost:
            self._read_scheduled = True
            self._loop.call_soon(self._read)

    def _read(self) -> None:
        self._read_scheduled = False
        if self._lost or self._closing or not self._reading:
            return
        source = self.peer
        if source._buffer:
            chunk = bytes(source._buffer[:READ_SIZE])
            del source._buffer[:READ_SIZE]
            source._drained()
            self._protocol.data_received(chunk)
            self._schedule_read()
        elif source._fin and not self._eof_read:
            self._eof_read = True
            if not self._protocol.eof_received():
                self.close()

    def _drained(self) -> None:
        if self._write_paused and len(self._buffer) <= self._low:
            self._write_paused = False
            self._protocol.resume_writing()
        self._maybe_lose()

    def _check_pause(self) -> None:
        if not self._write_paused and len(self._buffer) > self._high:
            self._write_paused = True
            self._protocol.pause_writing()

    def _maybe_lose(self) -> None:
        # close() completes once the peer has read the buffer, or at once if the peer is gone
        # (a real peer would answer further bytes with a reset).
        if self._closing and (not self._buffer or self.peer._lost):
            self._lose()

    def _lose(self) -> None:
        if self._lost:
            return
        self._lost = True
        self._loop.call_soon(self._protocol.connection_lost, None)
        peer = self.peer
        if peer._closing:
            peer._buffer.clear()
            peer._maybe_lose()


def websocket_pair(
    *,
    max_size: int | None = 2**20,
    max_queue: int = 16,
    write_limit: int = 2**15,
) -> tuple[WebSocket, WebSocket]:
    """Return (client, server): two OPEN WebSocket connections talking to each other in memory.

    The options are those of `websockets.connect` and apply to both ends; keepalive is off so
    nothing runs on a timer. Call inside the event loop that will use them.
    """

    def end(side: WebSocketSide) -> WebSocket:
        return WebSocket(
            Protocol(side, max_size=max_size),
            ping_interval=None,
            max_queue=max_queue,
            write_limit=write_limit,
        )

    client, server = end(WebSocketSide.CLIENT), end(WebSocketSide.SERVER)
    MemoryTransport.pair(client, server)
    return client, server


# -- links over the pair ----------------------------------------------------------------------


class EventLog:
    """Every protocol event one end reported, with a way to wait until one of them is there."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._changed = anyio.Event()

    def record(self, event: Event) -> None:
        self.events.append(event)
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for(self, predicate: Callable[[list[Event]], bool]) -> None:
        """Return once `predicate(events)` holds; it is checked after every new event."""
        while not predicate(self.events):
            await self._changed.wait()


class Endpoint:
    """One end of a link under test: its `Link`, its `ChannelMux` and what `run` returned."""

    def __init__(
        self,
        websocket: WebSocket,
        side: Side,
        *,
        limits: Limits = DEFAULT_LIMITS,
        backlog: int = 64,
        send_timeout: float | None = None,
    ) -> None:
        self.link = Link(
            websocket, Connection(side, limits=limits), send_timeout=send_timeout, label=side.value
        )
        self.mux = ChannelMux(self.link, backlog=backlog)
        self.log = EventLog()
        self.result: LinkClosedError | None = None
        """What `Link.run` returned, once it did (and `mux.link_closed` was called)."""
        self._stopped = anyio.Event()

    def on_event(self, event: Event) -> None:
        self.log.record(event)
        self.mux.on_event(event)

    async def run(self) -> None:
        """What an endpoint (host, teammate client) does: run the link, then close the mux."""
        closed = await self.link.run(self.on_event)
        self.mux.link_closed(closed)
        self.result = closed
        self._stopped.set()

    async def wait_stopped(self) -> LinkClosedError:
        """Wait until `run` returned; return its result."""
        await self._stopped.wait()
        assert self.result is not None
        return self.result

    def send_hello(self, payload: dict[str, Any]) -> None:
        self.link.connection.send_hello(payload)
        self.link.flush()


@asynccontextmanager
async def running(*endpoints: Endpoint) -> AsyncIterator[None]:
    """Run the endpoints' links for the body; then close them and wait for `run` to return."""
    async with anyio.create_task_group() as tg:
        for endpoint in endpoints:
            tg.start_soon(endpoint.run)
        yield
        for endpoint in endpoints:
            await endpoint.link.aclose()


@asynccontextmanager
async def linked(
    *, limits: Limits = DEFAULT_LIMITS, backlog: int = 64
) -> AsyncIterator[tuple[Endpoint, Endpoint]]:
    """Yield (dialer, accepter): two endpoints running, hellos exchanged both ways."""
    client, server = websocket_pair()
    dialer = Endpoint(client, Side.DIALER, limits=limits, backlog=backlog)
    accepter = Endpoint(server, Side.ACCEPTER, limits=limits, backlog=backlog)
    async with running(dialer, accepter):
        accepter.send_hello({"role": "accepter"})
        dialer.send_hello({"role": "dialer"})
        assert await dialer.mux.wait_hello() == {"role": "accepter"}
        assert await accepter.mux.wait_hello() == {"role": "dialer"}
        yield dialer, accepter
