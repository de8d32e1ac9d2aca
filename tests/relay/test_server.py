"""Relay, host and teammates over real WebSockets: admission and channel isolation."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import anyio
import pytest

from tests.support import (
    RelayProcess,
    echo_roundtrip,
    host_settings,
    read_line,
    running_host,
    start_host_process,
    wait_online,
)
from tunnel.e2e.crypto import ShareLink, new_secret
from tunnel.e2e.identity import HostIdentity
from tunnel.host import HostChannel
from tunnel.process.exit_codes import EXIT_INTERRUPTED
from tunnel.teammate.client import (
    HostGoneError,
    TeammateError,
    UnauthorizedError,
    connect_teammate,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]
RELAY_FRAMINGS = True
"""Tests that take `relay` run on websockets and on picows (tests/relay/conftest.py)."""


async def test_viewer_and_driver_links_both_admit(relay: RelayProcess, tmp_path: Path) -> None:
    async with running_host(host_settings(relay.url, tmp_path)) as host:
        for link in (host.view_link, host.drive_link):
            async with connect_teammate(link, name=link.role) as session:
                assert session.role == link.role
                assert await echo_roundtrip(session, b"hi " + link.role.encode()) == (
                    b"hi " + link.role.encode()
                )


async def test_two_teammates_only_ever_see_their_own_channel(
    relay: RelayProcess, tmp_path: Path
) -> None:
    seen: list[tuple[str, str, str]] = []

    async def recording_echo(channel: HostChannel) -> None:
        peer = channel.meta.get("peer", {})
        if channel.name != "probe":  # running_host's readiness probe
            seen.append((channel.name, channel.role, peer.get("role", "")))
        while True:
            await channel.send(await channel.receive())

    async with running_host(host_settings(relay.url, tmp_path), recording_echo) as host:
        received: dict[str, list[bytes]] = {"ann": [], "bob": []}

        async def teammate(name: str, link: ShareLink) -> None:
            async with connect_teammate(link, name=name) as session:

                async def sender() -> None:
                    for i in range(200):
                        await session.send(f"{name}-{i}".encode() * (1 + i % 50))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(sender)
                    for _ in range(200):
                        received[name].append(await session.receive_plaintext())

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(teammate, "ann", host.view_link)
                tg.start_soon(teammate, "bob", host.drive_link)

    for name in ("ann", "bob"):
        assert received[name] == [f"{name}-{i}".encode() * (1 + i % 50) for i in range(200)]
    # The host learns each teammate's name and the role its token matched, from the relay.
    assert sorted(seen) == [("ann", "view", "view"), ("bob", "drive", "drive")]


async def test_a_wrong_token_is_refused_with_4002(relay: RelayProcess, tmp_path: Path) -> None:
    async with running_host(host_settings(relay.url, tmp_path)) as host:
        forged = ShareLink(
            relay_url=relay.url, host_id=host.host_id, role="drive", secret=new_secret()
        )
        with pytest.raises(UnauthorizedError) as caught:
            async with connect_teammate(forged) as session:
                await echo_roundtrip(session, b"let me in")
        assert caught.value.code == 4002
        # The real links still work afterwards.
        async with connect_teammate(host.drive_link) as session:
            assert await echo_roundtrip(session, b"ok") == b"ok"


async def test_an_unknown_host_is_refused_with_4005(relay: RelayProcess) -> None:
    nobody = HostIdentity.generate()
    link = ShareLink(relay_url=relay.url, host_id=nobody.host_id, role="view", secret=new_secret())
    with pytest.raises(HostGoneError) as caught:
        async with connect_teammate(link) as session:
            await echo_roundtrip(session, b"anyone?")
    assert caught.value.code == 4005
    assert isinstance(caught.value, TeammateError)


async def test_the_host_command_prints_links_that_attach(
    relay: RelayProcess, tmp_path: Path
) -> None:
    proc = start_host_process(relay.url.replace("http://", "ws://"), tmp_path / "cli_key")
    try:
        lines = [read_line(proc) for _ in range(3)]
        assert lines[0].startswith("host id: ")
        view = ShareLink.parse(lines[1].removeprefix("view link:").strip())
        drive = ShareLink.parse(lines[2].removeprefix("drive link:").strip())
        assert view.relay_url == drive.relay_url == relay.url
        assert view.host_id == drive.host_id == lines[0].split()[-1]
        await wait_online(view)
        async with connect_teammate(drive, name="cli") as session:
            assert await echo_roundtrip(session, b"through the CLI host") == b"through the CLI host"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(15) == EXIT_INTERRUPTED
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        assert proc.stdout is not None
        proc.stdout.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize(
    ("public_url", "dialed"),
    [
        ("http://localhost:{port}", "http://LOCALHOST:{port}/"),
        ("HTTP://LocalHost:{port}/", "ws://localhost:{port}"),
    ],
)
async def test_a_host_registers_however_the_relay_url_is_spelled_on_either_end(
    tmp_path: Path, public_url: str, dialed: str
) -> None:
    # The host signs the URL it dials and the relay checks against its public URL: both ends
    # normalize (case, default port, trailing slash), so these spellings are one relay.
    port = _free_port()
    relay = RelayProcess(tmp_path, "--public-url", public_url.format(port=port), port=port)
    relay.start()
    proc = start_host_process(dialed.format(port=port), tmp_path / "cli_key")
    try:
        lines = [read_line(proc) for _ in range(3)]
        view = ShareLink.parse(lines[1].removeprefix("view link:").strip())
        assert view.relay_url == f"http://localhost:{port}"
        await wait_online(view)  # registered: a teammate reaches the host through the relay
        assert "bad host signature" not in relay.stderr()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        assert proc.stdout is not None
        proc.stdout.close()
        relay.stop()


def test_the_relay_says_where_it_listens_once(tmp_path: Path) -> None:
    # On stdout, where a parent process reads the port; the log on stderr does not repeat it.
    relay = RelayProcess(tmp_path).start()  # it read the first line: "relay listening on ..."
    assert relay.proc is not None
    assert relay.proc.stdout is not None
    relay.proc.send_signal(signal.SIGTERM)
    rest = relay.proc.stdout.read().decode()
    relay.stop()
    assert "listening" not in rest
    assert "listening" not in relay.stderr()
