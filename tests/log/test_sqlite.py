"""What only the SQLite store does: schema, durability settings, query plans, group commit."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from functools import partial
from pathlib import Path
from typing import ClassVar

import anyio
import anyio.lowlevel
import pytest

from tunnel.log import Item, SchemaError, SQLiteStore, StoreError
from tunnel.log.sqlite import SCHEMA_VERSION, open_host_store, select_sql

from .helpers import new, news

pytestmark = pytest.mark.anyio


async def test_reopening_keeps_items_and_continues_the_seqs(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    store = await SQLiteStore.open(path)
    first = await store.append("c", news(3))
    await store.aclose()
    store = await SQLiteStore.open(path)
    try:
        assert await store.query("c") == first
        assert [i.seq for i in await store.append("c", [new()])] == [3]
    finally:
        await store.aclose()


def test_schema_is_versioned_and_durable_by_default(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "log.db")
    try:
        with sqlite3.connect(tmp_path / "log.db") as raw:
            assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
            assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        # FULL (2): an append that returned survives a power cut, not just a process kill.
        assert store._writer.execute("PRAGMA synchronous").fetchone()[0] == 2
    finally:
        store.close()


def test_a_newer_schema_is_refused_without_touching_it(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    SQLiteStore(path).close()
    with sqlite3.connect(path) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(SchemaError, match="newer"):
        SQLiteStore(path)
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1


def test_a_foreign_database_or_file_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as raw:
        raw.execute("CREATE TABLE people (name TEXT)")
    before = other.read_bytes()
    with pytest.raises(SchemaError, match="not a conversation log: no agent-tunnel schema"):
        SQLiteStore(other)
    # Refused before anything changed: still in its own journal mode, byte for byte the same.
    assert other.read_bytes() == before
    with sqlite3.connect(other) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(SchemaError, match="not a conversation log: not a SQLite database"):
        SQLiteStore(junk)
    assert junk.read_bytes() == b"this is not sqlite at all" * 100


def test_a_writer_makes_an_empty_file_a_new_log(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    SQLiteStore(empty).close()
    with sqlite3.connect(empty) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_directory_is_not_a_log(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="it is a directory"):
        SQLiteStore(tmp_path)


def test_memory_paths_are_refused() -> None:
    with pytest.raises(ValueError, match="MemoryStore"):
        SQLiteStore(":memory:")


@pytest.mark.parametrize("order", ["asc", "desc"])
@pytest.mark.parametrize("typed", [False, True])
@pytest.mark.parametrize("before", [False, True])
def test_every_page_query_is_one_index_range_without_a_sort(
    tmp_path: Path, order: str, typed: bool, before: bool
) -> None:
    SQLiteStore(tmp_path / "log.db").close()
    sql = select_sql(typed=typed, before=before, order=order)  # type: ignore[arg-type]
    params = ["c", *(["message"] if typed else []), 5, *([9] if before else []), 10]
    with sqlite3.connect(tmp_path / "log.db") as raw:
        plan = " | ".join(row[-1] for row in raw.execute(f"EXPLAIN QUERY PLAN {sql}", params))
    assert "TEMP B-TREE" not in plan, plan
    assert "SCAN" not in plan, plan
    index = "items_by_type" if typed else "sqlite_autoindex_items_1"
    assert f"USING INDEX {index}" in plan, plan


async def test_concurrent_appends_share_transactions(tmp_path: Path) -> None:
    store = await SQLiteStore.open(tmp_path / "log.db")
    try:
        async with anyio.create_task_group() as tg:
            for i in range(200):
                tg.start_soon(store.append, f"c{i % 3}", news(1, start=i))
        stats = store.statistics()
        assert stats.appends == 200
        assert stats.items_written == 200
        assert stats.transactions < 100  # group commit: many appends per transaction
        assert stats.waiting_appends == 0
        infos = await store.list_conversations()
        assert sorted(i.item_count for i in infos) == [66, 67, 67]
    finally:
        await store.aclose()


async def test_a_failed_transaction_stores_nothing_and_the_store_recovers(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    store = await SQLiteStore.open(path)
    try:
        await store.append("c", [new()])
        with sqlite3.connect(path) as raw:
            raw.execute(
                "CREATE TRIGGER fail BEFORE INSERT ON items WHEN NEW.type = 'poison' "
                "BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
            )
        with pytest.raises(StoreError, match="disk on fire"):
            await store.append("c", [new(), new(type="poison")])
        assert [i.seq for i in await store.query("c")] == [0]
        assert [i.seq for i in await store.append("c", [new()])] == [1]
    finally:
        await store.aclose()


async def test_aclose_lets_accepted_appends_finish(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    store = await SQLiteStore.open(path)
    returned: list[Item] = []

    async def append(i: int) -> None:
        returned.extend(await store.append("c", news(1, start=i)))

    async with anyio.create_task_group() as tg:
        for i in range(50):
            tg.start_soon(append, i)
        await anyio.lowlevel.checkpoint()  # every appender has queued
        await store.aclose()
    assert len(returned) == 50
    store = await SQLiteStore.open(path)
    try:
        assert sorted(i.seq for i in await store.query("c", limit=100)) == list(range(50))
    finally:
        await store.aclose()


async def test_writes_and_syncs_run_in_threads_of_the_store_that_end_when_it_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await open_host_store(tmp_path / "log.db")
    loop_thread = threading.current_thread()
    used: dict[str, set[threading.Thread]] = {"write": set(), "sync": set()}
    fsync = os.fsync

    def observed(fd: int) -> None:
        used["sync"].add(threading.current_thread())
        fsync(fd)

    monkeypatch.setattr(os, "fsync", observed)
    assert store._writer is not None
    store._writer.set_trace_callback(lambda _: used["write"].add(threading.current_thread()))
    try:
        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(store.append, "c", news(1, start=i))
        await store.extend([])
        await store.sync()
        await store.append("c", news(1, start=20))
        await store.sync()
    finally:
        await store.aclose()
    # The event loop never touches the disk; each kind of job keeps one thread of its own.
    assert len(used["write"]) == 1
    assert len(used["sync"]) == 1
    assert loop_thread not in used["write"] | used["sync"]
    assert used["write"] != used["sync"]
    with anyio.fail_after(10):
        while any(t.is_alive() for t in used["write"] | used["sync"]):
            await anyio.sleep(0.01)


class RecordedConnection(sqlite3.Connection):
    """A connection that records the thread it is closed in."""

    closed_in: ClassVar[dict[int, list[int]]] = {}  # id(connection): the threads' idents

    def close(self) -> None:
        RecordedConnection.closed_in.setdefault(id(self), []).append(threading.get_ident())
        super().close()


async def test_aclose_closes_the_writer_in_its_thread_last_which_checkpoints_the_wal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", partial(connect, factory=RecordedConnection))
    monkeypatch.setattr(RecordedConnection, "closed_in", {})
    path = tmp_path / "log.db"
    store = await open_host_store(path)
    writer = store._writer
    assert isinstance(writer, RecordedConnection)
    writes: set[int] = set()
    writer.set_trace_callback(lambda _: writes.add(threading.get_ident()))
    await store.append("c", news(200))
    await store.query("c")  # a read connection is open, idle in the pool
    assert store.statistics().read_connections == 1
    wal = Path(f"{path}-wal")
    assert wal.stat().st_size > 0
    async with anyio.create_task_group() as tg:
        for _ in range(2):
            tg.start_soon(store.aclose)  # both return once it is closed
    await store.aclose()
    # Closed once, in the thread that ran the transactions, not in the event loop's.
    (writer_thread,) = writes
    assert RecordedConnection.closed_in[id(writer)] == [writer_thread]
    assert writer_thread != threading.get_ident()
    # The last connection to close (the reader closed first): SQLite checkpointed the WAL
    # into the database and removed it.
    assert not wal.exists() or wal.stat().st_size == 0
    reopened = await SQLiteStore.open(path, readonly=True)
    try:
        assert len(await reopened.query("c", limit=500)) == 200
    finally:
        await reopened.aclose()


def test_close_without_an_event_loop_closes_the_writer_in_the_calling_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", partial(connect, factory=RecordedConnection))
    monkeypatch.setattr(RecordedConnection, "closed_in", {})
    path = tmp_path / "log.db"
    store = SQLiteStore(path)
    writer = store._writer
    store.close()
    store.close()
    assert RecordedConnection.closed_in[id(writer)] == [threading.get_ident()]
    assert not Path(f"{path}-wal").exists()


async def test_reads_run_beside_the_writer_on_a_bounded_pool(tmp_path: Path) -> None:
    store = await SQLiteStore.open(tmp_path / "log.db", max_readers=2)
    try:
        await store.append("c", news(10))
        async with anyio.create_task_group() as tg:
            for _ in range(20):
                tg.start_soon(store.query, "c")
            for i in range(5):
                tg.start_soon(store.append, "c", news(1, start=i))
        assert 1 <= store.statistics().read_connections <= 2
    finally:
        await store.aclose()
    assert store.statistics().read_connections == 0


class Gate:
    """Holds the writer thread at the start of chosen transactions until released (for good
    if never: a connection closed under a running transaction can crash the process)."""

    def __init__(self, store: SQLiteStore, *transactions: int) -> None:
        self.held = set(transactions)
        self.begun = 0
        self.entered = threading.Event()
        self.release = threading.Event()
        assert store._writer is not None
        store._writer.set_trace_callback(self._statement)

    def _statement(self, sql: str) -> None:
        if sql.startswith("BEGIN"):
            self.begun += 1
            if self.begun in self.held:
                self.entered.set()
                self.release.wait()
                self.release.clear()

    async def wait_entered(self) -> None:
        with anyio.fail_after(10):
            while not self.entered.is_set():
                await anyio.sleep(0.001)
        self.entered.clear()


@pytest.mark.timeout(30)
async def test_a_batch_whose_leader_is_cancelled_natively_is_answered_with_what_it_stored(
    tmp_path: Path,
) -> None:
    # asyncio's Task.cancel() (Ctrl-C on anyio.run's main task, asyncio.timeout) passes through
    # anyio's shield: the appends the leader was writing must still hear their outcome.
    store = await SQLiteStore.open(tmp_path / "log.db")
    gate = Gate(store, 1, 2)
    answers: dict[str, list[int] | str] = {}

    async def append(name: str) -> None:
        try:
            answers[name] = [item.seq for item in await store.append("c", [new(who=name)])]
        except StoreError as exc:
            answers[name] = str(exc)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(append, "first")
            await gate.wait_entered()  # the first transaction is held: the next ones queue
            leader = asyncio.ensure_future(append("leader"))
            await anyio.sleep(0.01)
            for name in ("second", "third"):
                tg.start_soon(append, name)
            await anyio.sleep(0.01)
            gate.release.set()
            await gate.wait_entered()  # the leader's batch, held in its transaction
            leader.cancel()
            await anyio.sleep(0.01)
            gate.release.set()
            await asyncio.wait([leader])
        stored = await store.query("c")
    finally:
        gate.release.set()
        await store._write_thread.run(lambda: None)  # its transactions are done
        await store.aclose()
    by_name = {item.data["who"]: item.seq for item in stored}
    assert [item.seq for item in stored] == [0, 1, 2, 3]
    assert "leader" in by_name  # in a transaction when cancelled: stored all the same
    assert answers["first"] == [0]
    assert answers["second"] == [by_name["second"]]
    assert answers["third"] == [by_name["third"]]


# Closing the connection under the held transaction would block the event loop inside SQLite,
# where only the timeout's thread can still report it.
@pytest.mark.timeout(30, method="thread")
async def test_closing_waits_for_the_transaction_of_a_natively_cancelled_import(
    tmp_path: Path,
) -> None:
    source = await SQLiteStore.open(tmp_path / "source.db")
    try:
        items = await source.append("c", news(50))
    finally:
        await source.aclose()
    store = await SQLiteStore.open(tmp_path / "log.db")
    gate = Gate(store, 1)
    task = asyncio.ensure_future(store.extend(items))
    await gate.wait_entered()
    task.cancel()
    await anyio.sleep(0.01)
    closing = asyncio.ensure_future(store.aclose())
    await anyio.sleep(0.05)
    # Not closed under the transaction the writer thread is running: it waits for it.
    assert not closing.done()
    gate.release.set()
    with anyio.fail_after(10):
        await asyncio.wait([task, closing])
    assert task.cancelled()  # the cancellation reaches it once the import is answered
    assert closing.result() is None
    reopened = await SQLiteStore.open(tmp_path / "log.db", readonly=True)
    try:
        assert [item.seq for item in await reopened.query("c")] == list(range(50))
    finally:
        await reopened.aclose()


@pytest.mark.timeout(30)
async def test_close_during_a_transaction_leaves_the_writer_to_the_task_that_wrote_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect", partial(connect, factory=RecordedConnection))
    monkeypatch.setattr(RecordedConnection, "closed_in", {})
    path = tmp_path / "log.db"
    store = await SQLiteStore.open(path)
    writer = store._writer
    gate = Gate(store, 1)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(store.append, "c", news(3))
            await gate.wait_entered()
            store.close()  # not under the running transaction: it is left open for it
            assert id(writer) not in RecordedConnection.closed_in
            gate.release.set()
    finally:
        gate.release.set()
    assert RecordedConnection.closed_in[id(writer)] == [threading.get_ident()]
    reopened = await SQLiteStore.open(path, readonly=True)
    try:
        assert [item.seq for item in await reopened.query("c")] == [0, 1, 2]
    finally:
        await reopened.aclose()
