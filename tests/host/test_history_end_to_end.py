"""Bounded history end to end: a relay subprocess, a sharing host with a log of 1,000 items,
and the Python client. A fresh join gets the end of the conversation, `TeammateSession.history`
walks back to seq 0 while the live tail keeps coming, and a resume still gets everything."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import pytest

from tests.support import RelayProcess
from tunnel.app.follower import FollowerEvent, Item, SnapshotPage, SnapshotStarted
from tunnel.app.host_messages import HistoryPage
from tunnel.app.requests import DEFAULT_HISTORY_ITEMS, Prompt, encode_request
from tunnel.log import NewItem, SQLiteStore
from tunnel.teammate.client import TeammateSession, connect_teammate

from .conftest import sharing

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

ITEMS = 1000


async def fill(db: Path) -> None:
    store = await SQLiteStore.open(db)
    try:
        await store.append(
            "main",
            [
                NewItem(
                    type="message", data={"role": "agent", "text": f"old {n}"}, created_by="agent"
                )
                for n in range(ITEMS)
            ],
        )
    finally:
        await store.aclose()


class Reader:
    """Reads one session's messages in a task, as a client's main loop does."""

    def __init__(self, session: TeammateSession) -> None:
        self.session = session
        self.messages: list[FollowerEvent] = []
        self._changed = anyio.Event()

    async def run(self) -> None:
        while True:
            self.messages.append(await self.session.receive())
            self._changed.set()
            self._changed = anyio.Event()

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        with anyio.fail_after(30):
            while not predicate():
                await self._changed.wait()

    def snapshots(self) -> list[SnapshotPage]:
        return [m for m in self.messages if isinstance(m, SnapshotPage)]

    def starts(self) -> list[SnapshotStarted]:
        return [m for m in self.messages if isinstance(m, SnapshotStarted)]

    def snapshot_done(self) -> bool:
        return any(not snapshot.more for snapshot in self.snapshots())

    def seqs(self) -> list[int]:
        """Seqs of the snapshot and the live tail, in the order they came."""
        seqs: list[int] = []
        for message in self.messages:
            if isinstance(message, SnapshotPage):
                seqs += [item["seq"] for item in message.items]
            elif isinstance(message, Item):
                seqs.append(message.item["seq"])
        return seqs


@contextlib.asynccontextmanager
async def reading(link: str, name: str) -> AsyncIterator[Reader]:
    async with connect_teammate(link, name=name) as session, anyio.create_task_group() as tg:
        reader = Reader(session)
        tg.start_soon(reader.run)
        yield reader
        tg.cancel_scope.cancel()


async def test_a_joiner_gets_the_end_and_walks_back_by_cursor_through_a_real_relay(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    await fill(tmp_path / "log.db")
    async with (
        sharing(relay.url, tmp_path, agent="demo", workspace=workspace) as shared,
        reading(str(shared.host.view_link), "vera") as vera,
    ):
        await vera.session.subscribe()
        await vera.wait_for(vera.snapshot_done)
        first = vera.starts()[0]
        held = vera.seqs()
        head = held[-1]
        assert head >= ITEMS - 1
        assert first.first_seq == held[0] == head + 1 - DEFAULT_HISTORY_ITEMS
        assert first.earlier is True
        assert held == list(range(held[0], head + 1))

        # A driver makes the agent answer while the viewer walks back: live items and history
        # answers share the channel, and each goes where it belongs.
        async with connect_teammate(str(shared.host.drive_link), name="dave") as dave:
            await dave.subscribe(tail=0)
            await dave.send(encode_request(Prompt(text="hello")))
            oldest, more, pages = held[0], True, 0
            while more:
                page = await vera.session.history(before=oldest, limit=120)
                seqs = [item["seq"] for item in page.items]
                assert seqs == list(range(oldest - len(seqs), oldest))
                held = seqs + held
                oldest, more, pages = seqs[0], page.more, pages + 1
            assert held[: head + 1] == list(range(head + 1))
            assert pages == -(-held.index(first.first_seq) // 120)
            # The answers went to `history()`, not to the reader.
            assert not any(isinstance(m, HistoryPage) for m in vera.messages)
            # The live tail went on meanwhile, every item once.
            await vera.wait_for(
                lambda: any(
                    isinstance(m, Item) and m.item["data"].get("role") == "user"
                    for m in vera.messages
                )
            )
            live = vera.seqs()
            assert live == list(range(first.first_seq, live[-1] + 1))


async def test_a_resume_and_a_tail_through_a_real_relay(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    await fill(tmp_path / "log.db")
    async with sharing(relay.url, tmp_path, agent="demo", workspace=workspace) as shared:
        link = str(shared.host.view_link)
        async with reading(link, "rita") as rita:
            await rita.session.subscribe(after=499)
            await rita.wait_for(rita.snapshot_done)
            seqs = rita.seqs()
            assert seqs == list(range(500, seqs[-1] + 1))
            assert seqs[-1] >= ITEMS - 1
            assert rita.starts()[0].first_seq == 500
        async with reading(link, "tom") as tom:
            await tom.session.subscribe(tail=10)
            await tom.wait_for(tom.snapshot_done)
            seqs = tom.seqs()
            assert len(seqs) == 10
            assert seqs == list(range(seqs[0], seqs[0] + 10))
            assert tom.starts()[0].earlier is True
