"""Forward proxies on 127.0.0.1 that a dial is sent through by the environment (HTTPS_PROXY):
an HTTP one that answers CONNECT, and a SOCKS5 one. Each keeps what it was asked for, so a test
can tell a connection went through it, and where to."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Literal

OPENED = b"HTTP/1.1 200 Connection established\r\n\r\n"
REFUSED = b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n"


@dataclass
class Tunnel:
    """One connection a client asked the proxy for."""

    target: str
    """Where to: `host:port` as the client named it."""
    opened: bool
    """Whether the proxy opened it (else it refused it, or never answered)."""
    request_line: str = ""
    """The first line the client sent through the tunnel (`GET /v1/host HTTP/1.1` for a
    WebSocket to ws://), once it has."""


@dataclass
class ForwardProxy:
    """A proxy listening on 127.0.0.1, and the tunnels asked of it so far."""

    url: str
    """What HTTPS_PROXY is set to."""
    tunnels: list[Tunnel] = field(default_factory=list)

    def requests(self) -> list[str]:
        """The first line of every tunnel's traffic, in the order they were asked for."""
        return [tunnel.request_line for tunnel in self.tunnels]


Asked = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[str]]
"""Reads a client's request for a tunnel; returns where to (`host:port`)."""


@asynccontextmanager
async def http_connect_proxy(
    *, answer: Literal["tunnel", "refuse", "nothing"] = "tunnel"
) -> AsyncIterator[ForwardProxy]:
    """An HTTP proxy that answers every CONNECT: by opening the tunnel, with 403, or not at all
    (it holds the connection until the client closes it)."""

    async def asked(reader: asyncio.StreamReader, _writer: asyncio.StreamWriter) -> str:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        method, target, _version = head.split("\r\n", 1)[0].split(" ")
        assert method == "CONNECT", head
        return target

    reply = {"tunnel": OPENED, "refuse": REFUSED, "nothing": None}[answer]
    async with _serve("http", asked, reply, opens=answer == "tunnel") as proxy:
        yield proxy


@asynccontextmanager
async def socks5_proxy() -> AsyncIterator[ForwardProxy]:
    """A SOCKS5 proxy without authentication that opens every tunnel asked of it (RFC 1928)."""

    async def asked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str:
        _version, methods = await reader.readexactly(2)
        await reader.readexactly(methods)
        writer.write(b"\x05\x00")  # no authentication
        _version, _connect, _reserved, kind = await reader.readexactly(4)
        if kind == 1:
            host = socket.inet_ntop(socket.AF_INET, await reader.readexactly(4))
        elif kind == 4:
            host = f"[{socket.inet_ntop(socket.AF_INET6, await reader.readexactly(16))}]"
        else:  # 3: a name, for the proxy to resolve
            host = (await reader.readexactly((await reader.readexactly(1))[0])).decode()
        port = int.from_bytes(await reader.readexactly(2), "big")
        return f"{host}:{port}"

    # Succeeded; the bound address, unused, left as zeros.
    async with _serve("socks5h", asked, b"\x05\x00\x00\x01" + bytes(6), opens=True) as proxy:
        yield proxy


@asynccontextmanager
async def _serve(
    scheme: str, asked: Asked, reply: bytes | None, *, opens: bool
) -> AsyncIterator[ForwardProxy]:
    """A proxy on 127.0.0.1 that reads each request with `asked`, then writes `reply` and opens
    the tunnel (`opens`) or closes; or, when `reply` is None, holds the connection unanswered."""
    writers: list[asyncio.StreamWriter] = []
    proxy = ForwardProxy(url="")

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        try:
            tunnel = Tunnel(await asked(reader, writer), opened=opens)
            proxy.tunnels.append(tunnel)
            if reply is None:
                await reader.read()
                return
            if not opens:
                writer.write(reply)
                return
            # Reached first, as a proxy does; one that cannot be closes without a reply.
            host, port = tunnel.target.rsplit(":", 1)
            up_reader, up_writer = await asyncio.open_connection(host.strip("[]"), int(port))
            writers.append(up_writer)
            writer.write(reply)
            first = await reader.readline()
            tunnel.request_line = first.decode("latin-1").rstrip("\r\n")
            up_writer.write(first)
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    proxy.url = f"{scheme}://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield proxy
    finally:
        for writer in writers:
            writer.close()
        server.close()
        await server.wait_closed()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()
