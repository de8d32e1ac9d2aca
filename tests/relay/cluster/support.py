"""A relay cluster on loopback for the tests: Redis, three node processes, a load balancer.

Everything is real: `redis-server`, `tunnel relay --cluster` and haproxy (configured from
docs/cluster.md, `tests.relay.cluster.haproxy`) run as subprocesses, and hosts and teammates are
the project's own Python ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import socket
import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskStatus
from rich.console import Console

from tests.relay.cluster.haproxy import Haproxy, free_port
from tests.support import RelayProcess, host_settings, running_host, stop_process
from tests.support import wait_online as net_wait_online
from tunnel.app.follower import Event, FollowerEvent, Item, SnapshotPage, SnapshotStarted
from tunnel.app.host_messages import Ready
from tunnel.e2e.crypto import ShareLink
from tunnel.host import Host
from tunnel.host.share import Shared, ShareSettings, run_share
from tunnel.teammate.client import TeammateError, TeammateSession, connect_teammate

SECRET = "a cluster secret for the tests only, 32+ bytes"


class RedisServer:
    """`redis-server` on loopback, in memory only, in a directory of its own."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 20.0) -> RedisServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
        args += ["--save", "", "--appendonly", "no", "--dir", str(self.workdir)]
        with (self.workdir / "redis.log").open("ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not self._answers():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise AssertionError(f"redis-server did not start on port {self.port}")
            time.sleep(0.05)
        return self

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)


@dataclass
class Node:
    """One `tunnel relay --cluster` process."""

    process: RelayProcess
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def health(self) -> str:
        with urllib.request.urlopen(f"{self.url}/healthz", timeout=5) as response:
            return str(response.read().decode())

    def metrics(self) -> str:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=5) as response:
            return str(response.read().decode())


@dataclass
class RelayCluster:
    redis: RedisServer
    balancer: Haproxy
    nodes: list[Node] = field(default_factory=list)

    def start_node(self, workdir: Path, port: int | None = None, *extra: str) -> Node:
        port = port or free_port()
        secret = workdir / "cluster-secret"
        if not secret.exists():
            secret.write_text(SECRET)
        process = RelayProcess(
            workdir,
            "--cluster",
            self.redis.url,
            "--node-url",
            f"ws://127.0.0.1:{port}",
            "--cluster-secret-file",
            str(secret),
            "--public-url",
            self.balancer.url,
            "--log-level",
            "debug",
            *extra,
            port=port,
        ).start()
        return Node(process=process, port=port)

    def stop(self) -> None:
        self.balancer.stop()
        for node in self.nodes:
            node.process.stop()


@contextlib.asynccontextmanager
async def relay_cluster(
    workdir: Path, redis: RedisServer, haproxy: str, nodes: int = 3, *extra: str
) -> AsyncIterator[RelayCluster]:
    """`nodes` relay nodes sharing `redis`, behind haproxy (the executable `haproxy`), which
    sends new connections to node 1 until a test routes them elsewhere (`Haproxy.route_to`)."""
    ports = [free_port() for _ in range(nodes)]
    # Its port is known before the nodes start: it is their public URL.
    cluster = RelayCluster(redis=redis, balancer=Haproxy(workdir / "haproxy", ports, haproxy))
    try:
        for port in ports:
            cluster.nodes.append(cluster.start_node(workdir, port, *extra))
        # Started after the nodes, so that its first health checks find them up.
        cluster.balancer.start()
        for node in cluster.nodes:
            await wait_member(node)
            await cluster.balancer.wait_status(node.port, "UP", "L7OK")
        await cluster.balancer.route_to(cluster.nodes[0].port)
        yield cluster
    finally:
        cluster.stop()


async def wait_member(node: Node) -> None:
    """Wait until `node` says it is in the cluster (bounded)."""
    await wait_says(node.health, "cluster: member")


RUN_LINE = re.compile(r"in the cluster through Redis at \S+, as run ([0-9a-f]+)")


async def node_run(node: Node) -> str:
    """The run this node process took (it says it once it is in the cluster; bounded wait)."""
    await wait_member(node)
    await wait_says(node.process.stderr, "as run ")
    found = RUN_LINE.findall(node.process.stderr())
    assert found, node.process.stderr()
    return str(found[-1])


async def wait_says(read: Callable[[], str], text: str, attempts: int = 200) -> None:
    """Wait until `read()` (a node's `health` or `metrics`, called in a thread) contains `text`,
    trying `attempts` times."""
    said = ""
    for _ in range(attempts):
        said = await anyio.to_thread.run_sync(read)
        if text in said:
            return
        await anyio.sleep(0.05)
    raise AssertionError(f"never {text!r}; last: {said!r}")


