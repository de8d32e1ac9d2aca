"""Every relay limit, when broken, closes the offender with 4006 and leaves the rest alone."""

from __future__ import annotations

import contextlib
from pathlib import Path

import anyio
import pytest
from websockets.exceptions import InvalidStatus

from tests.support import (
    RelayProcess,
    attach_and_echo,
    echo_roundtrip,
    host_settings,
    open_meta,
    raw_peer,
    raw_teammate,
    running_host,
)
from tunnel.e2e.crypto import ShareSecrets
from tunnel.e2e.identity import HostIdentity
from tunnel.handshake import PROTOCOL_VERSION
from tunnel.proto import Limits
from tunnel.teammate.client import LimitReachedError, connect_teammate

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_connections_per_ip_beyond_the_limit_are_refused_with_503(tmp_path: Path) -> None:
    relay = RelayProcess(tmp_path, "--max-connections-per-ip", "3").start()
    try:
        async with contextlib.AsyncExitStack() as stack:
            peers = [await stack.enter_async_context(raw_peer(relay.url)) for _ in range(3)]
            for peer in peers:
                assert (await peer.receive_frame())["k"] == "hello"
            # Counted from the TCP accept: refused before its opening (docs/relay.md).
            with pytest.raises(InvalidStatus) as refused:
                async with raw_peer(relay.url):
                    pass
            assert refused.value.response.status_code == 503
            # The three admitted connections are untouched.
            for peer in peers:
                assert peer.websocket.close_code is None
        # Once they are gone, the address may connect again (bounded wait for the relay to see it).
        for _ in range(50):
            async with raw_peer(relay.url) as again:
                frame = await again.websocket.recv()
                if isinstance(frame, bytes):
                    break
            await anyio.sleep(0.1)
        else:
            raise AssertionError("the address stayed blocked")
    finally:
        relay.stop()


async def test_teammates_per_host_beyond_the_limit_get_4006(tmp_path: Path) -> None:
    relay = RelayProcess(tmp_path, "--max-teammates-per-host", "2").start()
    try:
        # The readiness probe of running_host is one teammate; it has left when we start.
        async with (
            running_host(host_settings(relay.url, tmp_path)) as host,
            connect_teammate(host.view_link) as a,
            connect_teammate(host.drive_link) as b,
        ):
            assert await echo_roundtrip(a, b"a") == b"a"
            assert await echo_roundtrip(b, b"b") == b"b"
            with pytest.raises(LimitReachedError) as caught:
                await attach_and_echo(host.view_link)
            assert caught.value.code == 4006
            assert await echo_roundtrip(a, b"a again") == b"a again"
    finally:
        relay.stop()


async def test_hosts_beyond_the_limit_get_4006(tmp_path: Path) -> None:
    relay = RelayProcess(tmp_path, "--max-hosts", "1").start()
    try:
        async with running_host(host_settings(relay.url, tmp_path)):
            other = HostIdentity.generate()
            async with raw_peer(relay.url, "/v1/host") as peer:
                hello = await peer.receive_frame()
                await peer.send_frame(
                    None,
                    "hello",
                    {
                        "role": "host",
                        "version": PROTOCOL_VERSION,
                        "pubkey": other.public_key,
                        "sig": other.sign_hello(hello["p"]["challenge"], relay.url),
                        "capabilities": [],
                        "verifiers": ShareSecrets.generate().verifiers(other.host_id),
                    },
                )
                assert await peer.close_code() == 4006
    finally:
        relay.stop()


async def test_channels_per_link_beyond_the_limit_close_the_link_with_4006(tmp_path: Path) -> None:
    relay = RelayProcess(tmp_path, "--max-channels-per-link", "2").start()
    try:
        async with running_host(host_settings(relay.url, tmp_path)) as host:
            async with raw_peer(relay.url) as peer:
                await raw_teammate(peer, host.view_link)
                for channel in (1, 3, 5):
                    meta = open_meta(host.view_link, "greedy")
                    await peer.send_frame(channel, "open", {"path": "session", "meta": meta})
                assert await peer.close_code() == 4006
            async with connect_teammate(host.view_link) as session:
                assert await echo_roundtrip(session, b"fine") == b"fine"
    finally:
        relay.stop()


async def test_one_teammate_cannot_take_all_the_host_channels(tmp_path: Path) -> None:
    relay = RelayProcess(tmp_path, "--max-channels-per-teammate", "2").start()
    try:
        async with (
            running_host(host_settings(relay.url, tmp_path)) as host,
            raw_peer(relay.url) as greedy,
        ):
            await raw_teammate(greedy, host.view_link)
            for channel in (1, 3, 5):
                meta = open_meta(host.view_link, "greedy")
                await greedy.send_frame(channel, "open", {"path": "session", "meta": meta})
            # The third open is refused on its own; the link and its two channels stay.
            with anyio.fail_after(10):
                while True:
                    frame = await greedy.receive_frame()
                    if frame["k"] == "close" and frame["c"] == 5:
                        break
            assert frame["p"]["code"] == 4006
            assert greedy.websocket.close_code is None
            # Everybody else still gets channels.
            async with connect_teammate(host.view_link) as session:
                assert await echo_roundtrip(session, b"fine") == b"fine"
    finally:
        relay.stop()


async def test_an_open_beyond_the_hosts_own_channel_limit_is_refused_alone(tmp_path: Path) -> None:
    # The relay would allow 256 channels on the host link and any number per teammate; the host
    # allows 3. The host's hello says so, and the relay keeps within it.
    relay = RelayProcess(tmp_path, "--max-channels-per-teammate", "0").start()
    try:
        settings = host_settings(relay.url, tmp_path, limits=Limits(max_channels=3))
        async with running_host(settings) as host, raw_peer(relay.url) as greedy:
            await raw_teammate(greedy, host.view_link)
            for channel in (1, 3, 5, 7):
                meta = open_meta(host.view_link, "greedy")
                await greedy.send_frame(channel, "open", {"path": "session", "meta": meta})
            with anyio.fail_after(10):
                while True:
                    frame = await greedy.receive_frame()
                    if frame["k"] == "close" and frame["c"] == 7:
                        break
            assert frame["p"]["code"] == 4006
            # Refused for that channel only: the teammate's link and the host's stay up.
            assert greedy.websocket.close_code is None
            assert host.connected
        # The host never lost its link, so it came online exactly once.
        assert relay.stderr().count(f"host={host.host_id} online") == 1
    finally:
        relay.stop()
