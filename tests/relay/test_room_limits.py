"""What one view link can take of a host's room at the relay: drivers always get a seat, a
teammate that opens no channel gives its seat back, and half-finished WebSocket openings count
against the per-IP limit. Through a real relay process on loopback."""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path

import anyio
import pytest
from websockets.exceptions import InvalidStatus

from tests.support import (
    RawPeer,
    RelayProcess,
    echo_roundtrip,
    host_settings,
    raw_peer,
    raw_teammate,
    running_host,
)
from tunnel.teammate.client import connect_teammate

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

FLOOD = 64


async def test_a_driver_gets_in_past_64_hello_only_view_connections(tmp_path: Path) -> None:
    relay = RelayProcess(tmp_path, "--max-connections-per-ip", "0").start()
    try:
        async with (
            running_host(host_settings(relay.url, tmp_path)) as host,
            contextlib.AsyncExitStack() as stack,
        ):
            viewers: list[RawPeer] = []
            for index in range(FLOOD):
                peer = await stack.enter_async_context(raw_peer(relay.url))
                await raw_teammate(peer, host.view_link, name=f"squatter {index}")
                viewers.append(peer)
            # The view link took every seat it may have; the drive seats are still free.
            with anyio.fail_after(20):
                async with connect_teammate(host.drive_link, name="driver") as driver:
                    assert await echo_roundtrip(driver, b"in") == b"in"
            refused = 0
            for peer in viewers:
                with contextlib.suppress(TimeoutError):
                    if await peer.close_code(within=0.2) == 4006:
                        refused += 1
            assert refused == FLOOD - (32 - 4)
    finally:
        relay.stop()


async def test_a_teammate_that_opens_no_channel_is_closed_and_gives_its_seat_back(
    tmp_path: Path,
) -> None:
    relay = RelayProcess(
        tmp_path,
        "--max-teammates-per-host",
        "1",
        "--drive-seats",
        "0",
        "--channel-timeout",
        "0.5",
    ).start()
    try:
        async with running_host(host_settings(relay.url, tmp_path)) as host:
            async with raw_peer(relay.url) as idle:
                await raw_teammate(idle, host.view_link, name="idle")
                assert await idle.close_code(within=10) == 4006
            # The seat is free again, and a teammate using its channel keeps it.
            async with connect_teammate(host.view_link, name="busy") as busy:
                assert await echo_roundtrip(busy, b"one") == b"one"
                await anyio.sleep(1.5)  # three times the bound
                assert await echo_roundtrip(busy, b"two") == b"two"
        assert "no channel open" in relay.stderr()
    finally:
        relay.stop()


async def test_half_finished_openings_count_against_the_per_ip_limit(tmp_path: Path) -> None:
    relay = RelayProcess(tmp_path, "--max-connections-per-ip", "4").start()
    held: list[socket.socket] = []
    try:
        for _ in range(4):
            sock = socket.create_connection(("127.0.0.1", relay.port), timeout=5)
            # Part of an upgrade request, never finished.
            sock.sendall(b"GET /v1/attach HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n")
            held.append(sock)
        with anyio.fail_after(10):
            with pytest.raises(InvalidStatus) as caught:
                async with raw_peer(relay.url):
                    pass
        assert caught.value.response.status_code == 503
        for sock in held:
            sock.close()
        held.clear()
        # Once they are gone the address connects again (bounded wait for the relay to see it).
        for _ in range(50):
            try:
                async with raw_peer(relay.url) as again:
                    assert (await again.receive_frame())["k"] == "hello"
                    break
            except InvalidStatus:
                await anyio.sleep(0.1)
        else:
            raise AssertionError("the address stayed blocked")
    finally:
        for sock in held:
            sock.close()
        relay.stop()
