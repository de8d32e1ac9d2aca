"""The relay's listening socket on picows (`tunnel relay --framing picows`): every WebSocket
becomes a `Link` over `PicowsFraming`, every plain HTTP request is answered by the same
`HttpRouter` as on websockets' server (the page, /healthz, /metrics).

picows hands each request to a factory before any WebSocket header is checked; a response other
than 101 is sent with `Connection: close`, which is how the relay answers plain HTTP there too.
Differences from websockets' server: picows takes GET requests over HTTP/1.1 only (anything
else gets 400, where websockets answers HEAD or HTTP/1.0 with its own errors), and a
connection is counted against its address once its WebSocket is open, not from the TCP accept
(an opening that never finishes is dropped after `hello_timeout`, as on websockets).
"""

from __future__ import annotations

import asyncio
import http
import ssl
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from picows import (
    WSListener,
    WSUpgradeRequest,
    WSUpgradeResponse,
    WSUpgradeResponseWithListener,
)
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from tunnel.link import Link
from tunnel.link.framing_picows import PicowsFraming
from tunnel.link.framing_picows import create_server as serve_picows
from tunnel.relay.http import HOST_PATH
from tunnel.relay.settings import RelaySettings
from tunnel.relay.switch import Kind

if TYPE_CHECKING:
    from tunnel.relay.server import Relay

Spawn = Callable[[Coroutine[Any, Any, None]], object]
"""Starts a connection's task in the task group that owns the server."""


def websockets_request(request: WSUpgradeRequest) -> Request:
    """The request as websockets' type, which `HttpRouter` reads (path and headers)."""
    path = request.path.decode("ascii", "replace")
    return Request(path, Headers(list(request.headers.items())))


def picows_response(response: Response) -> WSUpgradeResponse:
    """The router's response as picows sends it; picows sets Content-Length for a body."""
    answer = WSUpgradeResponse()
    answer.version = b"HTTP/1.1"
    answer.status = http.HTTPStatus(response.status_code)
    answer.headers = type(WSUpgradeResponse.create_101_response().headers)()
    for name, value in response.headers.raw_items():
        if response.body and name.lower() == "content-length":
            continue
        answer.headers.add(name, value)
    answer.body = bytes(response.body) if response.body else None
    return answer


class PicowsRelayServer:
    """Routes each request of picows' server: a response, or a `PicowsFraming` for the relay."""

    def __init__(self, settings: RelaySettings, spawn: Spawn) -> None:
        self._settings = settings
        self._spawn = spawn
        self.relay: Relay | None = None
        """Set once the relay exists (its public URL depends on the port bound), before the
        server accepts connections."""

    def route(self, request: WSUpgradeRequest) -> WSListener | WSUpgradeResponseWithListener:
        """picows' listener factory."""
        assert self.relay is not None
        answer = self.relay.router.route(websockets_request(request))
        if answer is not None:
            return WSUpgradeResponseWithListener(picows_response(answer), None)
        path = request.path.decode("ascii", "replace").split("?", 1)[0]
        kind = Kind.HOST if path == HOST_PATH else Kind.TEAMMATE
        settings = self._settings
        return PicowsFraming(
            max_size=settings.limits.max_message_size,
            ping_interval=settings.ping_interval,
            ping_timeout=settings.ping_timeout,
            on_connected=lambda framing: self._connected(framing, kind),
        )

    def _connected(self, framing: PicowsFraming, kind: Kind) -> None:
        transport = framing.transport
        assert transport is not None
        relay = self.relay
        assert relay is not None
        # As on websockets (`Relay.handle`): nothing reads the handshake's headers again, and an
        # idle connection should not keep them.
        transport.request.headers.clear()
        transport.response.headers.clear()
        address = transport.underlying_transport.get_extra_info("peername")
        ip = str(address[0]) if address else "unknown"
        link = Link(
            None,
            relay.new_connection(),
            send_timeout=self._settings.send_timeout,
            label=f"{kind.value} {ip}",
            framing=framing,
        )
        self._spawn(relay.serve(link, kind=kind, ip=ip))


async def create_server(
    server: PicowsRelayServer, settings: RelaySettings, ssl_context: ssl.SSLContext | None
) -> asyncio.Server:
    """Bind the relay's socket with picows; it accepts nothing until `start_serving()`."""
    return await serve_picows(
        server.route,
        settings.host,
        settings.port,
        max_size=settings.limits.max_message_size,
        open_timeout=settings.hello_timeout,
        ssl_context=ssl_context,
        start_serving=False,
    )
