"""The host's log syncs in groups: an item committed without an fsync of its own leaves through
the log (a subscription, a query) only once a sync covered it, and one sync covers every commit
made before it; a process killed mid-burst kept every item it had handed out."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import anyio
import pytest

from tunnel.log import (
    ConversationInfo,
    Event,
    Item,
    Log,
    MemoryStore,
    NewItem,
    SQLiteStore,
    StoreError,
)
from tunnel.log.sqlite import HOST_SYNCHRONOUS, open_host_store
from tunnel.log.store import OnCommit, Order, SyncingStore, TypeFilter

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def news(count: int) -> list[NewItem]:
    return [NewItem(type="message", data={"n": n}, created_by="agent") for n in range(count)]


class GatedSyncStore:
    """A `MemoryStore` that says its commits reach the disk only at `sync()`, and whose syncs
    wait for `gate` while it is set: what leaves before the sync is then visible."""

    syncs_on_commit = False

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.gate: anyio.Event | None = None
        self.syncs = 0
        self.committed: dict[str, int] = {}
        self.synced_heads: dict[str, int] = {}
        self.failures = 0

    async def sync(self) -> None:
        reached = dict(self.committed)
        if self.gate is not None:
            await self.gate.wait()
        if self.failures:
            self.failures -= 1
            raise StoreError("cannot sync the log at log.db: Input/output error")
        self.synced_heads.update(reached)
        self.syncs += 1

    def synced(self, conversation_id: str, seq: int) -> bool:
        synced = self.synced_heads.get(conversation_id, -1)
        return not synced < seq <= self.committed.get(conversation_id, -1)

    def synced_head(self, conversation_id: str) -> int | None:
        synced = self.synced_heads.get(conversation_id, -1)
        return synced if self.committed.get(conversation_id, -1) > synced else None

    async def append(
        self, conversation_id: str, items: Sequence[NewItem], *, on_commit: OnCommit | None = None
    ) -> list[Item]:
        stored = await self.inner.append(conversation_id, items)
        self.committed[conversation_id] = stored[-1].seq
        if on_commit is not None:
            on_commit(stored)
        return stored

    async def extend(self, items: Iterable[Item]) -> int:
        return await self.inner.extend(items)

    async def query(
        self,
        conversation_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int = 100,
        order: Order = "asc",
        types: TypeFilter = None,
    ) -> list[Item]:
        return await self.inner.query(
            conversation_id, after=after, before=before, limit=limit, order=order, types=types
        )

    async def get_conversation(self, conversation_id: str) -> ConversationInfo | None:
        return await self.inner.get_conversation(conversation_id)

    async def list_conversations(self) -> list[ConversationInfo]:
        return await self.inner.list_conversations()

    def close(self) -> None:
        self.inner.close()

    async def aclose(self) -> None:
        await self.inner.aclose()


def test_the_host_store_is_a_syncing_store(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "log.db", synchronous=HOST_SYNCHRONOUS)
    try:
        assert isinstance(store, SyncingStore)
        assert not store.syncs_on_commit
        assert SQLiteStore(tmp_path / "full.db").syncs_on_commit
    finally:
        store.close()


async def test_an_item_leaves_only_after_a_sync_covered_it() -> None:
    store = GatedSyncStore()
    async with Log(store) as log, log.subscribe("c") as sub:
        store.gate = anyio.Event()
        (item,) = await log.append("c", news(1), durable=False)  # committed: returns at once
        await log.publish(Event(conversation_id="c", kind="status", data={"state": "idle"}))
        got: list[Item | Event] = []
        async with anyio.create_task_group() as tg:

            async def receive() -> None:
                got.extend(await sub.receive_batch(10))

            tg.start_soon(receive)
            await anyio.wait_all_tasks_blocked()
            assert got == []  # not synced yet: neither the item nor the event behind it
            store.gate.set()
        assert [e.seq for e in got if isinstance(e, Item)] == [item.seq]
        assert isinstance(got[-1], Event)  # and the event still after the item


async def test_a_failed_sync_holds_the_items_back_until_one_succeeds() -> None:
    store = GatedSyncStore()
    store.failures = 2
    async with Log(store) as log, log.subscribe("c") as sub:
        await log.append("c", news(1), durable=False)
        with anyio.fail_after(10):
            (item,) = await sub.receive_batch(10)
        assert isinstance(item, Item)
        assert store.failures == 0
        assert store.syncs == 1  # handed out only after the sync that succeeded


async def test_a_durable_append_returns_after_its_sync() -> None:
    store = GatedSyncStore()
    async with Log(store) as log:
        store.gate = anyio.Event()
        returned = anyio.Event()

        async def append() -> None:
            await log.append("c", news(1))
            returned.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(append)
            await anyio.wait_all_tasks_blocked()
            assert not returned.is_set()
            store.gate.set()
        assert returned.is_set()


async def test_a_query_syncs_first() -> None:
    store = GatedSyncStore()
    async with Log(store) as log:
        await log.append("c", news(3), durable=False)
        assert store.syncs == 0
        assert [i.seq for i in await log.query("c")] == [0, 1, 2]
        assert store.syncs == 1
        assert [i.seq for i in await log.query("c")] == [0, 1, 2]
        assert store.syncs == 1  # nothing new: no sync


async def test_one_sync_covers_every_commit_before_it(tmp_path: Path) -> None:
    store = await open_host_store(tmp_path / "log.db")
    async with Log(store) as log, log.subscribe("c") as sub:
        for new in news(50):
            await log.append("c", new, durable=False)  # a transaction each, none synced
        assert store.statistics().transactions >= 50
        assert store.statistics().syncs == 0
        got = await sub.receive_batch(100)
        assert [e.seq for e in got if isinstance(e, Item)] == list(range(50))
        assert store.statistics().syncs == 1


async def test_a_burst_followed_as_it_is_appended_arrives_whole_and_in_order(
    tmp_path: Path,
) -> None:
    store = await open_host_store(tmp_path / "log.db")
    async with Log(store) as log, log.subscribe("c") as sub:
        got: list[int] = []

        async def follow() -> None:
            while len(got) < 200:
                for entry in await sub.receive_batch(200):
                    assert isinstance(entry, Item)
                    assert store.synced("c", entry.seq)
                    got.append(entry.seq)

        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            for new in news(200):
                await log.append("c", new, durable=False)
        assert got == list(range(200))
        # Never more fsyncs than commits; how many fewer depends on how slow the disk's are.
        assert 1 <= store.statistics().syncs <= store.statistics().transactions


# Appends a burst through the host's store, one item at a time without waiting for its sync, as
# the agent's output is; a follower prints each seq the log hands it (what leaves the host), and
# a prompt-like durable append prints its seq once it returns.
CHILD = """
import sys
import anyio
from tunnel.log import Item, Log, NewItem
from tunnel.log.sqlite import open_host_store

