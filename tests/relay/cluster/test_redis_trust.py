"""Whoever can write to Redis does not steer the cluster: ownership records and announcements that
no node sealed (forged, moved, changed, out of date, replayed) are refused and logged once, the
host stays on its node and its teammates keep their sessions; and a node-to-node signature
captured before its node restarted opens nothing after (docs/cluster.md, "What Redis is trusted
with")."""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from anyio.abc import SocketAttribute, SocketStream
from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import InvalidStatus

from tests.relay.cluster.haproxy import Haproxy, free_port
from tests.relay.cluster.support import (
    SECRET,
    Node,
    RedisServer,
    RelayCluster,
    echo_host_and_teammates,
    relay_cluster,
    via,
    wait_member,
    wait_says,
)
from tests.support import attach_and_echo, echo_roundtrip, host_settings, running_host
from tests.support import wait_online as net_wait_online
from tunnel.host import Host
from tunnel.relay.cluster import KEY_PREFIX, OWNERS_CHANNEL
from tunnel.relay.cluster_auth import (
    Announcement,
    Owner,
    UnverifiedError,
    open_record,
    seal_announcement,
    seal_record,
)
from tunnel.teammate.client import HostGoneError, TeammateSession, connect_teammate

pytestmark = [pytest.mark.anyio, pytest.mark.cluster, pytest.mark.timeout(120)]

FLOOD = 50
"""Forgeries sent at once in a test: each is refused, and the log says so once."""

OTHER_SECRET = b"not this cluster's secret, 32+ bytes long"


