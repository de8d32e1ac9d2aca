"""The snapshot replay of `SessionChannelHandler` under the host's `ReplayBudget`: replays take
turns, a joiner that stops reading holds up nobody else's, and every item arrives exactly once
whatever is appended meanwhile. In memory, with channels faked: counts, no timing."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tunnel.agents import DemoSession
from tunnel.app.host_messages import decode_host_message
from tunnel.app.requests import Subscribe, encode_request
from tunnel.host.presence import Presence
from tunnel.host.session import ReplayBudget, SessionChannelHandler
from tunnel.log import Log, MemoryStore, NewItem

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

ITEMS = 1500


class FakeChannel:
    """A teammate's channel: it subscribes from `after`; `reading` closed makes it stop reading
    (its sends wait, as a full window makes them wait)."""

    role = "view"

    # -1: the whole log, the most a joiner can ask the host to replay.
    def __init__(self, name: str, after: int | None = -1) -> None:
        self.name = name
        self.messages: list[dict[str, Any]] = []
        self.reading = anyio.Event()
        self.reading.set()
        self.done = anyio.Event()
        self._after = after
        self._asked = False

    async def receive(self) -> bytes:
        if not self._asked:
            self._asked = True
            return encode_request(Subscribe(after=self._after))
        await anyio.sleep_forever()
        raise AssertionError

    async def send(self, plaintext: bytes) -> None:
        await self.reading.wait()
        message = decode_host_message(plaintext)
        self.messages.append(message)
        if message["op"] == "snapshot" and not message["more"]:
            self.done.set()

    def seqs(self) -> list[int]:
        seqs = []
        for message in self.messages:
            if message["op"] == "snapshot":
                seqs += [item["seq"] for item in message["items"]]
            elif message["op"] == "item":
                seqs.append(message["item"]["seq"])
        return seqs


@pytest.fixture
async def log() -> AsyncIterator[Log]:
    the_log = Log(MemoryStore())
    await the_log.append(
        "c1",
        [
            NewItem(type="message", data={"n": n, "text": "x" * 500}, created_by="a")
            for n in range(ITEMS)
        ],
    )
    try:
        yield the_log
    finally:
        await the_log.aclose()


class Watched:
    """Counts what the budget lets through at once, at every page read."""

    def __init__(self, log: Log, budget: ReplayBudget) -> None:
        self.most = 0
        self.waited = 0
        real = log.query

        async def query(*args: Any, **kwargs: Any) -> Any:
            stats = budget.statistics()
            self.most = max(self.most, stats.pages)
            self.waited = max(self.waited, stats.waiting)
            return await real(*args, **kwargs)

        log.query = query  # type: ignore[method-assign]


@contextlib.asynccontextmanager
async def serve(
    channels: list[FakeChannel], log: Log, budget: ReplayBudget, workspace: Path
) -> AsyncIterator[None]:
    session = DemoSession(log=log, workspace=workspace, conversation_id="c1", delay=0)
    presence = Presence()
    async with anyio.create_task_group() as tg:
        for channel in channels:
            handler = SessionChannelHandler(
                channel, session=session, log=log, presence=presence, replay=budget
            )
            tg.start_soon(handler.run)
        yield
        tg.cancel_scope.cancel()


async def test_replays_take_turns_within_the_hosts_budget(log: Log, tmp_path: Path) -> None:
    budget = ReplayBudget(pages=2)
    watched = Watched(log, budget)
    joiners = [FakeChannel(f"j{n}") for n in range(6)]
    async with serve(joiners, log, budget, tmp_path):
        with anyio.fail_after(30):
            for joiner in joiners:
                await joiner.done.wait()
    assert watched.most == 2  # never more pages at once than the budget
    assert watched.waited >= 1  # the others waited their turn
    for joiner in joiners:
        assert joiner.seqs() == list(range(ITEMS))


async def test_a_joiner_that_stops_reading_holds_up_no_one_elses_replay(
    log: Log, tmp_path: Path
) -> None:
    budget = ReplayBudget(pages=1)
    stuck, other = FakeChannel("stuck"), FakeChannel("other")
    stuck.reading = anyio.Event()  # never reads
    async with serve([stuck, other], log, budget, tmp_path):
        with anyio.fail_after(30):
            await other.done.wait()
        assert other.seqs() == list(range(ITEMS))
        # The stuck one holds its one encoded page, no slot and no subscription: only the
        # teammate that finished its replay follows the live tail.
        assert budget.statistics().pages == 0
        assert log.statistics().subscribers == 1


async def test_items_appended_during_a_replay_arrive_once_and_in_order(
    log: Log, tmp_path: Path
) -> None:
    budget = ReplayBudget(pages=1)
    slow = FakeChannel("slow")
    slow.reading = anyio.Event()
    level = FakeChannel("level", after=ITEMS - 1)
    async with serve([slow, level], log, budget, tmp_path):
        with anyio.fail_after(10):
            while not any(m["op"] == "snapshot" for m in level.messages):
                await anyio.sleep(0.01)
        for n in range(ITEMS, ITEMS + 300):
            await log.append("c1", NewItem(type="message", data={"n": n}, created_by="a"))
            if n == ITEMS + 100:
                slow.reading.set()  # reading again, partway through the appends
        with anyio.fail_after(30):
            while slow.seqs()[-1:] != [ITEMS + 299] or level.seqs()[-1:] != [ITEMS + 299]:
                await anyio.sleep(0.01)
        assert slow.seqs() == list(range(ITEMS + 300))
        assert level.seqs() == list(range(ITEMS, ITEMS + 300))
