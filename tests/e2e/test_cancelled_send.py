"""A send cancelled while it waits for window never consumes a nonce: the channel stays usable.

The end-to-end nonce is a message counter, so a message sealed but never sent would make every
later message fail to decrypt (4003). The session handler cancels a stream's pending send when a
teammate resubscribes, so this must hold for real.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.support import RelayProcess, host_settings, running_host
from tunnel.host import HostChannel
from tunnel.teammate.client import connect_teammate

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

CHUNK = 60_000


async def test_a_send_cancelled_while_blocked_on_window_leaves_the_channel_usable(
    relay: RelayProcess, tmp_path: Path
) -> None:
    outcome: dict[str, int] = {}
    blocked = anyio.Event()

    async def flooding_handler(channel: HostChannel) -> None:
        if channel.name == "probe":  # running_host's readiness probe: plain echo
            await channel.send(await channel.receive())
            return
        await channel.receive()  # the teammate's "go"
        sent = 0
        while True:  # fill the window: the teammate is not reading yet
            with anyio.move_on_after(1.0) as scope:
                await channel.send(sent.to_bytes(4, "big") + bytes(CHUNK))
            if scope.cancelled_caught:
                break  # this send was cancelled while waiting for window
            sent += 1
        outcome["sent"] = sent
        blocked.set()
        await channel.send(b"after the cancelled send")
        await channel.receive()  # keep the channel open until the teammate is done

    async with (
        running_host(host_settings(relay.url, tmp_path), flooding_handler) as host,
        connect_teammate(host.drive_link, name="reader") as session,
    ):
        await session.send(b"go")
        with anyio.fail_after(20):
            await blocked.wait()
        assert outcome["sent"] >= 2  # flow control really pushed back
        with anyio.fail_after(20):
            for index in range(outcome["sent"]):
                message = await session.receive_plaintext()
                assert int.from_bytes(message[:4], "big") == index
            # Would raise DecryptionFailedError had the cancelled send sealed a message.
            assert await session.receive_plaintext() == b"after the cancelled send"
        await session.send(b"done")