def via(link: ShareLink, node: Node) -> ShareLink:
    """The same share link, dialed at one node's own address instead of the balancer."""
    return dataclasses.replace(link, relay_url=node.url)


@contextlib.asynccontextmanager
async def echo_host_and_teammates(
    cluster: RelayCluster, workdir: Path, *nodes: Node
) -> AsyncIterator[tuple[Host, list[TeammateSession]]]:
    """An echo host dialing the balancer (so on node 1, unless a test routed it elsewhere), and a
    teammate with its drive link at each of `nodes`, in that order."""
    async with (
        running_host(host_settings(cluster.balancer.url, workdir)) as host,
        contextlib.AsyncExitStack() as stack,
    ):
        teammates = [
            await stack.enter_async_context(
                connect_teammate(via(host.drive_link, node), name=f"at-{node.port}")
            )
            for node in nodes
        ]
        yield host, teammates


# -- a sharing host ---------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def sharing(relay_url: str, workdir: Path) -> AsyncIterator[Shared]:
    """Share the demo agent through `relay_url` in the background until the block ends."""
    workspace = workdir / "workspace"
    workspace.mkdir(exist_ok=True)
    (workspace / "notes.txt").write_text("remember the milk\n")
    settings = ShareSettings(
        host=host_settings(relay_url, workdir),
        agent="demo",
        workspace=workspace,
        log_db=workdir / "log.db",
        conversation_id="main",
        interactive=False,
        demo_delay=0,
    )
    async with anyio.create_task_group() as tg:
        shared: Shared = await tg.start(_share, settings)
        await net_wait_online(shared.host.view_link, probe=_ready_probe)
        try:
            yield shared
        finally:
            tg.cancel_scope.cancel()


async def _share(settings: ShareSettings, *, task_status: TaskStatus[Shared]) -> None:
    with open(os.devnull, "w") as sink:
        await run_share(settings, console=Console(file=sink), task_status=task_status)


async def _ready_probe(session: TeammateSession) -> None:
    assert isinstance(await session.receive(), Ready)


async def host_items(shared: Shared) -> list[tuple[int, str, str]]:
    """(seq, id, type) of every item in the host's log, in order."""
    items = await shared.log.query("main", limit=10_000)
    return [(item.seq, item.id, item.type) for item in items]


# -- a teammate that follows the conversation across reconnects -------------------------------


@dataclass
class Follower:
    """A teammate that keeps attaching (bounded) and records every item exactly as received:
    on each reconnect it subscribes after the last seq it has, so a gap or a duplicate shows."""

    link: ShareLink
    name: str
    items: list[dict[str, Any]] = field(default_factory=list)
    events: int = 0
    idle: int = 0
    """`status` events saying the agent is idle: a turn ended, all its items are logged."""
    attaches: int = 0
    served: int = 0
    """Attaches that got their snapshot: the host served them."""
    resets: int = 0
    closes: list[int] = field(default_factory=list)
    session: TeammateSession | None = None
    changed: anyio.Event = field(default_factory=anyio.Event)

    def triples(self) -> list[tuple[int, str, str]]:
        return [(item["seq"], item["id"], item["type"]) for item in self.items]

    def has(self, type_: str) -> int:
        return sum(1 for item in self.items if item["type"] == type_)

    async def run(self, attempts: int = 200) -> None:
        for _ in range(attempts):
            try:
                async with connect_teammate(self.link, name=self.name) as session:
                    self.session = session
                    self.attaches += 1
                    after = self.items[-1]["seq"] if self.items else None
                    await session.subscribe(after)
                    while True:
                        self._take(await session.receive())
            except (TeammateError, OSError) as exc:
                self.session = None
                self.closes.append(getattr(exc, "code", 0))
                self._ring()
                await anyio.sleep(0.2)
        raise AssertionError(f"{self.name} gave up attaching")

    def _take(self, event: FollowerEvent) -> None:
        match event:
            case SnapshotStarted(reset=True):
                self.resets += 1
            case SnapshotPage():
                self.items.extend(event.items)
                if not event.more:
                    self.served += 1
            case Item():
                self.items.append(dict(event.item))
            case Event():
                self.events += 1
                data = event.event.get("data") or {}
                if event.event.get("kind") == "status" and data.get("state") == "idle":
                    self.idle += 1
        self._ring()

    def _ring(self) -> None:
        self.changed.set()
        self.changed = anyio.Event()

    async def wait_for(self, predicate: Any, within: float = 30.0) -> None:
        with anyio.fail_after(within):
            while not predicate(self):
                await self.changed.wait()


@contextlib.contextmanager
def stopped(redis: RedisServer) -> Iterator[None]:
    """Redis is down inside the block and back (same port, empty) after it."""
    redis.stop()
    try:
        yield
    finally:
        redis.start()
