"""`tunnel host --agent ... --approve` and `tunnel attach` as real subprocesses."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.support import RelayProcess, read_line
from tunnel.process.groups import unwrap_group
from tunnel.teammate.client import RefusedError, RevokedError, UnauthorizedError

from .conftest import acp_spec, wait_online
from .teammate import attached

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONUNBUFFERED="1", COLUMNS="500")
TUNNEL = (sys.executable, "-m", "tunnel.cli")


async def _read_until(
    proc: subprocess.Popen[bytes], pattern: str, lines: int = 50
) -> re.Match[str]:
    # In a thread: the event loop must keep serving the teammates while we wait on the pipe.
    return await anyio.to_thread.run_sync(_read_until_sync, proc, pattern, lines)


def _read_until_sync(proc: subprocess.Popen[bytes], pattern: str, lines: int) -> re.Match[str]:
    seen = []
    for _ in range(lines):
        line = read_line(proc, timeout=30)
        seen.append(line)
        match = re.search(pattern, line)
        if match:
            return match
    raise AssertionError(f"no line matching {pattern!r} in {seen!r}")


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return proc.returncode


def _start_attach(link: str, name: str, *args: str) -> subprocess.Popen[bytes]:
    """`tunnel attach` as a subprocess: the link in its environment, stdin and stdout piped."""
    return subprocess.Popen(
        [*TUNNEL, "attach", "--name", name, *args],
        cwd=ROOT,
        env=dict(ENV, TUNNEL_LINK=link),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


def _start_host(
    relay: RelayProcess, tmp_path: Path, workspace: Path, *args: str
) -> subprocess.Popen[bytes]:
    """`tunnel host` sharing the fake ACP agent, its state in tmp_path; stdin is a pipe."""
    return subprocess.Popen(
        [
            *TUNNEL,
            "host",
            "--relay",
            relay.url,
            "--agent",
            acp_spec(),
            "--workspace",
            str(workspace),
            "--log-db",
            str(tmp_path / "log.db"),
            "--key-file",
            str(tmp_path / "key"),
            *args,
        ],
        cwd=ROOT,
        env=ENV,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


@pytest.fixture
def host(relay: RelayProcess, tmp_path: Path, workspace: Path) -> Iterator[subprocess.Popen[bytes]]:
    proc = _start_host(relay, tmp_path, workspace, "--name", "hannah", "--approve")
    try:
        yield proc
    finally:
        assert _stop(proc) == 0


async def test_approve_admits_or_refuses_each_joiner_from_the_host_console(
    host: subprocess.Popen[bytes],
) -> None:
    assert host.stdin is not None
    drive_link = (await _read_until(host, r"drive link: (\S+)")).group(1)

    async with attached(drive_link, "alice", subscribe=False) as alice:
        await _read_until(host, r"alice wants to drive\. Admit\?")
        host.stdin.write(b"y\n")
        host.stdin.flush()
        await alice.wait_for(lambda t: t.ready is not None)

    async def refused_joiner() -> None:
        async with unwrap_group(), attached(drive_link, "mallory", subscribe=False) as mallory:
            await _read_until(host, r"mallory wants to drive\. Admit\?")
            host.stdin.write(b"n\n")
            host.stdin.flush()
            await mallory.wait_for(lambda t: t.ready is not None)

    with pytest.raises(RefusedError):
        await refused_joiner()

    # The host user is a co-driver too: a prompt typed at the console reaches the agent.
    host.stdin.write(b"hello from the console\n")
    host.stdin.flush()
    await _read_until(host, r"agent: echo: hello from the console")


async def test_tunnel_attach_prompts_from_the_keyboard_and_shows_the_reply(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    host = _start_host(relay, tmp_path, workspace, "--no-interactive")
    try:
        drive_link = (await _read_until(host, r"drive link: (\S+)")).group(1)
        await prompt_from_attach(drive_link, "alice", shown_as="alice")
    finally:
        assert _stop(host) == 0


async def test_host_and_attach_dial_with_picows_when_asked(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    # The `fast` extra, which the suite installs: both ends' links then read with picows.
    host = _start_host(relay, tmp_path, workspace, "--no-interactive", "--framing", "picows")
    try:
        drive_link = (await _read_until(host, r"drive link: (\S+)")).group(1)
        await prompt_from_attach(drive_link, "alice", "--framing", "picows", shown_as="alice")
    finally:
        assert _stop(host) == 0


async def prompt_from_attach(link: str, name: str, *args: str, shown_as: str) -> None:
    """`tunnel attach LINK --name NAME ARGS` types a prompt, sees it under `shown_as` and the
    demo agent's reply, and quits with 0."""
    attach = _start_attach(link, name, *args)
    try:
        assert attach.stdin is not None
        await _read_until(attach, rf"attached as {shown_as} \(drive\)")
        attach.stdin.write(b"what is up\n")
        attach.stdin.flush()
        await _read_until(attach, rf"{shown_as}: what is up")
        await _read_until(attach, r"agent: echo: what is up")
        attach.stdin.write(b"/quit\n")
        attach.stdin.flush()
        assert attach.wait(15) == 0
    finally:
        _stop(attach)


async def test_revoke_at_the_host_console_cuts_everyone_off_and_prints_new_links(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    host = _start_host(relay, tmp_path, workspace)
    try:
        assert host.stdin is not None
        old_link = (await _read_until(host, r"drive link: (\S+)")).group(1)
        await wait_online(old_link)

        async def cut_off() -> None:
            async with unwrap_group(), attached(old_link, "alice") as alice:
                await alice.wait_for(lambda t: t.snapshot_done)
                host.stdin.write(b"/revoke\n")
                host.stdin.flush()
                await alice.wait_for(lambda t: False, within=20)

        with pytest.raises(RevokedError):
            await cut_off()
        new_link = (await _read_until(host, r"drive link: (\S+)")).group(1)
        assert new_link != old_link
        await wait_online(new_link)
        with pytest.raises(UnauthorizedError):
            async with unwrap_group(), attached(old_link, "mallory") as mallory:
                await mallory.wait_for(lambda t: t.ready is not None)
    finally:
        assert _stop(host) == 0
