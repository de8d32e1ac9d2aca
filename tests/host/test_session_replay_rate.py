"""A teammate repeating `subscribe after:-1` gets the log replayed at its channel's
`ReplayLimit` rate, not as fast as it asks: the host's uplink for it stays within the burst plus
the rate, and another channel's fresh join still gets its snapshot. In memory, channels faked;
the bytes are counted against the time the host's own clock says passed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tunnel.agents import DemoSession
from tunnel.app.host_messages import decode_host_message
from tunnel.app.requests import Subscribe, encode_request
from tunnel.host.presence import Presence
from tunnel.host.session import SessionChannelHandler
from tunnel.log import Log, MemoryStore, NewItem

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

BURST = 64 * 1024
RATE = 4 * 1024 * 1024
REPEATS = 20
PAGE = 192 * 1024  # SNAPSHOT_PAGE_BYTES, the most one page may exceed the budget by


class Flooder:
    """Subscribes from the very start again each time a snapshot page arrives."""

    role = "view"
    name = "flooder"
    max_message_size = 1024 * 1024

    def __init__(self, after: int | None = -1, repeats: int = REPEATS) -> None:
        self.sent = 0
        self.asked = 0
        self._after = after
        self._repeats = repeats
        self._page = anyio.Event()
        self._page.set()
        self.done = anyio.Event()

    async def receive(self) -> bytes:
        await self._page.wait()
        if self.asked >= self._repeats:
            await anyio.sleep_forever()
        self._page = anyio.Event()
        self.asked += 1
        return encode_request(Subscribe(after=self._after))

    async def send(self, plaintext: bytes) -> None:
        message = decode_host_message(plaintext)
        if message["op"] == "snapshot":
            self.sent += len(plaintext)
            self._page.set()
            if self.asked >= self._repeats and not message["more"]:
                self.done.set()

    async def hand_over(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("no broadcast here")

    def leave_broadcast(self) -> None:
        pass


@pytest.fixture
async def log() -> AsyncIterator[Log]:
    the_log = Log(MemoryStore())
    items = [
        NewItem(type="message", data={"n": n, "text": "x" * 1000}, created_by="a")
        for n in range(600)
    ]
    await the_log.append("c1", items)
    try:
        yield the_log
    finally:
        await the_log.aclose()


async def test_a_repeated_full_replay_stays_within_the_channels_rate(
    log: Log, tmp_path: Path
) -> None:
    session = DemoSession(log=log, workspace=tmp_path, conversation_id="c1", delay=0)
    presence = Presence()
    flooder, joiner = Flooder(), Flooder(after=None, repeats=1)
    async with anyio.create_task_group() as tg:
        started = anyio.current_time()
        tg.start_soon(
            SessionChannelHandler(
                flooder,
                session=session,
                log=log,
                presence=presence,
                replay_burst=BURST,
                replay_rate=RATE,
            ).run
        )
        with anyio.fail_after(30):
            await flooder.done.wait()
            tg.start_soon(
                SessionChannelHandler(
                    joiner,
                    session=session,
                    log=log,
                    presence=presence,
                    replay_burst=BURST,
                    replay_rate=RATE,
                ).run
            )
            await joiner.done.wait()  # a fresh join on its own channel is not held up
        elapsed = anyio.current_time() - started
        tg.cancel_scope.cancel()
    assert flooder.asked == REPEATS
    assert flooder.sent > BURST  # the flood did ask for more than the burst
    assert flooder.sent <= BURST + RATE * elapsed + PAGE
