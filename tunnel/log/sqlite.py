"""`SQLiteStore`: the durable conversation log in one SQLite file (the embedded default).

Durability: WAL journal with `synchronous=FULL` by default. WAL alone already survives kill -9
with no gap and no torn row (a transaction is in the WAL or it is not); FULL adds an fsync per
commit so an append that returned also survives a power cut ("nothing acknowledged is lost").
Group commit pays for that fsync: appends from many tasks that arrive while a transaction is
being written are written together in the next one. With `synchronous=NORMAL` (the host's log,
`open_host_store`) a commit is in the WAL file at once, and `sync()` fsyncs the WAL for every
commit made so far, one fsync for however many commits: the `Log` calls it before an item
leaves the process (docs/log.md, "Durability"). Such a store syncs the WAL once when it opens
too, so what an earlier process committed and never synced is on the disk before it is read.

Threads: the event loop never touches the disk. Writes run in a thread of the store's own
(`tunnel.log.disk_thread`), one transaction at a time, driven by whichever appending task is the
current "leader" (the others wait on an event and are answered by it); `sync()`'s fsyncs run in
a second one, beside the writes. Reads run in worker threads on a small pool of read-only
connections, concurrently with the writer (WAL lets readers see the last commit). `aclose()`
closes the writer connection as the writer thread's last job, after the read connections, so
SQLite's final checkpoint of the WAL (and its fsyncs) runs there too.

Schema (version 2, `PRAGMA user_version`): `items` keyed by (conversation_id, seq), so a page
is one index range scan whatever the log's size; `items_by_type` on (conversation_id, type,
seq) does the same for a type filter; `conversations` holds each conversation's head;
`signatures` the host's signed chain heads (`tunnel.log.chain`), added by version 2. A version 1
file gains that table when a writer opens it; read-only, it has no signatures.

Faults (docs/log.md, "Faults"): a row that cannot be read is returned as a `CorruptItem` at its
seq (`tunnel.log.rows`), never as an error for the whole page. `readonly=True` opens the file
with SQLite's `mode=ro` and changes nothing: no file, journal mode or schema is ever created.
A file that is not a log is refused before anything is changed, by a writer too.
"""

from __future__ import annotations

import heapq
import json
import logging
import os
import sqlite3
import threading
import urllib.parse
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any, Final, Literal, NamedTuple, TypeVar

import anyio
import anyio.lowlevel

from tunnel.log.chain import SignedHead
from tunnel.log.check import CheckReport, check_rows
from tunnel.log.disk_thread import DiskThread
from tunnel.log.errors import LogClosedError, SchemaError, SeqConflictError, StoreError
from tunnel.log.item import (
    Item,
    NewItem,
    PreparedItem,
    check_conversation_id,
    check_data,
    micros_to_time,
    prepare,
    time_to_micros,
)
from tunnel.log.rows import COLUMNS, decode_row, fetch_rows
from tunnel.log.store import (
    ConversationInfo,
    OnCommit,
    Order,
    Query,
    TypeFilter,
    notify_commit,
)

__all__ = [
    "HOST_SYNCHRONOUS",
    "SCHEMA_VERSION",
    "SQLiteStore",
    "StoreStatistics",
    "open_host_store",
    "select_sql",
]

logger = logging.getLogger("tunnel.log.sqlite")

T = TypeVar("T")

SCHEMA_VERSION: Final = 2
APPLICATION_ID: Final = 0x61746C67  # "atlg": marks the file as an agent-tunnel log.

_SCHEMA: Final = (
    """
    CREATE TABLE items (
        conversation_id TEXT NOT NULL,
        seq INTEGER NOT NULL CHECK (seq >= 0),
        type TEXT NOT NULL,
        status TEXT,
        response_id TEXT,
        created_at INTEGER NOT NULL,  -- microseconds since the Unix epoch, UTC
        created_by TEXT NOT NULL,
        data TEXT NOT NULL,           -- a JSON object
        PRIMARY KEY (conversation_id, seq)
    )
    """,
    "CREATE INDEX items_by_type ON items (conversation_id, type, seq)",
    """
    CREATE TABLE conversations (
        conversation_id TEXT PRIMARY KEY,
        last_seq INTEGER NOT NULL,
        updated_at INTEGER NOT NULL   -- created_at of the newest item
    ) WITHOUT ROWID
    """,
    "CREATE INDEX conversations_by_time ON conversations (updated_at)",
)

# Version 2: the host's signed chain heads (docs/log.md, "The audit chain").
_SCHEMA_2: Final = (
    """
    CREATE TABLE signatures (
        conversation_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        hash BLOB NOT NULL,           -- the chain head at seq, 32 bytes
        host_id TEXT NOT NULL,
        public_key BLOB NOT NULL,     -- raw Ed25519, 32 bytes
        signature BLOB NOT NULL,      -- 64 bytes
        signed_at INTEGER NOT NULL,   -- microseconds since the Unix epoch, UTC
        PRIMARY KEY (conversation_id, seq, host_id)
    ) WITHOUT ROWID
    """,
)
_INSERT_SIGNATURE: Final = (
    "INSERT OR REPLACE INTO signatures (conversation_id, seq, hash, host_id, public_key, "
    "signature, signed_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_SIGNATURES: Final = (
    "SELECT conversation_id, seq, hash, host_id, public_key, signature, signed_at "
    "FROM signatures WHERE conversation_id = ? ORDER BY seq"
)

