"""Host identity and share links over a real relay: revoke, one process per key, authorized keys."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support import (
    RawPeer,
    RelayProcess,
    echo_roundtrip,
    host_settings,
    raw_peer,
    running_host,
    wait_online,
)
from tunnel.e2e.crypto import ShareLink, ShareSecrets
from tunnel.e2e.identity import HostIdentity
from tunnel.handshake import (
    ADMISSION_PATH,
    INSTANCE_SIZE,
    REGISTER_PATH,
    Invited,
    RelayHello,
    host_hello,
    registration,
)
from tunnel.host import Host, HostChannel, HostRefusedError, HostSettings, echo_handler
from tunnel.teammate.client import (
    HostGoneError,
    RefusedError,
    RevokedError,
    TeammateError,
    UnauthorizedError,
    connect_teammate,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_revoke_closes_channels_with_4008_and_only_new_links_work(
    relay: RelayProcess, tmp_path: Path
) -> None:
    async with running_host(host_settings(relay.url, tmp_path)) as host:
        old_view, old_drive = host.view_link, host.drive_link
        async with connect_teammate(old_view, name="ann") as a, connect_teammate(old_drive) as b:
            assert await echo_roundtrip(a, b"a") == b"a"
            assert await echo_roundtrip(b, b"b") == b"b"
            await host.revoke()
            for session in (a, b):
                with pytest.raises(RevokedError) as caught, anyio.fail_after(10):
                    await echo_roundtrip(session, b"still?")
                assert caught.value.code == 4008

        assert (host.view_link, host.drive_link) != (old_view, old_drive)
        with anyio.fail_after(20):
            await wait_online(host.drive_link)
        for old in (old_view, old_drive):
            with pytest.raises(UnauthorizedError):
                async with connect_teammate(old) as session:
                    await echo_roundtrip(session, b"old link")
        async with connect_teammate(host.view_link) as session:
            assert await echo_roundtrip(session, b"new link") == b"new link"
        # The new secrets are saved: a restarted host keeps the new links.
        saved = ShareSecrets.load_or_create(host.settings.resolved_secrets_file)
        assert saved.link("view", relay.url, host.host_id) == host.view_link


async def test_a_second_host_process_with_the_key_is_refused_with_4009_and_the_first_serves_on(
    relay: RelayProcess, tmp_path: Path
) -> None:
    settings = host_settings(relay.url, tmp_path)
    async with (
        running_host(settings) as host,
        connect_teammate(host.view_link) as session,
        raw_peer(relay.url, "/v1/host") as second,
    ):
        await second.send_frame(None, "hello", await other_process_hello(second, settings))
        assert await second.close_code() == 4009
        assert await echo_roundtrip(session, b"still here") == b"still here"
        assert host.connected
    assert "4009 another host is online with this key" in relay.stderr()


async def test_a_host_process_that_asks_to_replace_takes_over_and_the_first_stops_with_4009(
    relay: RelayProcess, tmp_path: Path
) -> None:
    settings = host_settings(relay.url, tmp_path)
    first = Host(settings, echo_handler)
    refused: list[HostRefusedError] = []
    stopped = anyio.Event()

    async def run_first(*, task_status: anyio.abc.TaskStatus[Host]) -> None:
        try:
            await first.run(task_status=task_status)
        except HostRefusedError as exc:
            refused.append(exc)
        stopped.set()

    async with anyio.create_task_group() as tg:
        await tg.start(run_first)
        await wait_online(first.view_link)
        async with (
            connect_teammate(first.view_link) as session,
            raw_peer(relay.url, "/v1/host") as second,
        ):
            hello = await other_process_hello(second, settings, replace=True)
            await second.send_frame(None, "hello", hello)
            # The first's teammates lose their channel (not their link)...
            with pytest.raises(HostGoneError), anyio.fail_after(10):
                await echo_roundtrip(session, b"who is there?")
            # ...and the first stops for good instead of taking the host id back.
            with anyio.fail_after(10):
                await stopped.wait()
    [error] = refused
    assert error.code == 4009
    assert "another host is sharing with this key" in str(error)
    assert str(settings.resolved_key_file) in str(error)
    assert "--replace" in str(error)
    assert "takes over from another host process" in relay.stderr()


async def other_process_hello(
    peer: RawPeer, settings: HostSettings, *, replace: bool = False
) -> dict[str, Any]:
    """The hello of another process with the same key: its own instance, `replace` as given."""
    identity = HostIdentity.load_or_create(settings.resolved_key_file)
    secrets = ShareSecrets.load_or_create(settings.resolved_secrets_file)
    relay_hello = await peer.receive_frame()
    return host_hello(
        identity,
        RelayHello(challenge=relay_hello["p"]["challenge"], limits={}),
        relay_url=settings.relay_url,
        capabilities=(),
        verifiers=secrets.verifiers(identity.host_id),
        instance=os.urandom(INSTANCE_SIZE),
        replace=replace,
    )


async def test_only_authorized_host_keys_may_register(tmp_path: Path) -> None:
    allowed = HostIdentity.load_or_create(tmp_path / "allowed" / "host_key")
    keys = tmp_path / "authorized_keys"
    keys.write_text(
        f"# hosts allowed on this relay\n{base64.b64encode(allowed.public_key).decode()} laptop\n"
    )
    relay = RelayProcess(tmp_path, "--authorized-keys", str(keys)).start()
    try:
        settings = host_settings(relay.url, tmp_path / "allowed")
        async with running_host(settings) as host, connect_teammate(host.drive_link) as session:
            assert await echo_roundtrip(session, b"ok") == b"ok"

        stranger = Host(host_settings(relay.url, tmp_path / "stranger"), echo_handler)
        with pytest.raises(HostRefusedError) as caught, anyio.fail_after(20):
            await stranger.run()
        assert caught.value.code == 4002
        with pytest.raises(TeammateError):
            async with connect_teammate(stranger.view_link) as session:
                await echo_roundtrip(session, b"nobody home")
    finally:
        relay.stop()


async def test_the_join_hook_can_decline_a_teammate_with_4001(
    relay: RelayProcess, tmp_path: Path
) -> None:
    asked: list[tuple[str, str]] = []

    async def approve(channel: HostChannel) -> bool:
        asked.append((channel.name, channel.role))
        return channel.name != "mallory"

    async with running_host(host_settings(relay.url, tmp_path), on_join=approve) as host:
        with pytest.raises(RefusedError) as caught:
            await attach_and_echo_as(host.drive_link, "mallory")
        assert caught.value.code == 4001
        assert await attach_and_echo_as(host.view_link, "ann") == b"hello"
    assert ("mallory", "drive") in asked
    assert ("ann", "view") in asked


async def attach_and_echo_as(link: ShareLink, name: str) -> bytes:
    with anyio.fail_after(10):
        async with connect_teammate(link, name=name) as session:
            return await echo_roundtrip(session, b"hello")


async def test_a_host_registers_new_verifiers_on_its_link_and_a_refused_registration_ends_no_link(
    relay: RelayProcess, tmp_path: Path
) -> None:
    settings = host_settings(relay.url, tmp_path)
    identity = HostIdentity.load_or_create(settings.resolved_key_file)
    secrets = ShareSecrets.load_or_create(settings.resolved_secrets_file)
    roles = secrets.verifiers(identity.host_id)
    invited = [Invited(role="view", verifier=bytes([n]) * 32) for n in range(1, 3)]
    async with raw_peer(relay.url, "/v1/host") as host:
        hello = await other_process_hello(host, settings)
        await host.send_frame(None, "hello", {**hello, **registration(roles, invited)})

        async def close_of(channel: int, path: str, meta: dict[str, Any]) -> tuple[int, str]:
            await host.send_frame(channel, "open", {"path": path, "meta": meta})
            with anyio.fail_after(10):
                while True:
                    frame = await host.receive_frame()
                    if frame["k"] == "close" and frame["c"] == channel:
                        return frame["p"]["code"], frame["p"]["reason"]

        assert await close_of(1, ADMISSION_PATH, {}) == (1000, "")
        assert (await close_of(3, REGISTER_PATH, {"verifiers": roles, "invited": "x"}))[0] == 4000
        too_many = [Invited(role="view", verifier=bytes([n]) * 32) for n in range(1, 34)]
        over = await close_of(5, REGISTER_PATH, registration(roles, too_many))
        assert over == (4006, "more than 32 personal links")
        assert await close_of(7, REGISTER_PATH, registration(roles, invited[:1])) == (1000, "")
        # The link lives on: a refused registration closes only its channel.
        assert await close_of(9, ADMISSION_PATH, {}) == (1000, "")
