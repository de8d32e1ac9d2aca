"""Helpers for the network tests: a relay subprocess, an in-process host, raw WebSocket peers."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import msgpack
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from tunnel.e2e.crypto import ShareLink, e2e_root
from tunnel.e2e.opening import TeammateOpening
from tunnel.handshake import PROTOCOL_VERSION
from tunnel.host import Host, HostSettings, echo_handler
from tunnel.host.runner import ChannelHandler
from tunnel.teammate.client import HostGoneError, TeammateSession, connect_teammate

ROOT = Path(__file__).resolve().parents[1]
LISTENING = re.compile(r"relay listening on (http://127\.0\.0\.1:(\d+))")


class RelayProcess:
    """`tunnel relay` as a subprocess on loopback; stderr goes to a file the test can read."""

    def __init__(self, workdir: Path, *args: str, port: int = 0) -> None:
        self.workdir = workdir
        self.args = args
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None
        self.stderr_path = workdir / f"relay-stderr-{time.monotonic_ns()}.log"
        self.url = ""

    def start(self, timeout: float = 20.0) -> RelayProcess:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        stderr = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tunnel.cli", "relay", "--port", str(self.port), *self.args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
        stderr.close()
        assert self.proc.stdout is not None
        line = _read_line(self.proc, timeout)
        match = LISTENING.search(line)
        assert match, f"unexpected relay output {line!r}; stderr: {self.stderr()}"
        self.url = match.group(1)
        self.port = int(match.group(2))
        return self

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()


def stop_process(proc: subprocess.Popen[bytes], within: float = 10.0) -> int:
    """SIGTERM `proc` if it still runs, then `wait_or_kill`; its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return wait_or_kill(proc, within)


def wait_or_kill(proc: subprocess.Popen[bytes], within: float = 10.0) -> int:
    """Wait `within` seconds for `proc` to exit, SIGKILL it if it has not; its exit code."""
    try:
        return proc.wait(within)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(10)


def _read_line(proc: subprocess.Popen[bytes], timeout: float) -> str:
    """Read one stdout line of `proc`, failing after `timeout` seconds."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    buffer = b""
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while b"\n" not in buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (proc.poll() is not None and not selector.select(0)):
                raise AssertionError(f"no line from the process in time; got {buffer!r}")
            if selector.select(remaining):
                chunk = os.read(proc.stdout.fileno(), 1)
                if not chunk:
                    raise AssertionError(f"process closed stdout; got {buffer!r}")
                buffer += chunk
    return buffer.decode(errors="replace")


def read_line(proc: subprocess.Popen[bytes], timeout: float = 20.0) -> str:
    """Public wrapper of _read_line for other subprocesses (the host)."""
    return _read_line(proc, timeout)


def host_settings(relay_url: str, workdir: Path, **overrides: Any) -> HostSettings:
    """Settings for an in-process host with its key in `workdir`, reconnecting quickly."""
    values: dict[str, Any] = {
        "relay_url": relay_url,
        "key_file": workdir / "host_key",
        "backoff_initial": 0.2,
        "backoff_max": 1.0,
        "ping_interval": 5.0,
        "ping_timeout": 5.0,
    }
    values.update(overrides)
    return HostSettings(**values)


@contextlib.asynccontextmanager
async def running_host(
    settings: HostSettings, handler: ChannelHandler = echo_handler, **kwargs: Any
) -> AsyncIterator[Host]:
    """Run a host in the background for the duration of the block."""
    async with anyio.create_task_group() as tg:
        host = Host(settings, handler, **kwargs)
        await tg.start(_run_host, host)
        await wait_online(host.view_link)
        try:
            yield host
        finally:
            tg.cancel_scope.cancel()


async def _run_host(host: Host, *, task_status: anyio.abc.TaskStatus[Host]) -> None:
    await host.run(task_status=task_status)


async def echo_roundtrip(session: TeammateSession, message: bytes) -> bytes:
    await session.send(message)
    return await session.receive_plaintext()


async def attach_and_echo(link: ShareLink | str, message: bytes = b"ping") -> bytes:
    """Attach with `link`, send one message through the echo host, return the echo."""
    with anyio.fail_after(10):
        async with connect_teammate(link, name="once") as session:
            return await echo_roundtrip(session, message)


async def _echo_probe(session: TeammateSession) -> None:
    assert await echo_roundtrip(session, b"probe") == b"probe"


async def wait_online(
    link: ShareLink | str,
    attempts: int = 100,
    probe: Callable[[TeammateSession], Awaitable[None]] = _echo_probe,
) -> None:
    """Wait until the relay routes `link` to its host: the host is registered, `probe` passes
    (by default: echo works).

    The relay does not acknowledge a host's hello, so a teammate right after may still see 4005.
    """
    for _ in range(attempts):
        try:
            with anyio.fail_after(5):
                async with connect_teammate(link, name="probe") as session:
                    await probe(session)
                    return
        except (HostGoneError, OSError):
            await anyio.sleep(0.1)
    raise AssertionError("the host did not come online")


@dataclass
class RawPeer:
    """A hand-driven WebSocket client speaking raw frames to the relay."""

    websocket: ClientConnection

    async def send_frame(self, channel: int | None, kind: str, payload: dict[str, Any]) -> None:
        await self.websocket.send(msgpack.packb({"c": channel, "k": kind, "p": payload}))

    async def receive_frame(self) -> dict[str, Any]:
        message = await self.websocket.recv()
        assert isinstance(message, bytes)
        frame = msgpack.unpackb(message)
        assert isinstance(frame, dict)
        return frame

    async def close_code(self, within: float = 10.0) -> int | None:
        """Read until the relay closes the connection (within `within` s); return its code."""
        with anyio.fail_after(within):
            try:
                while True:
                    await self.websocket.recv()
            except ConnectionClosed:
                pass
        return self.websocket.close_code


@contextlib.asynccontextmanager
async def raw_peer(
    relay_url: str, path: str = "/v1/attach", **kwargs: Any
) -> AsyncIterator[RawPeer]:
    url = relay_url.replace("http://", "ws://") + path
    async with connect(url, compression=None, max_size=None, **kwargs) as websocket:
        yield RawPeer(websocket)


async def raw_teammate(peer: RawPeer, link: ShareLink, name: str = "raw") -> dict[str, Any]:
    """Do the hello exchange as a teammate with a valid token; return the relay's hello."""
    hello = await peer.receive_frame()
    await peer.send_frame(
        None,
        "hello",
        {
            "role": "teammate",
            "version": PROTOCOL_VERSION,
            "host_id": link.host_id,
            "token": link.token,
            "name": name,
        },
    )
    return hello