async def main() -> None:
    log = Log(await open_host_store(sys.argv[1]))

    async def follow() -> None:
        async with log.subscribe("c") as sub:
            while True:
                for entry in await sub.receive_batch(100):
                    if isinstance(entry, Item):
                        print("out", entry.seq, flush=True)

    async with anyio.create_task_group() as tg:
        tg.start_soon(follow)
        k = 0
        while True:
            new = NewItem(type="message", data={"k": k, "pad": "x" * (k * 37 % 2000)},
                          created_by="agent")
            if k % 50 == 0:
                (item,) = await log.append("c", new)
                print("ack", item.seq, flush=True)
            else:
                await log.append("c", new, durable=False)
            k += 1

anyio.run(main)
"""


@pytest.mark.parametrize("lines_wanted", [40, 400])
async def test_killed_mid_burst_every_item_handed_out_is_stored(
    tmp_path: Path, lines_wanted: int
) -> None:
    path = tmp_path / "log.db"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    handed_out: list[int] = []
    acknowledged: list[int] = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            kind, seq = line.split()
            (handed_out if kind == "out" else acknowledged).append(int(seq))
            if len(handed_out) + len(acknowledged) >= lines_wanted:
                break
        time.sleep(0.003)  # somewhere inside a later commit or sync
    finally:
        os.kill(child.pid, signal.SIGKILL)
        _, stderr = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL
    assert handed_out, stderr
    assert handed_out == list(range(len(handed_out)))  # in order, no gap, once each

    store = await SQLiteStore.open(path)
    try:
        info = await store.get_conversation("c")
        assert info is not None
        wanted = max(handed_out + acknowledged)
        assert info.last_seq >= wanted
        stored = await store.query("c", limit=info.last_seq + 1)
        assert [item.seq for item in stored] == list(range(info.last_seq + 1))
        # Appending goes on right after the last stored seq.
        (more,) = await store.append("c", news(1))
        assert more.seq == info.last_seq + 1
    finally:
        await store.aclose()


async def test_while_every_sync_fails_a_subscription_reading_the_store_hands_out_nothing() -> None:
    store = GatedSyncStore()
    store.failures = 1_000_000  # the disk answers every fsync with an I/O error
    async with Log(store) as log:
        await log.append("c", news(3), durable=False)  # committed, never synced
        async with log.subscribe("c", after=-1) as sub:  # all three come from the store
            got: list[Item | Event] = []
            with anyio.move_on_after(1):
                got.extend(await sub.receive_batch(10))
            assert got == []
            assert store.syncs == 0
            store.failures = 0
            with anyio.fail_after(10):
                got.extend(await sub.receive_batch(10))
        assert [e.seq for e in got if isinstance(e, Item)] == [0, 1, 2]
        assert store.syncs == 1


async def test_opening_the_host_store_syncs_what_an_earlier_process_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "log.db"
    # Stands for a host that committed and stopped before any sync: its items are in the WAL.
    earlier = await open_host_store(path)
    try:
        await earlier.append("c", news(3))
        assert earlier.statistics().syncs == 0
        wal = os.stat(f"{path}-wal").st_ino
        fsynced: list[int] = []
        fsync = os.fsync

        def observed(fd: int) -> None:
            fsynced.append(os.fstat(fd).st_ino)
            fsync(fd)

        monkeypatch.setattr(os, "fsync", observed)
        later = await open_host_store(path)
        try:
            # `synced` says yes to items another process wrote: so they are on the disk now.
            assert later.synced("c", 2)
            assert fsynced[0] == wal
        finally:
            await later.aclose()
    finally:
        await earlier.aclose()


async def test_the_host_store_does_not_open_when_it_cannot_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "log.db"
    earlier = await open_host_store(path)
    try:
        await earlier.append("c", news(1))

        def failing(fd: int) -> None:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(os, "fsync", failing)
        with pytest.raises(StoreError, match="cannot sync"):
            await open_host_store(path)
    finally:
        monkeypatch.undo()
        await earlier.aclose()


async def test_what_an_earlier_process_stored_counts_as_synced_beside_a_new_unsynced_commit(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.db"
    earlier = await open_host_store(path)
    await earlier.append("c", news(40))
    await earlier.aclose()
    store = await open_host_store(path)
    try:
        # This process's first item, committed and not yet synced: only it is held back, and a
        # query that finds a commit its sync did not cover reads up to seq 39, not up to -1.
        await store.append("c", news(1))
        assert store.synced("c", 39)
        assert not store.synced("c", 40)
        assert store.synced_head("c") == 39
    finally:
        await store.aclose()
