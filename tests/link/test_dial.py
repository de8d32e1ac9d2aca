"""`dial()` through a real relay: both ends adopt the limits the relay advertises in its hello."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.support import host_settings, running_host
from tunnel.e2e.channel import MessageTooLargeError
from tunnel.e2e.crypto import TAG_SIZE
from tunnel.proto import Limits
from tunnel.relay.server import run as run_relay
from tunnel.relay.settings import RelaySettings
from tunnel.teammate.client import connect_teammate

pytestmark = pytest.mark.anyio

# Far below both ends' defaults (256 KiB window and frame): a host or teammate that kept its own
# numbers would overrun the relay's window (4004) or send frames it refuses (4006).
RELAY_LIMITS = Limits(initial_window=32 * 1024, max_data_size=8 * 1024)


async def test_host_and_teammate_use_the_window_and_frame_size_the_relay_advertises(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            port = await tg.start(
                run_relay, RelaySettings(host="127.0.0.1", port=0, limits=RELAY_LIMITS)
            )
            url = f"http://127.0.0.1:{port}"
            async with (
                running_host(host_settings(url, tmp_path)) as host,
                connect_teammate(host.drive_link, name="ana") as session,
            ):
                largest = RELAY_LIMITS.max_data_size - TAG_SIZE
                assert session.max_message_size == largest
                with pytest.raises(MessageTooLargeError):
                    await session.send(b"x" * (largest + 1))
                # Four windows' worth, sent before reading a single echo: only a sender that
                # waits for the relay's grants gets all of it through, in order.
                messages = [bytes([n]) * largest for n in range(16)]
                async with anyio.create_task_group() as senders:

                    async def send_all() -> None:
                        for message in messages:
                            await session.send(message)

                    senders.start_soon(send_all)
                    echoed = [await session.receive_plaintext() for _ in messages]
                assert echoed == messages
            tg.cancel_scope.cancel()