async def eventually(
    predicate: Callable[[], bool], *, attempts: int = 100, delay: float = 0.1
) -> bool:
    """Poll `predicate` a bounded number of times; return whether it became true."""
    for _ in range(attempts):
        if predicate():
            return True
        await anyio.sleep(delay)
    return predicate()


def start_host_process(relay_url: str, key_file: Path) -> subprocess.Popen[bytes]:
    """`tunnel host --echo` as a subprocess; its stdout is a pipe (links are printed there)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tunnel.cli",
            "host",
            "--echo",
            "--relay",
            relay_url,
            "--key-file",
            str(key_file),
        ],
        cwd=ROOT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


Rewrite = Callable[[bytes], bytes | list[bytes]]
"""What a hostile relay sends instead of a message: another, or a list (none, or several)."""


@contextlib.asynccontextmanager
async def attach_proxy(
    relay_url: str, *, up: Rewrite | None = None, down: Rewrite | None = None
) -> AsyncIterator[str]:
    """A WebSocket proxy in front of the relay's /v1/attach, standing where a hostile relay would:
    `up` sees (and may rewrite) every message a teammate sends, `down` every message it gets.
    Yields the proxy's base URL."""

    async def pipe(source: Any, sink: Any, rewrite: Rewrite | None) -> None:
        try:
            async for message in source:
                sent = rewrite(message) if rewrite and isinstance(message, bytes) else message
                for each in sent if isinstance(sent, list) else [sent]:
                    await sink.send(each)
        except ConnectionClosed:
            pass
        finally:
            await sink.close()

    async def handle(downstream: ServerConnection) -> None:
        url = relay_url.replace("http://", "ws://") + "/v1/attach"
        async with connect(url, compression=None) as upstream, anyio.create_task_group() as tg:
            tg.start_soon(pipe, downstream, upstream, up)
            tg.start_soon(pipe, upstream, downstream, down)

    async with serve(handle, "127.0.0.1", 0, compression=None) as server:
        port = server.sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"


def open_meta(link: ShareLink, name: str) -> dict[str, Any]:
    """A genuine `open` meta for `link` (tunnel.e2e.opening), as a raw peer sends it."""
    return TeammateOpening(
        root=e2e_root(link.secret, link.host_id),
        host_id=link.host_id,
        role=link.role,
        name=name,
    ).meta()


def via(link: ShareLink, proxy_url: str) -> ShareLink:
    """The same link, reached through `proxy_url` instead of the relay."""
    return dataclasses.replace(link, relay_url=proxy_url)