# Every SQL string is built from the constants here: values always go in `?` parameters.
_INSERT: Final = f"INSERT INTO items ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"  # noqa: S608
_UPSERT_HEAD: Final = (
    "INSERT INTO conversations (conversation_id, last_seq, updated_at) VALUES (?, ?, ?) "
    "ON CONFLICT (conversation_id) DO UPDATE "
    "SET last_seq = excluded.last_seq, updated_at = excluded.updated_at"
)
_HEAD: Final = "SELECT last_seq FROM conversations WHERE conversation_id = ?"
# The head recomputed from the items, for a conversation whose head row is missing or unreadable.
_MAX_SEQ: Final = "SELECT max(seq) FROM items WHERE conversation_id = ? AND typeof(seq) = 'integer'"
_INFO: Final = "SELECT conversation_id, last_seq, updated_at FROM conversations"
_SQLITE_MAGIC: Final = b"SQLite format 3\x00"
_SEQ_END: Final = 2**63 - 1  # above every seq a log can reach: the bound of an open range

_Row = tuple[str, int, str, str | None, str | None, int, str, str]
Synchronous = Literal["NORMAL", "FULL", "EXTRA"]

HOST_SYNCHRONOUS: Final[Synchronous] = "NORMAL"
"""`tunnel host`'s log: commits go to the WAL file without an fsync each, and the log syncs
them in groups before they leave the host (`SQLiteStore.sync`, docs/log.md, "Durability")."""


async def open_host_store(path: str | Path) -> SQLiteStore:
    """The store `tunnel host` keeps its log in (the benches open theirs with it too)."""
    return await SQLiteStore.open(path, synchronous=HOST_SYNCHRONOUS)


class StoreStatistics(NamedTuple):
    """Counters of one `SQLiteStore` since it was opened."""

    transactions: int
    """Write transactions committed."""
    appends: int
    """`append()` calls committed (several share a transaction under load)."""
    items_written: int
    """Items committed, appended or imported."""
    waiting_appends: int
    """Appends queued behind the transaction being written right now."""
    read_connections: int
    """Read connections open (idle or in use)."""
    syncs: int = 0
    """fsyncs of the WAL by `sync()` (0 when every commit syncs itself)."""


class _State(Enum):
    WAITING = "waiting"
    LEADING = "leading"  # asked to drive the writer (its own request is still waiting)
    WRITING = "writing"  # in a transaction being written
    DONE = "done"


@dataclass(slots=True, eq=False)
class _Write:
    """One queued write: an append (`prepared`) or an import (`imported`)."""

    conversation_id: str
    prepared: list[PreparedItem]
    on_commit: OnCommit | None
    imported: Iterable[Item] | None = None
    signatures: Sequence[SignedHead] | None = None
    wake: anyio.Event = field(default_factory=anyio.Event)
    state: _State = _State.WAITING
    result: list[Item] | int | None = None
    error: BaseException | None = None


