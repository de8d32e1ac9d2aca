"""The relay process: a websockets server whose connections feed the switch (docs/relay.md).

`run(settings)` is the programmatic API and what `tunnel relay` calls. Each WebSocket connection
gets a `Link` (the protocol object over the socket) and a `Peer` in the `Switch`; plain HTTP
requests are answered by `tunnel.relay.http`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import secrets
import socket
import ssl
from collections.abc import Coroutine, Iterable
from functools import partial
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskStatus
from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request, Response

from tunnel.e2e.identity import CHALLENGE_SIZE, load_authorized_keys
from tunnel.handshake import relay_hello
from tunnel.link import Link
from tunnel.proto import Connection, Side
from tunnel.proto.codes import CloseCode
from tunnel.relay.http import HOST_PATH, HttpRouter, OriginPolicy
from tunnel.relay.metrics import RelayMetrics
from tunnel.relay.node_entry import NODE_LINK_PATH
from tunnel.relay.node_link import MAX_OVERHEAD
from tunnel.relay.node_owner import OwnerLink, SlotFraming
from tunnel.relay.settings import RelaySettings
from tunnel.relay.switch import Kind, Peer, Switch, SwitchLimits

if TYPE_CHECKING:
    from tunnel.relay.cluster import Cluster

logger = logging.getLogger("relay.server")


SHUTDOWN_GRACE = 5.0
"""Seconds to let connections close (1001) when the relay stops."""


REFUSED_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
)
"""The answer to a TCP connection beyond `max_connections_per_ip`, sent at its accept."""


class RelayConnection(ServerConnection):
    """A connection counted against its address from the TCP accept (`Switch.accept`), not only
    once its WebSocket is open: a client that starts openings and never finishes them holds no
    more than the per-IP limit."""

    switch: Switch | None = None
    """Set on the subclass `run` makes for its relay."""

    _opening_ip: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        switch = self.switch
        assert switch is not None
        address = transport.get_extra_info("peername")
        ip = str(address[0]) if address else "unknown"
        if not switch.accept(ip):
            logger.info("refused %s: 503 too many connections", ip)
            assert isinstance(transport, asyncio.WriteTransport)
            transport.write(REFUSED_RESPONSE)
            transport.close()
            return
        self._opening_ip = ip

    def connection_lost(self, exc: Exception | None) -> None:
        self.opened()
        super().connection_lost(exc)

    def opened(self) -> None:
        """The opening is over: stop counting it as one (once)."""
        if self._opening_ip is not None and self.switch is not None:
            self.switch.opened(self._opening_ip)
        self._opening_ip = None


class Relay:
    """One relay: the switch, the HTTP router and the per-connection handler."""

    def __init__(self, settings: RelaySettings, *, public_url: str) -> None:
        self.settings = settings
        self.public_url = public_url
        """The http(s) base URL hosts sign and browsers load the web client from."""
        self.metrics = RelayMetrics()
        authorized = (
            None
            if settings.authorized_keys is None
            else load_authorized_keys(settings.authorized_keys)
        )
        self.switch = Switch(
            public_url=public_url,
            limits=SwitchLimits(
                max_hosts=settings.max_hosts,
                max_teammates_per_host=settings.max_teammates_per_host,
                drive_seats=settings.drive_seats,
                channel_timeout=settings.channel_timeout,
                max_connections_per_ip=settings.max_connections_per_ip,
                max_channels_per_teammate=settings.max_channels_per_teammate,
                max_cast_backlog=settings.max_cast_backlog,
            ),
            link_limits=settings.limits,
            metrics=self.metrics,
            authorized_keys=authorized,
        )
        self.cluster: Cluster | None = None
        """This node's part in a relay cluster (docs/cluster.md); None for a relay on its own."""
        if settings.cluster is not None:
            # Imported only here: Redis is an optional dependency of cluster nodes alone.
            from tunnel.relay.cluster import Cluster

            self.cluster = Cluster(
                settings.cluster, relay=settings, switch=self.switch, relay_metrics=self.metrics
            )
        self.router = HttpRouter(
            origins=OriginPolicy.build(public_url, settings.allowed_origins),
            metrics=self.metrics,
            metrics_token=settings.metrics_token,
            cluster=self.cluster,
        )

    def process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        """The websockets `process_request` hook: plain HTTP routes and the Origin check."""
        return self.router.route(request)

    def handle(self, websocket: ServerConnection) -> Coroutine[None, None, None]:
        """What serves one WebSocket connection of websockets' server from its hello to its
        close: the coroutine of `serve` (or of a node link's), for websockets' handler task to
        run as its own, with no frame of ours waiting above it for as long as it lasts."""
        request = websocket.request
        assert request is not None
        # Nothing reads the opening handshake's headers again, and they were a sixth of what an
        # idle connection kept (docs/performance.md, "Memory"). The request itself stays:
        # websockets tells the handshake from the frames after it by whether it has one.
        request.headers.clear()
        if websocket.response is not None:
            websocket.response.headers.clear()
        address = websocket.remote_address
        ip = str(address[0]) if address else "unknown"
        path = request.path.split("?", 1)[0]
        if path == NODE_LINK_PATH and self.cluster is not None:
            # An entry node's node link: the router let it through only with a node's signature.
            if isinstance(websocket, RelayConnection):
                websocket.opened()
            return self._serve_node_link(websocket)
        kind = Kind.HOST if path == HOST_PATH else Kind.TEAMMATE
        link = Link(
            websocket,
            self.new_connection(),
            send_timeout=self.settings.send_timeout,
            label=f"{kind.value} {ip}",
        )
        if isinstance(websocket, RelayConnection):
            websocket.opened()  # counted by the switch from here on (under the client's address)
        return self.serve(link, kind=kind, ip=ip)

    async def _serve_node_link(self, websocket: ServerConnection) -> None:
        """Serve the teammates an entry node carries over one node link (docs/cluster.md, "The
        node link"), each as a connection of its own, under its own address."""

        def new_link(framing: SlotFraming, ip: str) -> Link:
            return Link(
                None,
                self.new_connection(),
                send_timeout=self.settings.send_timeout,
                label=f"teammate {ip}",
                framing=framing,
            )

        async def serve(link: Link, ip: str) -> None:
            await self.serve(link, kind=Kind.TEAMMATE, ip=ip, forwarded=True)

        limit = self.settings.limits.max_message_size
        if limit is not None:
            # A teammate's largest message, in its envelope: one over the teammate's limit is
            # refused at the entry node already.
            websocket.protocol.max_message_size = limit + MAX_OVERHEAD
        await OwnerLink(websocket, new_link=new_link, serve=serve).run()

    def new_connection(self) -> Connection:
        """The protocol object of one accepted connection."""
        # The relay forwards the data it receives as it came: no copy out of the message.
        return Connection(Side.ACCEPTER, limits=self.settings.limits, payload_views=True)

    async def serve(self, link: Link, *, kind: Kind, ip: str, forwarded: bool = False) -> None:
        """Serve one link over any framing (link/framing.py) from its hello to its close."""
        peer = Peer(link=link, kind=kind, ip=ip, challenge=secrets.token_bytes(CHALLENGE_SIZE))
        if not self.switch.connect(peer):
            logger.info(
                "refused %s: %d too many connections", peer.describe(), CloseCode.LIMIT_REACHED
            )
            await link.framing.close(
                CloseCode.LIMIT_REACHED, "too many connections from your address"
            )
            return
        try:
            link.connection.send_hello(relay_hello(peer.challenge, self.settings.limits))
            link.flush()
            if self.cluster is not None and not forwarded and await self.cluster.route(peer):
                return  # carried to the host's node, or refused there: the socket is closed
            # A timer, not a task: an idle connection should cost its reader alone
            # (docs/performance.md, "Memory"). Admission cancels it (`Peer.admit`).
            peer.hello_deadline = asyncio.get_running_loop().call_later(
                self.settings.hello_timeout, self._hello_deadline, peer
            )
            closed = await link.run(partial(self.switch.on_event, peer))
        finally:
            if peer.hello_deadline is not None:
                peer.hello_deadline.cancel()
                peer.hello_deadline = None
            self.switch.disconnect(peer)
            if self.cluster is not None:
                await self.cluster.host_left(peer)
        failure = link.failure
        if failure is not None:
            # The one log line for a peer that broke the protocol; the others never notice.
            self.metrics.frames_rejected.labels(reason=f"protocol_{int(failure.code)}").inc()
            logger.warning(
                "closed %s: %d protocol error: %s", peer.describe(), failure.code, failure
            )
        elif closed.code == CloseCode.SLOW_CONSUMER and not closed.by_peer:
            self.metrics.frames_rejected.labels(reason="slow_consumer").inc()
            logger.warning("closed %s: %d stopped reading", peer.describe(), closed.code)
        elif not closed.by_peer and closed.code == CloseCode.INTERNAL_ERROR:
            # websockets' keepalive: a peer that reads nothing answers no ping (docs/relay.md).
            self.metrics.frames_rejected.labels(reason="keepalive_timeout").inc()
            logger.warning("closed %s: 1011 no answer to the keepalive ping", peer.describe())
        elif not closed.by_peer and closed.code == CloseCode.MESSAGE_TOO_BIG:
            self.metrics.frames_rejected.labels(reason="message_too_big").inc()
            logger.warning("closed %s: 1009 message too big", peer.describe())
        else:
            logger.debug("%s disconnected: %d", peer.describe(), closed.code)

    def _hello_deadline(self, peer: Peer) -> None:
        peer.hello_deadline = None
        if not peer.admitted and not peer.link.closing:
            self.metrics.frames_rejected.labels(reason="hello_timeout").inc()
            logger.info("closed %s: %d no hello in time", peer.describe(), CloseCode.PROTOCOL_ERROR)
            peer.link.close_soon(CloseCode.PROTOCOL_ERROR, "hello timeout")


