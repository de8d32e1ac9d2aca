"""Bounded history in `SessionChannelHandler`: a fresh join replays only the end of the log, and
`history` requests walk back from there a page at a time, with no gap and no duplicate; a resume
still gets everything after its cursor. In memory, with the channel faked: counts, no timing."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from tunnel.agents import DemoSession
from tunnel.app.entries import SNAPSHOT_PAGE_BYTES
from tunnel.app.host_messages import decode_host_message, pack
from tunnel.app.requests import (
    DEFAULT_HISTORY_ITEMS,
    History,
    Request,
    Subscribe,
    encode_request,
)
from tunnel.host.presence import Presence
from tunnel.host.session import ReplayBudget, SessionChannelHandler
from tunnel.log import Log, MemoryStore, NewItem

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

ITEMS = 1000


class ScriptedChannel:
    """A teammate's channel whose requests the test sends, one at a time, and which records
    every message the host sends."""

    def __init__(self, role: str = "view") -> None:
        self.role = role
        self.name = f"{role}er"
        self.messages: list[dict[str, Any]] = []
        self._requests, self._next = anyio.create_memory_object_stream[bytes](4)
        self._changed = anyio.Event()

    async def request(self, request: Request) -> None:
        await self._requests.send(encode_request(request))

    async def receive(self) -> bytes:
        return await self._next.receive()

    async def send(self, plaintext: bytes) -> None:
        self.messages.append(decode_host_message(plaintext))
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        with anyio.fail_after(20):
            while not predicate():
                await self._changed.wait()

    def of(self, op: str) -> list[dict[str, Any]]:
        return [message for message in self.messages if message["op"] == op]

    def snapshot_done(self) -> bool:
        return any(not message["more"] for message in self.of("snapshot"))

    def streamed_seqs(self) -> list[int]:
        """Seqs of the snapshot and the live tail, in the order they came."""
        seqs: list[int] = []
        for message in self.messages:
            if message["op"] == "snapshot":
                seqs += [item["seq"] for item in message["items"]]
            elif message["op"] == "item":
                seqs.append(message["item"]["seq"])
        return seqs

    async def history(self, before: int, limit: int | None = None) -> dict[str, Any]:
        """Ask for the page before `before` and return the answer."""
        answered = len(self.of("history"))
        request = History(before=before) if limit is None else History(before=before, limit=limit)
        await self.request(request)
        await self.wait_for(lambda: len(self.of("history")) > answered)
        return self.of("history")[answered]


def message_item(n: int, size: int = 40) -> NewItem:
    return NewItem(type="message", data={"n": n, "text": "x" * size}, created_by="a")


async def filled_log(count: int = ITEMS, size: int = 40) -> Log:
    log = Log(MemoryStore())
    await log.append("c1", [message_item(n, size) for n in range(count)])
    return log


@pytest.fixture
async def log() -> AsyncIterator[Log]:
    the_log = await filled_log()
    try:
        yield the_log
    finally:
        await the_log.aclose()


@contextlib.asynccontextmanager
async def serve(
    channel: ScriptedChannel, log: Log, workspace: Path, budget: ReplayBudget | None = None
) -> AsyncIterator[None]:
    session = DemoSession(log=log, workspace=workspace, conversation_id="c1", delay=0)
    handler = SessionChannelHandler(
        channel, session=session, log=log, presence=Presence(), replay=budget
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(handler.run)
        yield
        tg.cancel_scope.cancel()


async def test_a_fresh_join_gets_only_the_last_default_items_and_is_told_more_exist(
    log: Log, tmp_path: Path
) -> None:
    channel = ScriptedChannel()
    async with serve(channel, log, tmp_path):
        await channel.request(Subscribe(after=None))
        await channel.wait_for(channel.snapshot_done)
        first = channel.of("snapshot")[0]
        assert first["first_seq"] == ITEMS - DEFAULT_HISTORY_ITEMS
        assert first["earlier"] is True
        assert channel.streamed_seqs() == list(range(ITEMS - DEFAULT_HISTORY_ITEMS, ITEMS))
        # One page: the default costs the host one message.
        assert len(channel.of("snapshot")) == 1
        # The live tail follows on, each item once.
        await log.append("c1", [message_item(n) for n in range(ITEMS, ITEMS + 3)])
        await channel.wait_for(lambda: channel.streamed_seqs()[-1] == ITEMS + 2)
        assert channel.streamed_seqs() == list(range(ITEMS - DEFAULT_HISTORY_ITEMS, ITEMS + 3))


async def test_history_pages_walk_back_to_the_first_item_with_no_gap_and_no_duplicate(
    log: Log, tmp_path: Path
) -> None:
    channel = ScriptedChannel()
    async with serve(channel, log, tmp_path):
        await channel.request(Subscribe(after=None))
        await channel.wait_for(channel.snapshot_done)
        held = channel.streamed_seqs()
        oldest, more = channel.of("snapshot")[0]["first_seq"], True
        pages = 0
        while more:
            page = await channel.history(before=oldest, limit=150)
            seqs = [item["seq"] for item in page["items"]]
            assert page["before"] == oldest
            # In seq order, and strictly before what is held: never an item held already.
            assert seqs == sorted(seqs)
            assert seqs[-1] == oldest - 1
            held = seqs + held
            oldest, more = seqs[0], page["more"]
            pages += 1
        assert held == list(range(ITEMS))
        assert pages == -(-(ITEMS - DEFAULT_HISTORY_ITEMS) // 150)
        # Nothing before seq 0: an empty page that says so.
        page = await channel.history(before=0)
        assert (page["items"], page["more"]) == ([], False)


async def test_a_resume_still_gets_every_item_after_its_cursor(log: Log, tmp_path: Path) -> None:
    channel = ScriptedChannel()
    async with serve(channel, log, tmp_path):
        await channel.request(Subscribe(after=99))
        await channel.wait_for(channel.snapshot_done)
        assert channel.streamed_seqs() == list(range(100, ITEMS))
        assert len(channel.of("snapshot")) > 1  # not bounded to one page
        first = channel.of("snapshot")[0]
        assert (first["first_seq"], first["earlier"]) == (100, True)


async def test_after_minus_one_still_replays_the_whole_log(log: Log, tmp_path: Path) -> None:
    channel = ScriptedChannel()
    async with serve(channel, log, tmp_path):
        await channel.request(Subscribe(after=-1))
        await channel.wait_for(channel.snapshot_done)
        assert channel.streamed_seqs() == list(range(ITEMS))
        first = channel.of("snapshot")[0]
        assert (first["first_seq"], first["earlier"]) == (0, False)


@pytest.mark.parametrize(("tail", "first_seq"), [(0, ITEMS), (1, ITEMS - 1), (450, 550), (5000, 0)])
async def test_a_tail_asks_for_exactly_that_many_of_the_last_items(
    log: Log, tmp_path: Path, tail: int, first_seq: int
) -> None:
    channel = ScriptedChannel()
    async with serve(channel, log, tmp_path):
        await channel.request(Subscribe(after=None, tail=tail))
        await channel.wait_for(channel.snapshot_done)
        assert channel.streamed_seqs() == list(range(first_seq, ITEMS))
        first = channel.of("snapshot")[0]
        assert (first["first_seq"], first["earlier"]) == (first_seq, first_seq > 0)


async def test_the_default_history_of_large_items_is_one_page_of_bytes(tmp_path: Path) -> None:
    log = await filled_log(size=4000)  # about 46 of them fill a page
    channel = ScriptedChannel()
    try:
        async with serve(channel, log, tmp_path):
            await channel.request(Subscribe(after=None))
            await channel.wait_for(channel.snapshot_done)
            (page,) = channel.of("snapshot")
            seqs = channel.streamed_seqs()
            assert 0 < len(seqs) < DEFAULT_HISTORY_ITEMS
            assert seqs == list(range(ITEMS - len(seqs), ITEMS))
            assert page["first_seq"] == seqs[0]
            # The history page before it is bounded the same way, and adjoins it.
            older = await channel.history(before=seqs[0])
            older_seqs = [item["seq"] for item in older["items"]]
            assert older_seqs == list(range(seqs[0] - len(older_seqs), seqs[0]))
            assert len(older_seqs) < DEFAULT_HISTORY_ITEMS
            size = sum(len(pack(item)) for item in older["items"])
            assert size <= SNAPSHOT_PAGE_BYTES
    finally:
        await log.aclose()


async def test_a_history_page_before_the_head_is_the_newest_page(log: Log, tmp_path: Path) -> None:
    channel = ScriptedChannel()
    async with serve(channel, log, tmp_path):
        page = await channel.history(before=2**63 - 1, limit=10)
        assert [item["seq"] for item in page["items"]] == list(range(ITEMS - 10, ITEMS))
        assert page["more"] is True
        page = await channel.history(before=3)
        assert [item["seq"] for item in page["items"]] == [0, 1, 2]
        assert page["more"] is False


async def test_history_waits_for_the_hosts_replay_budget_and_a_viewer_may_ask(
    log: Log, tmp_path: Path
) -> None:
    budget = ReplayBudget(pages=1)
    channel = ScriptedChannel(role="view")
    async with serve(channel, log, tmp_path, budget):
        async with budget.page():  # every page of the budget is taken
            await channel.request(History(before=500, limit=5))
            with anyio.fail_after(10):
                while budget.statistics().waiting == 0:
                    await anyio.sleep(0.01)
            assert channel.of("history") == []
        await channel.wait_for(lambda: len(channel.of("history")) == 1)
        (page,) = channel.of("history")
        assert [item["seq"] for item in page["items"]] == [495, 496, 497, 498, 499]
        assert channel.of("error") == []