class SQLiteStore:
    """A `Store` in one SQLite file; see the module docstring for durability and threads.

    Opening reads or creates the schema synchronously (use `await SQLiteStore.open(path)` from
    inside an event loop). `path` must be a file: `:memory:` cannot be shared between the writer
    and the readers.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        readonly: bool = False,
        synchronous: Synchronous = "FULL",
        busy_timeout: float = 10.0,
        max_batch_items: int = 5000,
        max_readers: int = 4,
    ) -> None:
        """Open (creating if needed) the log at `path`; with `readonly`, open it read-only.

        A read-only store never creates the file or changes it (no journal mode, no schema);
        `append` and `extend` raise `StoreError`. `synchronous` is SQLite's setting for the
        writer; `busy_timeout` (seconds) is how long to wait for another process (an import)
        holding the write lock; `max_batch_items` caps the items of one transaction;
        `max_readers` caps the concurrent read connections. Raises `SchemaError` for a file that
        is not a log or has a newer schema (left untouched), `StoreError` if it cannot open
        (with NORMAL, also if it cannot sync what an earlier process committed).
        """
        if synchronous not in ("NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be NORMAL, FULL or EXTRA, not {synchronous!r}")
        if str(path) == ":memory:" or not str(path):
            raise ValueError("SQLiteStore needs a file path; use MemoryStore for memory")
        self.path = Path(path)
        self.readonly = readonly
        """True if the store only reads (see `__init__`)."""
        self._synchronous = synchronous
        self._busy_timeout = busy_timeout
        self._max_batch_items = max(1, max_batch_items)
        self._max_readers = max(1, max_readers)
        self._closed = False
        # Bounded by the number of tasks inside append(): each waits for its own entry.
        self._queue: deque[_Write] = deque()
        self._leading = False
        self._readers: list[sqlite3.Connection] = []
        self._reader_count = 0
        self._reads_running = 0
        self._read_limiter: anyio.CapacityLimiter | None = None
        self._idle: anyio.Event | None = None
        self._reader_lock = threading.Lock()
        self._transactions = 0
        self._appends = 0
        self._items_written = 0
        # `sync()`: transactions known to be on the disk itself, the fsync under way, how many.
        self._synced = 0
        self._syncing: anyio.Event | None = None
        self._syncs = 0
        self._dir_synced = False
        # Per conversation written (a few: those this process appends to), the last seq of a
        # transaction about to commit (set before COMMIT, so no reader sees an item before it is
        # known here), of one committed (set after), and of one synced. Written by the worker
        # thread, read in the event loop: single dict operations, atomic under the GIL.
        self._heads_pending: dict[str, int] = {}
        self._heads_committed: dict[str, int] = {}
        self._heads_synced: dict[str, int] = {}
        # Read connections open with this URI: `mode=ro`, plus `immutable=1` when the log is in
        # a read-only directory (see `_open_readonly`).
        self._reader_uri = _uri(self.path, immutable=False)
        self._writer: sqlite3.Connection | None = None
        self._writer_closed = readonly
        # `close()` came while a transaction was being written: the last leader closes the
        # writer. Never set by `aclose()`, which closes it in the writer thread itself.
        self._close_after_writes = False
        # `aclose()` closing the writer in its thread: set once closed (a second caller waits).
        self._writer_gone: anyio.Event | None = None
        # The writer's transactions and the syncs each run in a thread of their own, so a sync
        # never waits for a commit, nor a commit for an fsync.
        self._write_thread = DiskThread("tunnel.log writer")
        self._sync_thread = DiskThread("tunnel.log sync")
        if readonly:
            self._readers.append(self._open_readonly())
            self._reader_count = 1
        else:
            self._writer = self._open_writer()
            if not self.syncs_on_commit:
                # What an earlier process committed may not be on the disk itself yet (it may
                # have stopped before syncing it), and `synced` says yes to it: sync it now.
                try:
                    self._sync_wal()
                except BaseException:
                    self.close()
                    raise

    @classmethod
    async def open(cls, path: str | Path, **options: Any) -> SQLiteStore:
        """Open the store in a worker thread, so the event loop does not wait on the disk."""
        return await anyio.to_thread.run_sync(partial(cls, path, **options))

    # -- durability ----------------------------------------------------------------------------

    @property
    def syncs_on_commit(self) -> bool:
        """True when a commit is on the disk itself before `append` returns (FULL or EXTRA);
        with NORMAL it is once `sync()` returns."""
        return self._synchronous != "NORMAL"

    async def sync(self) -> None:
        """Wait until every transaction committed before this call survives a power cut.

        With NORMAL, one fsync of the WAL file covers every commit made before it started:
        callers that come while one runs share the next. Otherwise nothing to do. Shielded: a
        cancelled caller leaves, the fsync finishes. Raises `StoreError` if the fsync fails.
        """
        target = self._transactions
        waited = False
        while self._synced < target and not self.syncs_on_commit:
            waited = True
            running = self._syncing
            if running is not None:
                await running.wait()
                continue
            self._check_open()
            done = self._syncing = anyio.Event()
            reached = self._transactions
            heads = dict(self._heads_committed)
            try:
                with anyio.CancelScope(shield=True):
                    await self._sync_thread.run(self._sync_wal, finish=True)
                self._synced = max(self._synced, reached)
                self._syncs += 1
                for cid, seq in heads.items():
                    if seq > self._heads_synced.get(cid, -1):
                        self._heads_synced[cid] = seq
            finally:
                self._syncing = None
                done.set()
        if waited:
            # It has let the loop run already: one more pass would only delay the caller.
            await anyio.lowlevel.checkpoint_if_cancelled()
        else:
            await anyio.lowlevel.checkpoint()

    def synced(self, conversation_id: str, seq: int) -> bool:
        """False while item `seq` is being committed, or committed, by this store and no
        `sync()` has covered it; True otherwise (items other processes wrote too)."""
        if self.syncs_on_commit:
            return True
        pending = self._heads_pending.get(conversation_id, -1)
        return not self._heads_synced.get(conversation_id, -1) < seq <= pending

    def synced_head(self, conversation_id: str) -> int | None:
        """None if every item this store committed to the conversation is synced; else the
        last seq that is (-1 for none)."""
        if self.syncs_on_commit:
            return None
        synced = self._heads_synced.get(conversation_id, -1)
        return synced if self._heads_pending.get(conversation_id, -1) > synced else None

    def _sync_wal(self) -> None:
        """Worker thread: fsync the WAL file (what FULL does at each commit), and once its
        directory, so the file itself survives too."""
        try:
            fd = os.open(f"{self.path}-wal", os.O_RDONLY)
        except FileNotFoundError:
            return  # checkpointed into the database and removed: SQLite synced it then
        except OSError as exc:
            raise StoreError(f"cannot sync the log at {self.path}: {exc.strerror}") from exc
        try:
            os.fsync(fd)
            if not self._dir_synced:
                directory = os.open(self.path.parent, os.O_RDONLY)
                try:
                    os.fsync(directory)
                finally:
                    os.close(directory)
                self._dir_synced = True
        except OSError as exc:
            raise StoreError(f"cannot sync the log at {self.path}: {exc.strerror}") from exc
        finally:
            os.close(fd)

    # -- writing -------------------------------------------------------------------------------

    async def append(
        self,
        conversation_id: str,
        items: Sequence[NewItem],
        *,
        on_commit: OnCommit | None = None,
    ) -> list[Item]:
        self._check_writable()
        check_conversation_id(conversation_id)
        prepared = [prepare(new) for new in items]
        if not prepared:
            await anyio.lowlevel.checkpoint()
            return []
        result = await self._submit(_Write(conversation_id, prepared, on_commit))
        assert isinstance(result, list)
        return result

    async def extend(self, items: Iterable[Item]) -> int:
        self._check_writable()
        result = await self._submit(_Write("", [], None, imported=items))
        assert isinstance(result, int)
        return result

    async def add_signatures(self, signatures: Sequence[SignedHead]) -> None:
        """Store signed chain heads (one transaction); one already stored for the same
        conversation, seq and host is replaced. Nothing is checked: `tunnel log verify` does."""
        self._check_writable()
        for signed in signatures:
            if not isinstance(signed, SignedHead):
                raise ValueError(f"add_signatures takes SignedHead values, not {signed!r:.60}")
        if not signatures:
            await anyio.lowlevel.checkpoint()
            return
        await self._submit(_Write("", [], None, signatures=list(signatures)))

    async def signatures(self, conversation_id: str) -> list[SignedHead]:
        """The conversation's signed chain heads, oldest seq first; unreadable rows are left out
        (`tunnel log verify` then reports the head as unsigned)."""
        check_conversation_id(conversation_id)
        return await self._read(partial(_select_signatures, conversation_id))

    async def _submit(self, write: _Write) -> list[Item] | int:
        self._queue.append(write)
        if self._leading:
            try:
                await write.wake.wait()
            except BaseException:
                if write.state is _State.WAITING:
                    self._queue.remove(write)  # never written
                elif write.state is _State.LEADING:
                    self._queue.remove(write)
                    self._hand_off()
                raise
            if write.state is _State.DONE:
                return _outcome(write)
        self._leading = True
        # The leader writes until its own request is done; shielded, because a transaction
        # it started must be answered to every task waiting on it.
        with anyio.CancelScope(shield=True):
            try:
                while write.state is not _State.DONE:
                    await self._write_next_batch()
            finally:
                self._hand_off()
        return _outcome(write)

    def _hand_off(self) -> None:
        if self._queue:
            successor = self._queue[0]
            successor.state = _State.LEADING
            successor.wake.set()
        else:
            self._leading = False
            if self._close_after_writes:
                self._close_writer()
            self._signal_if_idle()

    async def _write_next_batch(self) -> None:
        batch = self._take_batch()
        for write in batch:
            write.state = _State.WRITING
        try:
            if batch[0].imported is not None:
                outcome: list[list[Item]] | int = await self._write_thread.run(
                    partial(self._write_import, batch[0].imported), finish=True
                )
            elif batch[0].signatures is not None:
                outcome = await self._write_thread.run(
                    partial(self._write_signatures, batch[0].signatures), finish=True
                )
            else:
                outcome = await self._write_thread.run(
                    partial(self._write_appends, batch), finish=True
                )
        except BaseException as exc:
            error = exc if isinstance(exc, Exception) else StoreError("the write was interrupted")
            for write in batch:
                write.state, write.error = _State.DONE, error
                write.wake.set()
            if not isinstance(exc, Exception):
                raise
            return
        if isinstance(outcome, int):
            batch[0].result = outcome
        else:
            for write, stored in zip(batch, outcome, strict=True):
                write.result = stored
            for write, stored in zip(batch, outcome, strict=True):
                notify_commit(write.on_commit, stored)
        for write in batch:
            write.state = _State.DONE
            write.wake.set()

    def _take_batch(self) -> list[_Write]:
        first = self._queue.popleft()
        batch = [first]
        if first.imported is not None or first.signatures is not None:
            return batch
        size = len(first.prepared)
        while self._queue:
            nxt = self._queue[0]
            alone = nxt.imported is not None or nxt.signatures is not None
            if alone or size + len(nxt.prepared) > self._max_batch_items:
                break
            batch.append(self._queue.popleft())
            size += len(nxt.prepared)
        return batch

    def _write_appends(self, batch: list[_Write]) -> list[list[Item]]:
        """Worker thread: one transaction for the whole batch."""
        now = datetime.now(UTC)
        results: list[list[Item]] = []
        rows: list[_Row] = []
        heads: dict[str, tuple[int, int]] = {}
        replaced: dict[str, int] = {}
        try:
            with self._transaction() as conn:
                self._write_rows(conn, batch, now, results, rows, heads)
                replaced = self._pending(heads)
        except BaseException:
            self._heads_pending.update(replaced)  # never committed
            raise
        self._committed(heads)
        self._appends += len(batch)
        self._items_written += len(rows)
        return results

    def _write_rows(
        self,
        conn: sqlite3.Connection,
        batch: list[_Write],
        now: datetime,
        results: list[list[Item]],
        rows: list[_Row],
        heads: dict[str, tuple[int, int]],
    ) -> None:
        """Worker thread, inside the transaction: the batch's rows and heads."""
        for write in batch:
            cid = write.conversation_id
            if cid in heads:
                last = heads[cid][0]
            else:
                last = self._head(conn, cid)
                # What the conversation held before this store first wrote to it was committed
                # by an earlier process (synced as this store opened) or by another: synced.
                self._heads_synced.setdefault(cid, last)
            stored: list[Item] = []
            for p in write.prepared:
                last += 1
                item = p.stored(cid, last, now)
                micros = time_to_micros(item.created_at)
                rows.append(
                    (cid, last, p.type, p.status, p.response_id, micros, p.created_by,
                     p.data_json)
                )  # fmt: skip
                stored.append(item)
            heads[cid] = (last, time_to_micros(stored[-1].created_at))
            results.append(stored)
        conn.executemany(_INSERT, rows)
        conn.executemany(_UPSERT_HEAD, [(cid, s, t) for cid, (s, t) in heads.items()])

    def _pending(self, heads: dict[str, tuple[int, int]]) -> dict[str, int]:
        """Worker thread, inside the transaction: its heads are about to commit (`synced`).
        Returns the pending heads it replaced, to put back if the commit fails."""
        before: dict[str, int] = {}
        for cid, (seq, _) in heads.items():
            before[cid] = self._heads_pending.get(cid, -1)
            self._heads_pending[cid] = seq
        return before

    def _committed(self, heads: dict[str, tuple[int, int]]) -> None:
        """Worker thread, after COMMIT: the transaction is one more for `sync()` to cover."""
        for cid, (seq, _) in heads.items():
            self._heads_committed[cid] = seq
        self._transactions += 1

    def _write_import(self, items: Iterable[Item]) -> int:
        """Worker thread: the whole import in one transaction, checked as it goes."""
        heads: dict[str, tuple[int, int]] = {}
        count = 0
        with self._transaction() as conn:
            iterator = iter(items)
            while chunk := list(islice(iterator, 1000)):
                rows: list[_Row] = []
                for item in chunk:
                    if not isinstance(item, Item):
                        raise ValueError(f"extend takes Item values, not {type(item).__name__}")
                    cid = item.conversation_id
                    last = heads[cid][0] if cid in heads else self._head(conn, cid)
                    if item.seq != last + 1:
                        raise SeqConflictError(item.id, last + 1)
                    micros = time_to_micros(item.created_at)
                    rows.append(
                        (cid, item.seq, item.type, item.status, item.response_id, micros,
                         item.created_by, _encode(check_data(item.data)))
                    )  # fmt: skip
                    heads[cid] = (item.seq, micros)
                conn.executemany(_INSERT, rows)
                count += len(rows)
            conn.executemany(_UPSERT_HEAD, [(cid, s, t) for cid, (s, t) in heads.items()])
        self._transactions += 1
        self._items_written += count
        return count

    def _write_signatures(self, signatures: Sequence[SignedHead]) -> int:
        """Worker thread: the signatures in one transaction."""
        rows = [
            (s.conversation_id, s.seq, s.hash, s.host_id, s.public_key, s.signature,
             time_to_micros(s.signed_at))
            for s in signatures
        ]  # fmt: skip
        with self._transaction() as conn:
            conn.executemany(_INSERT_SIGNATURE, rows)
        self._transactions += 1
        return len(rows)

    def _transaction(self) -> _Transaction:
        if self._writer_closed or self._writer is None:
            raise LogClosedError(f"the log at {self.path} is closed")
        return _Transaction(self._writer)

    @staticmethod
    def _head(conn: sqlite3.Connection, conversation_id: str) -> int:
        row = conn.execute(_HEAD, (conversation_id,)).fetchone()
        if row is not None and type(row[0]) is int:
            return int(row[0])
        # No head row (a new conversation) or an unreadable one: the items say where it is.
        return _max_seq(conn, conversation_id)

    # -- reading -------------------------------------------------------------------------------

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
        q = Query.make(
            conversation_id, after=after, before=before, limit=limit, order=order, types=types
        )
        if q.empty:
            self._check_open()
            await anyio.lowlevel.checkpoint()
            return []
        return await self._read(partial(_select, q))

    async def get_conversation(self, conversation_id: str) -> ConversationInfo | None:
        check_conversation_id(conversation_id)

        def read(conn: sqlite3.Connection) -> ConversationInfo | None:
            rows = fetch_rows(conn, f"{_INFO} WHERE conversation_id = ?", (conversation_id,))
            return _info(conn, rows[0]) if rows else None

        return await self._read(read)

    async def list_conversations(self) -> list[ConversationInfo]:
        def read(conn: sqlite3.Connection) -> list[ConversationInfo]:
            rows = fetch_rows(conn, f"{_INFO} ORDER BY updated_at DESC, conversation_id DESC", ())
            return [info for row in rows if (info := _info(conn, row)) is not None]

        return await self._read(read)

    async def check(
        self, conversation_id: str | None = None, *, quick_check: bool = True
    ) -> CheckReport:
        """Read every row of one conversation (or of all) and report what cannot be read, what
        is missing and what disagrees (`tunnel.log.check`); `quick_check` adds SQLite's own
        check of the whole file. Reads only; O(size of the log)."""
        if conversation_id is not None:
            check_conversation_id(conversation_id)
        return await self._read(
            partial(check_rows, conversation_id=conversation_id, quick_check=quick_check)
        )

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        self._check_open()
        if self._read_limiter is None:
            self._read_limiter = anyio.CapacityLimiter(self._max_readers)
        self._reads_running += 1
        try:
            # Not abandoned on cancel: the connection must come back to the pool.
            return await anyio.to_thread.run_sync(self._run_read, fn, limiter=self._read_limiter)
        finally:
            self._reads_running -= 1
            self._signal_if_idle()

    def _run_read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Worker thread: borrow (or open) a read connection, run `fn`, give it back."""
        with self._reader_lock:
            conn = self._readers.pop() if self._readers else None
            if conn is None:
                self._reader_count += 1
        if conn is None:
            try:
                conn = self._connect_reader()
            except BaseException as exc:
                with self._reader_lock:
                    self._reader_count -= 1
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(f"cannot open {self.path} to read: {exc}") from exc
                raise
        try:
            try:
                return fn(conn)
            except sqlite3.Error as exc:
                raise StoreError(f"reading the log at {self.path} failed: {exc}") from exc
        finally:
            with self._reader_lock:
                if self._closed:
                    self._reader_count -= 1
                    conn.close()
                else:
                    self._readers.append(conn)

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """Refuse new calls and release the files; idempotent. Synchronous: from async code,
        `aclose()`.

        Appends and reads already running still finish; each connection they use is closed
        as soon as it is free. The writer connection is closed here, in the calling thread (the
        event loop's, when called from it), unless a transaction is being written: then by the
        task that wrote the last one queued, once it is answered. Either way SQLite's final
        checkpoint of the WAL runs in that thread. Nothing here needs an event loop.
        """
        self._release()
        if self._leading:
            self._close_after_writes = True
        else:
            self._close_writer()

    async def aclose(self) -> None:
        """Refuse new calls, let accepted appends and running reads finish, then close.

        The read connections close first, then the writer connection, as the last job of the
        writer thread: being the last connection, it checkpoints the WAL into the database and
        removes it (fsyncs included) there, never in the event loop. Idempotent, and shielded:
        a cancelled caller still closes the store. asyncio's own `Task.cancel()`, which no
        shield stops, interrupts the wait for running work: the store is then closed as
        `close()` does, and the cancellation goes on.
        """
        self._closed = True
        try:
            with anyio.CancelScope(shield=True):
                while self._leading or self._reads_running:
                    # One event for every caller waiting (aclose may be called twice at once).
                    if self._idle is None:
                        self._idle = anyio.Event()
                    await self._idle.wait()
        except BaseException:
            self.close()
            raise
        self._release()
        if self._writer_gone is not None:
            await self._writer_gone.wait()  # closed, or being closed, by another aclose()
            return
        if self._writer_closed or self._writer is None:
            self._write_thread.stop()
            return
        self._writer_closed = True  # from here on no one else closes it
        gone = self._writer_gone = anyio.Event()
        try:
            # `finish`: waits for the close through any cancellation (it cannot be undone).
            await self._write_thread.run(self._writer.close, finish=True)
        finally:
            self._write_thread.stop()
            gone.set()

    def _release(self) -> None:
        """Refuse new calls, end the sync thread and close the idle read connections."""
        self._closed = True
        self._sync_thread.stop()  # after the sync under way, if any: none starts once closed
        with self._reader_lock:
            readers, self._readers = self._readers, []
            self._reader_count -= len(readers)
        for conn in readers:
            conn.close()

    def _close_writer(self) -> None:
        """Close the writer connection in this thread (see `close()`)."""
        self._write_thread.stop()  # its last transaction is done: it answered the leader
        if not self._writer_closed:
            self._writer_closed = True
            if self._writer is not None:
                self._writer.close()

    def _signal_if_idle(self) -> None:
        if self._idle is not None and not self._leading and not self._reads_running:
            self._idle.set()
            self._idle = None

    def statistics(self) -> StoreStatistics:
        """Counters since the store was opened (see `StoreStatistics`)."""
        return StoreStatistics(
            transactions=self._transactions,
            appends=self._appends,
            items_written=self._items_written,
            waiting_appends=len(self._queue),
            read_connections=self._reader_count,
            syncs=self._syncs,
        )

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"the log at {self.path} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self.readonly:
            raise StoreError(f"the log at {self.path} is open read-only")

    # -- connections and schema ----------------------------------------------------------------

    def _open_writer(self) -> sqlite3.Connection:
        """The writer connection: look first, and change nothing in a file that is not a log;
        then WAL, and the schema if the database is new (an empty or new file)."""
        # SQLite opens a file it may not write read-only without a word, and the first append
        # would fail: say it now. (A WAL writer also creates files beside the log.)
        if self.path.is_file() and not os.access(self.path, os.W_OK):
            raise StoreError(f"cannot write to the log at {self.path}: the file is read-only")
        if self.path.parent.is_dir() and not os.access(self.path.parent, os.W_OK):
            raise StoreError(
                f"cannot write to the log at {self.path}: its directory {self.path.parent} is "
                f"read-only"
            )
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self._busy_timeout,
                isolation_level=None,  # we issue BEGIN/COMMIT ourselves
                check_same_thread=False,  # used by one worker thread at a time, never two
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the log at {self.path}: {self._why(exc)}") from exc
        try:
            self._check_schema(conn, allow_new=True)
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"the log at {self.path} cannot use WAL (journal {mode})")
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            self._init_schema(conn)
        except sqlite3.Error as exc:
            conn.close()
            raise self._open_error(exc, writing=True) from exc
        except BaseException:
            conn.close()
            raise
        return conn

    def _open_readonly(self) -> sqlite3.Connection:
        """The first read connection of a read-only store, its schema checked.

        SQLite reads a WAL database through its `-shm` file, which it creates beside the log if
        needed. In a read-only directory it cannot, so the log is opened `immutable=1` instead:
        safe, because nothing can be writing it there (a writer needs that directory for its
        `-wal` file). A `-wal` file holding commits is the one case immutable would misread
        (it ignores the WAL), so that is refused with a message saying so.
        """
        wal = self._inspect_header()
        try:
            return self._connect_reader(check=True)
        except sqlite3.Error as exc:
            if not (wal and not os.access(self.path.parent, os.W_OK)):
                raise self._open_error(exc, writing=False) from exc
            wal_file = Path(f"{self.path}-wal")
            if _size(wal_file) > 0:
                raise StoreError(
                    f"cannot open {self.path} read-only: {wal_file} holds commits not yet in the "
                    f"database, and SQLite cannot read them in a read-only directory; copy the "
                    f"log with its -wal file to a writable directory"
                ) from exc
        self._reader_uri = _uri(self.path, immutable=True)
        try:
            return self._connect_reader(check=True)
        except sqlite3.Error as exc:
            raise self._open_error(exc, writing=False) from exc

    def _inspect_header(self) -> bool:
        """Read the file's 100-byte SQLite header without SQLite; True if it is in WAL mode.

        Refuses what the header alone shows is not a log, so SQLite never opens it (and leaves
        no `-shm` file beside another program's database).
        """
        try:
            with self.path.open("rb") as file:
                header = file.read(100)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise StoreError(f"cannot open {self.path} read-only: {reason}") from exc
        # A new log's schema may still be only in its -wal file: then SQLite must look.
        pending = _size(Path(f"{self.path}-wal")) > 0
        if not header and not pending:
            raise SchemaError(
                f"{self.path} is not a conversation log: no agent-tunnel schema (an empty file)"
            )
        if not header:
            return True
        if len(header) < 100 or not header.startswith(_SQLITE_MAGIC):
            raise SchemaError(f"{self.path} is not a conversation log: not a SQLite database")
        wal = header[18] == 2  # the file format's write version: 2 is WAL
        if wal and pending:
            return wal
        # Nothing in a -wal file: the header is the schema's last word.
        if int.from_bytes(header[68:72], "big") != APPLICATION_ID:
            raise SchemaError(f"{self.path} is not a conversation log: no agent-tunnel schema")
        version = int.from_bytes(header[60:64], "big")
        if version > SCHEMA_VERSION:
            raise SchemaError(self._newer(version))
        return wal

    def _connect_reader(self, *, check: bool = False) -> sqlite3.Connection:
        """A read-only connection (`mode=ro`: SQLite refuses every write on it)."""
        conn = sqlite3.connect(
            self._reader_uri,
            uri=True,
            timeout=self._busy_timeout,
            isolation_level=None,
            check_same_thread=False,  # used by one worker thread at a time, never two
        )
        try:
            if check:
                self._check_schema(conn, allow_new=False)
        except BaseException:
            conn.close()
            raise
        return conn

    def _check_schema(self, conn: sqlite3.Connection, *, allow_new: bool) -> None:
        """Refuse (`SchemaError`) a database that is not a log or is newer; reads only.

        `allow_new` accepts an empty database (a new or empty file), which the writer fills.
        """
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        if app_id == APPLICATION_ID and version >= 1:
            if version > SCHEMA_VERSION:
                raise SchemaError(self._newer(version))
            return
        if allow_new and version == 0 and app_id == 0:
            tables = conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0]
            if not tables:
                return
        raise SchemaError(f"{self.path} is not a conversation log: no agent-tunnel schema")

    def _newer(self, version: int) -> str:
        return (
            f"{self.path} has log schema {version}, newer than this version understands "
            f"({SCHEMA_VERSION}): upgrade agent-tunnel"
        )

    def _init_schema(self, conn: sqlite3.Connection) -> None:
        # In one write transaction that checks again: another process may have created the
        # schema since `_check_schema` looked.
        with _Transaction(conn):
            self._check_schema(conn, allow_new=True)
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version == 0:
                for statement in (*_SCHEMA, *_SCHEMA_2):
                    conn.execute(statement)
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                return
            # Older schemas migrate here, one step at a time, in this transaction.
            if version == 1:
                for statement in _SCHEMA_2:
                    conn.execute(statement)
                conn.execute("PRAGMA user_version = 2")

    def _open_error(self, exc: sqlite3.Error, *, writing: bool) -> StoreError:
        """The error that says what is wrong with the file, for a SQLite error while opening."""
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        if code == sqlite3.SQLITE_NOTADB:
            return SchemaError(f"{self.path} is not a conversation log: not a SQLite database")
        if writing and code == sqlite3.SQLITE_READONLY:
            return StoreError(f"cannot write to the log at {self.path}: {exc}")
        how = "for writing" if writing else "read-only"
        return StoreError(f"cannot open {self.path} {how}: {self._why(exc)}")

    def _why(self, exc: sqlite3.Error) -> str:
        # SQLite says "unable to open database file" for every reason; the OS knows which.
        if self.path.is_dir():
            return "it is a directory"
        if self.path.exists() and not os.access(self.path, os.R_OK):
            return "permission denied"
        return str(exc)


class _Transaction:
    """`with _Transaction(conn):` BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception.

    IMMEDIATE takes the write lock first, so the heads read inside cannot be stale even when
    another process (an import) writes to the same file.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> sqlite3.Connection:
        try:
            # Left open only if rolling back a failed write failed too: try again first.
            self._rollback()
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot start a write transaction: {exc}") from exc
        return self._conn

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, _: object
    ) -> None:
        if exc is None:
            try:
                self._conn.execute("COMMIT")
                return
            except sqlite3.Error as error:
                self._rollback()
                raise StoreError(f"the write transaction failed: {error}") from error
        self._rollback()
        if isinstance(exc, sqlite3.Error):
            # sqlite3's errors never escape the store: they become StoreError.
            raise StoreError(f"the write transaction failed: {exc}") from exc

    def _rollback(self) -> None:
        if not self._conn.in_transaction:
            return  # SQLite rolled back by itself, as after most I/O errors
        try:
            self._conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            # Never a raw sqlite3 error out of the store; the next transaction tries again.
            logger.warning("could not roll back a failed write: %s", exc)


def select_sql(*, typed: bool, before: bool, order: Order) -> str:
    """The SELECT for one page: `?` parameters are conversation_id, [type], after, [before],
    limit. Public so tests can check its query plan uses an index range and no sort."""
    where = ["conversation_id = ?"]
    if typed:
        where.append("type = ?")
    where.append("seq > ?")
    if before:
        where.append("seq < ?")
    direction = "ASC" if order == "asc" else "DESC"
    clauses = " AND ".join(where)
    return f"SELECT {COLUMNS} FROM items WHERE {clauses} ORDER BY seq {direction} LIMIT ?"  # noqa: S608


def _select(q: Query, conn: sqlite3.Connection) -> list[Item]:
    """Worker thread: one page. Several types are one index range each, merged.

    A row that cannot be read comes back as a `CorruptItem`; a row without a place (a seq that
    is not an integer) is left out: both are what `tunnel log check` reports. The range always
    has an upper bound, which keeps seqs stored as text or bytes (they sort after every number)
    out of the page instead of making it short."""
    types: Sequence[str | None] = [None] if q.types is None else q.types
    sql = select_sql(typed=q.types is not None, before=True, order=q.order)
    runs: list[list[Item]] = []
    for t in types:
        params: list[object] = [q.conversation_id]
        if t is not None:
            params.append(t)
        params.append(q.after)
        params.append(_SEQ_END if q.before is None else q.before)
        params.append(q.limit)
        rows = fetch_rows(conn, sql, params)
        runs.append([item for row in rows if (item := decode_row(row)) is not None])
    if len(runs) == 1:
        return runs[0]
    merged = heapq.merge(*runs, key=_seq, reverse=q.order == "desc")
    return list(islice(merged, q.limit))


def _select_signatures(conversation_id: str, conn: sqlite3.Connection) -> list[SignedHead]:
    """Worker thread: the conversation's signatures; none in a version 1 file (no table)."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'signatures'"
    ).fetchone()
    if exists is None:
        return []
    found: list[SignedHead] = []
    for cid, seq, digest, host_id, public_key, signature, signed_at in fetch_rows(
        conn, _SIGNATURES, (conversation_id,)
    ):
        try:
            found.append(
                SignedHead(
                    conversation_id=cid,
                    seq=seq,
                    hash=bytes(digest),
                    host_id=host_id,
                    public_key=bytes(public_key),
                    signature=bytes(signature),
                    signed_at=micros_to_time(signed_at),
                )
            )
        except (TypeError, ValueError, OverflowError):
            continue  # an unreadable row: its head counts as unsigned
    return found


def _seq(item: Item) -> int:
    return item.seq


def _info(conn: sqlite3.Connection, row: Sequence[Any]) -> ConversationInfo | None:
    """A conversation's head row as `ConversationInfo`; an unreadable head is recomputed from
    the items (an unreadable time becomes None), a row without a text id is skipped."""
    cid, last_seq, updated_at = row
    if type(cid) is not str:
        return None
    if type(last_seq) is not int:
        last_seq = _max_seq(conn, cid)
        if last_seq < 0:
            return None
    updated: datetime | None = None
    if type(updated_at) is int:
        try:
            updated = micros_to_time(updated_at)
        except OverflowError:
            updated = None
    return ConversationInfo(
        conversation_id=cid,
        last_seq=last_seq,
        item_count=last_seq + 1,
        updated_at=updated,
    )


def _max_seq(conn: sqlite3.Connection, conversation_id: str) -> int:
    """The highest integer seq stored for the conversation, -1 if none."""
    value = conn.execute(_MAX_SEQ, (conversation_id,)).fetchone()[0]
    return value if type(value) is int else -1


def _uri(path: Path, *, immutable: bool) -> str:
    """The `file:` URI that opens `path` read-only (percent-encoded: a path may hold ? or #)."""
    query = "mode=ro&immutable=1" if immutable else "mode=ro"
    return f"file:{urllib.parse.quote(str(path.absolute()))}?{query}"


def _size(path: Path) -> int:
    """The size of a file, 0 if there is none (or it cannot be read)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _encode(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _outcome(write: _Write) -> list[Item] | int:
    if write.error is not None:
        raise write.error
    assert write.result is not None
    return write.result
