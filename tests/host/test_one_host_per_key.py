"""One host process per key: a second `tunnel host` stops with one line, `--replace` takes over,
and a reconnect of the same process still replaces its own stale connection."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest
from anyio.abc import SocketStream

from tests.support import (
    RelayProcess,
    attach_and_echo,
    eventually,
    host_settings,
    read_line,
    running_host,
    wait_online,
)
from tunnel.process.exit_codes import EXIT_REFUSED

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

ROOT = Path(__file__).resolve().parents[2]


class HostProcess:
    """`tunnel host --echo` as a subprocess: its links from stdout, its stderr in a file."""

    def __init__(self, relay: RelayProcess, key_file: Path, name: str, *args: str) -> None:
        self.stderr_path = key_file.parent / f"{name}-stderr.log"
        with self.stderr_path.open("wb") as stderr:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tunnel.cli",
                    "host",
                    "--echo",
                    "--relay",
                    relay.url,
                    "--key-file",
                    str(key_file),
                    *args,
                ],
                cwd=ROOT,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
                stdout=subprocess.PIPE,
                stderr=stderr,
            )

    async def lines(self, count: int) -> list[str]:
        # In a thread: the event loop keeps running while we wait on the pipe.
        return [await anyio.to_thread.run_sync(read_line, self.proc) for _ in range(count)]

    async def wait(self, timeout: float = 30.0) -> int:
        return await anyio.to_thread.run_sync(self.proc.wait, timeout)

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@contextlib.contextmanager
def host_process(
    relay: RelayProcess, key_file: Path, name: str, *args: str
) -> Iterator[HostProcess]:
    host = HostProcess(relay, key_file, name, *args)
    try:
        yield host
    finally:
        host.stop()


async def registered(host: HostProcess) -> tuple[str, str]:
    """Read the host's first lines; return its host id and view link once teammates reach it."""
    id_line, view_line, _drive_line = await host.lines(3)
    host_id = id_line.removeprefix("host id:").strip()
    view = view_line.removeprefix("view link:").strip()
    await wait_online(view)
    return host_id, view


def assert_one_line_saying_another_host_shares(stderr: str, host_id: str, key_file: Path) -> None:
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("tunnel host: another host is sharing with this key"), stderr
    assert host_id in lines[0]
    assert str(key_file) in lines[0]
    assert "--replace" in lines[0]


async def test_a_second_host_with_the_same_key_stops_with_one_line_and_the_first_serves_on(
    relay: RelayProcess, tmp_path: Path
) -> None:
    key_file = tmp_path / "host_key"
    with host_process(relay, key_file, "first") as first:
        host_id, view = await registered(first)
        with host_process(relay, key_file, "second") as second:
            assert await second.wait() == EXIT_REFUSED
            assert_one_line_saying_another_host_shares(second.stderr(), host_id, key_file)
            # Refused before it showed anything: no links that would look like its own session.
            assert second.proc.stdout is not None
            assert second.proc.stdout.read() == b""
        assert first.proc.poll() is None
        assert await attach_and_echo(view, b"still the first") == b"still the first"
        # The first never noticed: it was not replaced, not even for a moment.
        assert first.stderr() == ""
    assert relay.stderr().count(f"host={host_id} online") == 1


async def test_replace_takes_over_and_the_first_host_stops_with_one_line(
    relay: RelayProcess, tmp_path: Path
) -> None:
    key_file = tmp_path / "host_key"
    with host_process(relay, key_file, "first") as first:
        host_id, view = await registered(first)
        with host_process(relay, key_file, "second", "--replace") as second:
            assert (await registered(second))[0] == host_id
            assert await first.wait() == EXIT_REFUSED
            assert_one_line_saying_another_host_shares(first.stderr(), host_id, key_file)
            assert second.proc.poll() is None
            assert await attach_and_echo(view, b"the second") == b"the second"
    log = relay.stderr()
    # Not a fight: each came online once, one took over, and the first never came back to try.
    assert log.count(f"host={host_id} online") == 2
    assert log.count("takes over from another host process") == 1
    assert "4009 another host is online with this key" not in log


class FreezingProxy:
    """A TCP proxy to the relay. `freeze()` stops forwarding on the connections made so far and
    keeps them open, as a network change leaves a connection the relay still thinks alive."""

    def __init__(self) -> None:
        self.upstream_port = 0
        self._generation = 0

    def freeze(self) -> None:
        self._generation += 1

    async def handle(self, client: SocketStream) -> None:
        generation = self._generation
        async with client, await anyio.connect_tcp("127.0.0.1", self.upstream_port) as upstream:

            async def pipe(source: SocketStream, sink: SocketStream) -> None:
                with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                    while True:
                        chunk = await source.receive()
                        if generation != self._generation:
                            await anyio.sleep_forever()  # frozen: silent, never closed
                        await sink.send(chunk)

            async with anyio.create_task_group() as tg:
                tg.start_soon(pipe, client, upstream)
                tg.start_soon(pipe, upstream, client)


@contextlib.asynccontextmanager
async def freezing_proxy() -> AsyncIterator[tuple[FreezingProxy, str]]:
    """A FreezingProxy listening on loopback, and its URL (the relay's public URL)."""
    proxy = FreezingProxy()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, proxy.handle)
        yield proxy, f"http://127.0.0.1:{port}"
        tg.cancel_scope.cancel()


async def test_a_reconnect_of_the_same_host_replaces_its_stale_connection(tmp_path: Path) -> None:
    async with freezing_proxy() as (proxy, url):
        relay = RelayProcess(tmp_path, "--public-url", url).start()
        proxy.upstream_port = relay.port
        settings = host_settings(url, tmp_path, ping_interval=0.5, ping_timeout=0.5)
        try:
            async with running_host(settings) as host:
                proxy.freeze()
                # The host's keepalive notices; the relay's (20 s) does not, so the relay still
                # holds the old connection when the host's new one says hello.
                assert await eventually(lambda: not host.connected, attempts=150)
                with anyio.fail_after(20):
                    await wait_online(host.view_link)
                assert host.connected
                assert await attach_and_echo(host.drive_link, b"back") == b"back"
            log = relay.stderr()
            assert f"host={host.host_id} replaces its previous connection" in log
            assert "4009" not in log
        finally:
            relay.stop()
