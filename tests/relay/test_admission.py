"""Host identity and share links over a real relay: revoke, replacement, authorized keys."""

from __future__ import annotations

import base64
from pathlib import Path

import anyio
import pytest

from tests.support import (
    RelayProcess,
    echo_roundtrip,
    host_settings,
    raw_peer,
    running_host,
    wait_online,
)
from tunnel.e2e.crypto import ShareLink, ShareSecrets
from tunnel.e2e.identity import HostIdentity
from tunnel.handshake import PROTOCOL_VERSION
from tunnel.host import Host, HostChannel, HostRefusedError, echo_handler
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


async def test_a_newer_connection_of_the_same_host_replaces_the_older(
    relay: RelayProcess, tmp_path: Path
) -> None:
    settings = host_settings(relay.url, tmp_path)
    async with running_host(settings) as host:
        identity = HostIdentity.load_or_create(settings.resolved_key_file)
        secrets = ShareSecrets.load_or_create(settings.resolved_secrets_file)
        async with connect_teammate(host.view_link) as session:
            assert await echo_roundtrip(session, b"x") == b"x"
            async with raw_peer(relay.url, "/v1/host") as impostor_with_the_key:
                hello = await impostor_with_the_key.receive_frame()
                await impostor_with_the_key.send_frame(
                    None,
                    "hello",
                    {
                        "role": "host",
                        "version": PROTOCOL_VERSION,
                        "pubkey": identity.public_key,
                        "sig": identity.sign_hello(hello["p"]["challenge"], relay.url),
                        "capabilities": [],
                        "verifiers": secrets.verifiers(identity.host_id),
                    },
                )
                # The teammate's channel went with the replaced connection...
                with pytest.raises(HostGoneError), anyio.fail_after(10):
                    await echo_roundtrip(session, b"y")
                # ...and the real host, dropped with 1001, reconnects and wins back.
                assert await impostor_with_the_key.close_code(within=15) == 1001
        with anyio.fail_after(20):
            await wait_online(host.view_link)


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
