"""Two WebSocket ends joined by a real TCP socket on 127.0.0.1, on either framing the link runs
over: python-websockets (`WebsocketsFraming`) or picows (`PicowsFraming`).

picows writes to the socket's file descriptor itself, so it cannot run over the in-memory
transport of memory_websocket.py: the tests that compare the two framings use real sockets.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.connection import Connection as WebSocket
from websockets.asyncio.server import ServerConnection, serve

from tunnel.link import Link
from tunnel.link.framing import (
    Framing,
    WebsocketsFraming,
    apply_mask,
    frame_header,
    queued_frames,
)
from tunnel.proto import DEFAULT_LIMITS, Connection, Limits, Side

try:
    import picows  # noqa: F401
except ImportError:
    HAS_PICOWS = False
else:
    HAS_PICOWS = True

FRAMINGS = [
    pytest.param("websockets", id="websockets"),
    pytest.param(
        "picows",
        id="picows",
        # The `test` extra installs picows: it is missing only from an install without it.
        marks=pytest.mark.skipif(not HAS_PICOWS, reason="picows is not installed"),
    ),
]
"""The framings a test runs over, for `pytest.mark.parametrize("framing", FRAMINGS)`."""


@dataclass
class End:
    """One end: its framing, and the websockets connection under it (None on picows)."""

    framing: Framing
    websocket: WebSocket | None

    def link(
        self, side: Side, *, limits: Limits = DEFAULT_LIMITS, send_timeout: float | None = None
    ) -> Link:
        return Link(
            self.websocket,
            Connection(side, limits=limits),
            send_timeout=send_timeout,
            label=side.value,
            framing=self.framing,
        )

    def pause_reading(self) -> None:
        """Stop reading the socket, as a peer that no longer reads does."""
        self._transport().pause_reading()

    def shrink_socket_buffers(self) -> None:
        """Make the kernel's buffers of this end's socket small, so that a peer that stops
        reading fills them with less than one channel window."""
        sock = self._transport().get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)

    def _transport(self) -> asyncio.Transport:
        if self.websocket is not None:
            return self.websocket.transport
        from tunnel.link.framing_picows import PicowsFraming

        assert isinstance(self.framing, PicowsFraming)
        assert self.framing.transport is not None
        return self.framing.transport.underlying_transport

    def queued(self) -> int:
        """Messages (frames, on websockets) received and not yet taken through `messages()`."""
        if self.websocket is not None:
            queued = queued_frames(self.websocket)
            assert queued is not None
            return queued
        from tunnel.link.framing_picows import PicowsFraming

        assert isinstance(self.framing, PicowsFraming)
        return self.framing.statistics().queued

    def write_frame(self, first_byte: int, payload: bytes) -> None:
        """Write one masked frame as a client does, FIN and opcode given in `first_byte` (RFC
        6455, section 5.2): how a test sends what the framings never do, e.g. fragments."""
        key = os.urandom(4)
        header = frame_header(first_byte, len(payload), key)
        self._transport().write(header + apply_mask(payload, key))

    def write_buffer_size(self) -> int:
        """Bytes written to the socket's transport and not yet handed to the kernel."""
        return self._transport().get_write_buffer_size()


@asynccontextmanager
async def socket_pair(
    framing: str,
    *,
    max_size: int | None = 2**20,
    ping_interval: float | None = None,
    ping_timeout: float | None = None,
    close_timeout: float = 1.0,
) -> AsyncIterator[tuple[End, End]]:
    """Yield (client, server) over one loopback connection; the server's options are given,
    the client's keepalive is off."""
    if framing == "picows":
        async with _picows_pair(max_size, ping_interval, ping_timeout, close_timeout) as pair:
            yield pair
        return
    accepted: asyncio.Future[ServerConnection] = asyncio.get_running_loop().create_future()

    async def handler(websocket: ServerConnection) -> None:
        accepted.set_result(websocket)
        await websocket.wait_closed()

    async with serve(
        handler,
        "127.0.0.1",
        0,
        compression=None,
        max_size=max_size,
        ping_interval=ping_interval,
        ping_timeout=ping_timeout,
        # A peer that stopped reading never answers a close: do not wait websockets' 10 s.
        close_timeout=close_timeout,
    ) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        async with connect(
            f"ws://127.0.0.1:{port}", compression=None, max_size=None, ping_interval=None
        ) as client:
            websocket = await accepted
            yield (
                End(WebsocketsFraming(client), client),
                End(WebsocketsFraming(websocket), websocket),
            )


@asynccontextmanager
async def _picows_pair(
    max_size: int | None,
    ping_interval: float | None,
    ping_timeout: float | None,
    close_timeout: float,
) -> AsyncIterator[tuple[End, End]]:
    from picows import WSUpgradeRequest

    from tunnel.link.framing_picows import PicowsFraming, connect, create_server

    accepted: asyncio.Future[PicowsFraming] = asyncio.get_running_loop().create_future()

    def listener(request: WSUpgradeRequest) -> PicowsFraming:
        return PicowsFraming(
            max_size=max_size,
            ping_interval=ping_interval,
            ping_timeout=ping_timeout,
            close_timeout=close_timeout,
            on_connected=accepted.set_result,
        )

    # As the relay serves (tunnel/relay/server_picows.py).
    server = await create_server(listener, "127.0.0.1", 0, max_size=max_size)
    try:
        port = server.sockets[0].getsockname()[1]
        client = await connect(f"ws://127.0.0.1:{port}/", max_size=None)
        served = await accepted
        try:
            yield End(client, None), End(served, None)
        finally:
            client.abort()
            served.abort()
    finally:
        server.close()