@contextlib.asynccontextmanager
async def redis_client(server: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(server.url)
    try:
        yield client
    finally:
        await client.aclose()


@contextlib.asynccontextmanager
async def forger_relay() -> AsyncIterator[tuple[str, list[str]]]:
    """A WebSocket server on loopback standing for the forger's relay: its URL, and the paths of
    the connections it got (none, if no node believed the forgery)."""
    reached: list[str] = []

    async def handle(websocket: ServerConnection) -> None:
        assert websocket.request is not None
        reached.append(websocket.request.path)
        await websocket.close()

    async with serve(handle, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"http://127.0.0.1:{port}", reached


async def established(teammates: list[TeammateSession]) -> None:
    """Wait until every teammate's session is through to the host (its first echo came back):
    a hello is not acknowledged, and the entry node looks the host up after it."""
    for teammate in teammates:
        assert await echo_roundtrip(teammate, b"hello") == b"hello"


@contextlib.asynccontextmanager
async def forgery_scene(
    tmp_path: Path, redis_server: RedisServer, haproxy: str
) -> AsyncIterator[tuple[RelayCluster, Redis, tuple[str, list[str]], Host, list[TeammateSession]]]:
    """Two nodes on Redis, a client that writes Redis as a forger would, the forger's own relay
    (its URL, and who reached it), and an echo host with a teammate on each node, established."""
    async with (
        relay_cluster(tmp_path, redis_server, haproxy, 2) as cluster,
        redis_client(redis_server) as redis,
        forger_relay() as forger,
        echo_host_and_teammates(cluster, tmp_path, cluster.nodes[0], cluster.nodes[1]) as (
            host,
            teammates,
        ),
    ):
        await established(teammates)
        yield cluster, redis, forger, host, teammates


def _record_key(host: Host) -> str:
    return KEY_PREFIX + host.host_id


async def wait_record_of(redis: Redis, key: str, node: Node, attempts: int = 400) -> None:
    """Wait (bounded) until `key` holds a record sealed by `node`: its refresh ran."""
    for _ in range(attempts):
        raw = await redis.get(key)
        if raw is not None:
            with contextlib.suppress(UnverifiedError):
                owner = open_record(SECRET.encode(), key, raw, now=time.time(), max_skew=30)
                if owner.node_url == node.url:
                    return
        await anyio.sleep(0.05)
    raise AssertionError(f"{key} never held a record of {node.url}")


async def wait_replaced(redis: Redis, key: str, value: bytes | str, attempts: int = 400) -> None:
    """Wait (bounded) until `key` holds something else than `value`: a node wrote over it."""
    expected = value.encode() if isinstance(value, str) else value
    for _ in range(attempts):
        if await redis.get(key) != expected:
            return
        await anyio.sleep(0.05)
    raise AssertionError(f"{key} kept {value!r}")


async def wait_refused_or_dropped(
    node: Node, host: Host, link: object, count: int = FLOOD, attempts: int = 400
) -> None:
    """Wait (bounded) until `node` counted `count` refused announcements, or the host lost its
    link (which the caller's checks then report)."""
    text = _refusals("announcement", count)
    for _ in range(attempts):
        if host.link is not link or text in await anyio.to_thread.run_sync(node.metrics):
            return
        await anyio.sleep(0.05)
    raise AssertionError(f"never {text!r}")


async def assert_undisturbed(
    host: Host, link: object, teammates: list[TeammateSession], *nodes: Node
) -> None:
    """The host is on the same link as before, every teammate's session still echoes, and a
    new teammate gets in at each of `nodes`."""
    assert host.link is link
    for teammate in teammates:
        assert await echo_roundtrip(teammate, b"still here") == b"still here"
    for node in nodes:
        assert await attach_and_echo(via(host.drive_link, node), b"new") == b"new"


def _refusals(what: str, count: int = FLOOD) -> str:
    return f'relay_rejected_total{{reason="cluster_{what}"}} {float(count)}'


def _logged(node: Node, text: str) -> int:
    return node.process.stderr().count(text)


# -- ownership records ------------------------------------------------------------------------


RECORD_FORGERIES = [
    "unsigned, naming the forger's relay",
    "sealed with another secret",
    "another host's record, moved to this host's key",
    "this host's record with the node changed",
]


@pytest.mark.parametrize("forgery", RECORD_FORGERIES)
async def test_a_forged_ownership_record_is_refused_and_the_host_keeps_its_teammates(
    tmp_path: Path, redis_server: RedisServer, haproxy: str, forgery: str
) -> None:
    async with forgery_scene(tmp_path, redis_server, haproxy) as scene:
        cluster, redis, (forger_url, reached), host, teammates = scene
        node1, node2 = cluster.nodes
        key = _record_key(host)
        link = host.link
        genuine = await redis.get(key)
        assert genuine is not None
        now = int(time.time())
        forger = Owner(node_url=forger_url, run="f" * 32, instance=None)
        async with contextlib.AsyncExitStack() as stack:
            if forgery.startswith("unsigned"):
                forged: bytes | str = json.dumps(
                    {"instance": None, "node": forger_url, "run": "f" * 32}
                )
            elif forgery.startswith("sealed with another secret"):
                forged = seal_record(OTHER_SECRET, key, forger, expires=now + 15)
            elif forgery.startswith("another host's record"):
                # Another host, on node 2: its record is genuine, for its own key.
                await cluster.balancer.route_to(node2.port)
                other = await stack.enter_async_context(
                    running_host(host_settings(cluster.balancer.url, tmp_path / "other"))
                )
                await net_wait_online(via(other.drive_link, node2))
                forged = await redis.get(_record_key(other))
                assert forged is not None
            else:
                forged = genuine.replace(node1.url.encode(), forger_url.encode())
            await redis.set(key, forged)
            # A teammate entering at node 2 meanwhile is not sent to the forger: at worst it is
            # told the host is offline, and retries.
            with contextlib.suppress(HostGoneError):
                await attach_and_echo(via(host.drive_link, node2), b"meanwhile")
            # Node 1's next refresh finds the forgery, refuses it and writes its own record.
            await wait_replaced(redis, key, forged)
            await assert_undisturbed(host, link, teammates, node1, node2)
            await wait_record_of(redis, key, node1)
        assert reached == []
        assert 'relay_rejected_total{reason="cluster_record"}' in node1.metrics()
        assert _logged(node1, "refused an ownership record in Redis") == 1


# -- announcements ----------------------------------------------------------------------------


ANNOUNCEMENT_FORGERIES = [
    "unsigned, with the final close code",
    "sealed with another secret",
    "another host's, changed to name this host",
    "sealed for another channel",
    "out of date",
]


@pytest.mark.parametrize("forgery", ANNOUNCEMENT_FORGERIES)
async def test_a_forged_announcement_is_refused_and_the_host_keeps_its_teammates(
    tmp_path: Path, redis_server: RedisServer, haproxy: str, forgery: str
) -> None:
    async with forgery_scene(tmp_path, redis_server, haproxy) as scene:
        cluster, redis, (forger_url, reached), host, teammates = scene
        node1, node2 = cluster.nodes
        link = host.link
        now = int(time.time())
        said = Announcement(
            host_id=host.host_id,
            node_url=forger_url,
            run="f" * 32,
            issued=now,
            nonce=secrets.token_urlsafe(16),
        )
        if forgery.startswith("unsigned"):
            # What a node once acted on: the host told 4009, its teammates 4008.
            forged = json.dumps(
                {
                    "host": host.host_id,
                    "node": forger_url,
                    "run": "f" * 32,
                    "code": 4009,
                    "verifiers": {"view": "00" * 32, "drive": "11" * 32},
                }
            )
        elif forgery.startswith("sealed with another secret"):
            forged = seal_announcement(OTHER_SECRET, OWNERS_CHANNEL, said)
        elif forgery.startswith("another host's"):
            genuine = seal_announcement(
                SECRET.encode(), OWNERS_CHANNEL, _replace_host(said, "b" * len(host.host_id))
            )
            mac, _, body = genuine.partition(".")
            forged = mac + "." + body.replace("b" * len(host.host_id), host.host_id)
        elif forgery.startswith("sealed for another channel"):
            forged = seal_announcement(SECRET.encode(), "agent-tunnel:elsewhere", said)
        else:
            forged = seal_announcement(SECRET.encode(), OWNERS_CHANNEL, _issued(said, now - 120))
        for _ in range(FLOOD):
            await redis.publish(OWNERS_CHANNEL, forged)
        for node in (node1, node2):
            await wait_refused_or_dropped(node, host, link)
        await assert_undisturbed(host, link, teammates, node1, node2)
        assert reached == []
        for node in (node1, node2):
            assert _logged(node, "refused an ownership announcement") == 1


def _replace_host(announcement: Announcement, host_id: str) -> Announcement:
    return Announcement(
        host_id=host_id,
        node_url=announcement.node_url,
        run=announcement.run,
        issued=announcement.issued,
        nonce=announcement.nonce,
    )


def _issued(announcement: Announcement, issued: int) -> Announcement:
    return Announcement(
        host_id=announcement.host_id,
        node_url=announcement.node_url,
        run=announcement.run,
        issued=issued,
        nonce=announcement.nonce,
    )


async def _next_announcement(pubsub: PubSub) -> bytes:
    with anyio.fail_after(20):
        while True:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if message is not None and message["type"] == "message":
                data = message["data"]
                assert isinstance(data, bytes)
                return data


async def test_a_genuine_announcement_replayed_is_refused_and_the_host_keeps_its_teammates(
    tmp_path: Path, redis_server: RedisServer, haproxy: str
) -> None:
    async with (
        relay_cluster(tmp_path, redis_server, haproxy, 2) as cluster,
        redis_client(redis_server) as redis,
    ):
        node1, node2 = cluster.nodes
        pubsub = redis.pubsub()
        await pubsub.subscribe(OWNERS_CHANNEL)
        await cluster.balancer.route_to(node2.port)
        async with running_host(host_settings(cluster.balancer.url, tmp_path)) as host:
            # Node 2 took the host: what it announced is captured off Redis.
            captured = await _next_announcement(pubsub)
            # The host revokes its links and re-registers, now on node 1, which announces it;
            # node 2 lets go.
            await cluster.balancer.route_to(node1.port)
            await host.revoke()
            await wait_says(node1.metrics, "relay_cluster_owned_hosts 1.0")
            await wait_says(node2.metrics, "relay_cluster_owned_hosts 0.0")
            await net_wait_online(via(host.drive_link, node2))
            async with contextlib.AsyncExitStack() as stack:
                teammates = [
                    await stack.enter_async_context(
                        connect_teammate(via(host.drive_link, node), name=f"at-{node.port}")
                    )
                    for node in (node1, node2)
                ]
                link = host.link
                await established(teammates)
                # Node 2's announcement again, well within its time: node 1 has acted on it.
                for _ in range(FLOOD):
                    await redis.publish(OWNERS_CHANNEL, captured)
                await wait_refused_or_dropped(node1, host, link)
                await assert_undisturbed(host, link, teammates, node1, node2)
        await pubsub.aclose()  # type: ignore[no-untyped-call]
        assert _logged(node1, "refused an ownership announcement: replayed") == 1


# -- node signatures across a restart ---------------------------------------------------------


@contextlib.asynccontextmanager
async def recording_proxy(target_port: int) -> AsyncIterator[tuple[int, list[bytes]]]:
    """A TCP proxy on loopback to `target_port` that keeps the HTTP request head of every
    connection through it: what a watcher of the traffic between nodes sees."""
    heads: list[bytes] = []

    async def pipe(source: SocketStream, sink: SocketStream) -> None:
        with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            async for chunk in source:
                await sink.send(chunk)
        with contextlib.suppress(OSError, anyio.BrokenResourceError):
            await sink.send_eof()

    async def handle(client: SocketStream) -> None:
        async with client:
            data = b""
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                while b"\r\n\r\n" not in data and len(data) < 65536:
                    data += await client.receive()
            heads.append(data.partition(b"\r\n\r\n")[0])
            async with await anyio.connect_tcp("127.0.0.1", target_port) as upstream:
                await upstream.send(data)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(pipe, client, upstream)
                    tg.start_soon(pipe, upstream, client)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        yield listener.extra(SocketAttribute.local_port), heads
        tg.cancel_scope.cancel()


def _node_headers(head: bytes) -> dict[str, str]:
    headers = {}
    for line in head.decode().split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.lower().startswith("tunnel-node-"):
            headers[name] = value.strip()
    return headers


async def test_a_node_signature_captured_before_its_node_restarted_is_refused_after(
    tmp_path: Path, redis_server: RedisServer, haproxy: str
) -> None:
    port1, port2 = free_port(), free_port()
    cluster = RelayCluster(
        redis=redis_server, balancer=Haproxy(tmp_path / "haproxy", [port1, port2], haproxy)
    )
    async with recording_proxy(port1) as (proxy_port, heads):
        # The other nodes reach node 1 through the recording proxy.
        node_url = ("--node-url", f"ws://127.0.0.1:{proxy_port}")
        try:
            cluster.nodes.append(cluster.start_node(tmp_path, port1, *node_url))
            cluster.nodes.append(cluster.start_node(tmp_path, port2))
            cluster.balancer.start()
            for node in cluster.nodes:
                await wait_member(node)
                await cluster.balancer.wait_status(node.port, "UP", "L7OK")
            await cluster.balancer.route_to(port1)
            node2 = cluster.nodes[1]
            async with running_host(host_settings(cluster.balancer.url, tmp_path)) as host:
                # A teammate entering at node 2 is forwarded to node 1: the signed request
                # goes by the proxy.
                assert await attach_and_echo(via(host.drive_link, node2), b"once") == b"once"
                captured = _node_headers(heads[-1])
                assert "Tunnel-Node-Signature" in captured
                await anyio.to_thread.run_sync(cluster.nodes[0].process.stop)
                cluster.nodes[0] = await anyio.to_thread.run_sync(
                    lambda: cluster.start_node(tmp_path, port1, *node_url)
                )
                await wait_member(cluster.nodes[0])
                url = f"ws://127.0.0.1:{port1}/v1/node/link"
                with pytest.raises(InvalidStatus) as replayed:
                    async with connect(url, additional_headers=captured):
                        pass
                assert replayed.value.response.status_code == 403
                assert 'relay_rejected_total{reason="node_auth"} 1.0' in cluster.nodes[0].metrics()
                # The host comes back to node 1, and forwarding to it works with fresh
                # signatures, made for the node's new run.
                await net_wait_online(via(host.drive_link, node2))
        finally:
            cluster.stop()
