"""A relay that flips one byte of a `d` cannot get it past the receiver: close 4003."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from tunnel.client import DecryptionFailedError, connect_teammate
from tunnel.crypto import ShareLink
from tunnel.host import HostChannel
from tunnel.proto import Data, decode_frame, encode_frame

from .support import (
    RelayProcess,
    attach_and_echo,
    echo_roundtrip,
    eventually,
    host_settings,
    running_host,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@asynccontextmanager
async def tampering_proxy(relay_url: str, *, flip_up: bool) -> AsyncIterator[str]:
    """A WebSocket proxy in front of the relay's /v1/attach that flips one bit of the first
    `d` going up (teammate -> host) or down (host -> teammate). Yields its base URL."""

    async def pipe(source: ServerConnection | object, sink: object, tamper: bool) -> None:
        flipped = False
        try:
            async for message in source:  # type: ignore[attr-defined]
                if tamper and not flipped and isinstance(message, bytes):
                    frame = decode_frame(message)
                    if isinstance(frame, Data):
                        data = bytearray(frame.data)
                        data[len(data) // 2] ^= 0x01
                        message = encode_frame(Data(channel=frame.channel, data=bytes(data)))
                        flipped = True
                await sink.send(message)  # type: ignore[attr-defined]
        except ConnectionClosed:
            pass
        finally:
            await sink.close()  # type: ignore[attr-defined]

    async def handle(downstream: ServerConnection) -> None:
        url = relay_url.replace("http://", "ws://") + "/v1/attach"
        async with connect(url, compression=None) as upstream, anyio.create_task_group() as tg:
            tg.start_soon(pipe, downstream, upstream, flip_up)
            tg.start_soon(pipe, upstream, downstream, not flip_up)

    async with serve(handle, "127.0.0.1", 0, compression=None) as server:
        port = server.sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"


def via(link: ShareLink, proxy_url: str) -> ShareLink:
    return ShareLink(relay_url=proxy_url, host_id=link.host_id, role=link.role, secret=link.secret)


async def test_a_flipped_byte_going_to_the_host_closes_the_channel_with_4003(
    relay: RelayProcess, tmp_path: Path
) -> None:
    outcomes: list[str] = []

    async def guarded_echo(channel: HostChannel) -> None:
        try:
            while True:
                await channel.send(await channel.receive())
        except Exception as exc:
            if channel.name != "probe":  # running_host's readiness probe
                outcomes.append(type(exc).__name__)
            raise

    async with running_host(host_settings(relay.url, tmp_path), guarded_echo) as host:
        async with tampering_proxy(relay.url, flip_up=True) as proxy:
            with pytest.raises(DecryptionFailedError) as caught:
                await attach_and_echo(via(host.drive_link, proxy), b"transfer 10 EUR")
            assert caught.value.code == 4003
        # The host detected it (not just the teammate) and nothing else was affected.
        assert outcomes == ["DecryptionError"]
        async with connect_teammate(host.drive_link) as session:
            assert await echo_roundtrip(session, b"clean") == b"clean"


async def test_a_flipped_byte_going_to_the_teammate_fails_decryption_there(
    relay: RelayProcess, tmp_path: Path
) -> None:
    closes: list[int] = []

    async def watching_echo(channel: HostChannel) -> None:
        try:
            while True:
                await channel.send(await channel.receive())
        finally:
            assert channel.closed is not None
            if channel.name != "probe":  # running_host's readiness probe
                closes.append(channel.closed.code)

    async with running_host(host_settings(relay.url, tmp_path), watching_echo) as host:
        async with tampering_proxy(relay.url, flip_up=False) as proxy:
            with pytest.raises(DecryptionFailedError) as caught:
                await attach_and_echo(via(host.view_link, proxy), b"what the agent said")
            assert caught.value.code == 4003
        # The teammate told the host why it closed the channel.
        assert await eventually(lambda: bool(closes))
        assert closes == [4003]
