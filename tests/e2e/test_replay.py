"""A recorded channel replayed later (what a hostile relay could do) is refused by the host,
also after the host restarted: a channel salt is accepted once per set of share secrets."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from websockets.exceptions import ConnectionClosed

from tests.support import (
    RelayProcess,
    attach_and_echo,
    attach_proxy,
    host_settings,
    raw_peer,
    running_host,
    via,
)
from tunnel.host import HostChannel
from tunnel.proto import Close, Window, decode_frame

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def _replay(relay_url: str, recorded: list[bytes]) -> int | None:
    """Send the recorded messages again on a fresh connection; the code the channel closes with."""
    async with raw_peer(relay_url) as peer:
        await peer.receive_frame()  # the relay's hello (a new challenge; teammates sign nothing)
        for message in recorded:
            # Replay the hello, the open and the data. The teammate's window grants and its
            # close concern the old channel: the relay itself would answer those.
            if not isinstance(decode_frame(message), Close | Window):
                await peer.websocket.send(message)
        with anyio.fail_after(10):
            while True:
                frame = decode_frame(await peer.websocket.recv())  # type: ignore[arg-type]
                if isinstance(frame, Close):
                    return frame.code
    return None


async def test_a_replayed_channel_is_refused_before_and_after_a_host_restart(
    relay: RelayProcess, tmp_path: Path
) -> None:
    received: list[bytes] = []

    async def recording_echo(channel: HostChannel) -> None:
        while True:
            message = await channel.receive()
            if channel.name != "probe":  # running_host's readiness probe
                received.append(message)
            await channel.send(message)

    recorded: list[bytes] = []
    settings = host_settings(relay.url, tmp_path)
    async with running_host(settings, recording_echo) as host:
        link = host.drive_link

        def record(message: bytes) -> bytes:
            recorded.append(message)
            return message

        async with attach_proxy(relay.url, up=record) as proxy:
            echoed = await attach_and_echo(via(link, proxy), b"approve the deploy")
        assert echoed == b"approve the deploy"
        assert received == [b"approve the deploy"]

        assert await _replay(relay.url, recorded) == 4003
        assert received == [b"approve the deploy"]

    # Same key, same secrets, new process state: the salt file still remembers.
    async with running_host(settings, recording_echo):
        try:
            code = await _replay(relay.url, recorded)
        except ConnectionClosed:
            code = None
        assert code == 4003
    assert received == [b"approve the deploy"]