def loopback_only(sockets: Iterable[socket.socket]) -> bool:
    """Tell whether every listening socket is bound to a loopback address (127.0.0.0/8, ::1)."""
    # An IPv6 address may carry a zone ("fe80::1%eth0"); ipaddress reads the part before it.
    return all(
        ipaddress.ip_address(str(sock.getsockname()[0]).split("%")[0]).is_loopback
        for sock in sockets
    )


def _ssl_context(settings: RelaySettings) -> ssl.SSLContext | None:
    if settings.certfile is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(settings.certfile, settings.keyfile)
    except OSError as exc:
        # A missing file and a bad PEM (ssl.SSLError, an OSError) alike: ssl names neither file.
        reason = getattr(exc, "reason", None) or exc.strerror or str(exc)
        raise ValueError(
            f"cannot load the certificate {settings.certfile} with the key {settings.keyfile}: "
            f"{reason}"
        ) from None
    return context


async def run(
    settings: RelaySettings, *, task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Serve until cancelled; reports the bound port through `task_status` once listening.

    Also prints "relay listening on URL" on stdout, so a parent process can read the port.
    """
    if settings.framing == "picows":
        await _run_picows(settings, task_status=task_status)
        return
    relay: Relay | None = None

    def process_request(connection: ServerConnection, request: Request) -> Response | None:
        assert relay is not None
        return relay.process_request(connection, request)

    def handle(websocket: ServerConnection) -> Coroutine[None, None, None]:
        # Returns the relay's coroutine rather than awaiting it in one of its own: one frame
        # less per connection, for as long as the connection lasts.
        assert relay is not None
        return relay.handle(websocket)

    class Connection(RelayConnection):
        pass

    server = await serve(
        handle,
        settings.host,
        settings.port,
        process_request=process_request,
        create_connection=Connection,
        # Channel payloads are ciphertext: compressing it wastes CPU and memory.
        compression=None,
        max_size=settings.limits.max_message_size,
        ping_interval=settings.ping_interval,
        ping_timeout=settings.ping_timeout,
        open_timeout=settings.hello_timeout,
        close_timeout=SHUTDOWN_GRACE,
        ssl=_ssl_context(settings),
        server_header=None,
        # The public URL may depend on the port picked; accept connections only once it is known.
        start_serving=False,
    )
    try:
        port = int(server.sockets[0].getsockname()[1])
        relay = Relay(settings, public_url=settings.resolved_public_url(port))
        Connection.switch = relay.switch
        await server.start_serving()
        _announce(settings, relay, server.sockets, port)
        async with anyio.create_task_group() as tg:
            if relay.cluster is not None:
                logger.info(
                    "cluster node %s, Redis at %s",
                    relay.cluster.node_url,
                    relay.cluster.settings.redis_address,
                )
                await tg.start(relay.cluster.run)
            task_status.started(port)
            await anyio.sleep_forever()
    finally:
        server.close()
        with anyio.move_on_after(SHUTDOWN_GRACE, shield=True):
            await server.wait_closed()
        # Peers that do not answer the closing handshake in time are dropped.
        for connection in server.connections:
            connection.transport.abort()


def _announce(
    settings: RelaySettings, relay: Relay, sockets: Iterable[socket.socket], port: int
) -> None:
    """Say where the relay listens, once it accepts connections."""
    scheme = "https" if settings.tls else "http"
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    listening = f"{scheme}://{host}:{port}"
    # Printed, not logged: a parent process reads this line; the log says only what it adds.
    print(f"relay listening on {listening}", flush=True)
    if relay.public_url != listening:
        logger.info("public URL %s", relay.public_url)
    if settings.metrics_token is None and not loopback_only(sockets):
        logger.warning(
            "/metrics is open to anyone who can reach %s; --metrics-token-file (or"
            " TUNNEL_RELAY_METRICS_TOKEN) makes it require a token",
            listening,
        )


async def _run_picows(settings: RelaySettings, *, task_status: TaskStatus[int]) -> None:
    """`run` on picows' server (`--framing picows`, tunnel/relay/server_picows.py)."""
    # Imported only here: picows is an optional dependency (the `fast` extra).
    from tunnel.relay.server_picows import PicowsRelayServer, create_server

    async with anyio.create_task_group() as connections:
        # Each connection's task lives here; cancelling the relay cancels them, and each link
        # then closes its WebSocket with 1001 (Link.run).
        front = PicowsRelayServer(settings, lambda serving: connections.start_soon(_await, serving))
        server = await create_server(front, settings, _ssl_context(settings))
        try:
            port = int(server.sockets[0].getsockname()[1])
            relay = Relay(settings, public_url=settings.resolved_public_url(port))
            front.relay = relay
            await server.start_serving()
            _announce(settings, relay, server.sockets, port)
            logger.info("serving WebSockets with picows")
            task_status.started(port)
            await anyio.sleep_forever()
        finally:
            server.close()


async def _await(serving: Coroutine[None, None, None]) -> None:
    await serving
