"""`LogWriter`: a session's appends to the log, in order, batched, carried through storage faults.

Everything the session stores goes through one queue, in the order it was asked for. Whoever
finds the log idle writes what is queued (the caller itself, or `run()` for what nobody waits
for), in one transaction per batch: the agent's output, which nobody waits for
(`enqueue`), is committed in groups while the agent goes on, where one commit per update would
make a fast agent wait for the disk between updates (docs/log.md, "Durability"). An event the
session publishes (`publish`) goes out after everything queued before it is stored, so a
teammate sees the log's items and the events between them in the order they happened.

When a write fails with `StoreError`
(the disk is full, the file became read-only, an I/O error), the session pauses instead of
failing (docs/agents.md, "When the log cannot be written"):

- every teammate is told with a `storage` event, and the host's own log (its console) with a
  warning; both again when the log writes again;
- what the session must still store waits here, in order, and is written by `run()` with
  backoff retries (`tunnel.process.backoff`) as soon as the log takes it, after one
  `session_event` (`what: "log_unwritable"`) that records the outage;
- requests that would record something new (a prompt, a permission answer, a mode change,
  terminal input) are refused with `agent_unavailable` (`check_writable`), never half done: a
  prompt a teammate was told is stored is in the log;
- an item whose commit succeeded but whose sync failed (`SyncError`) is stored: it is never
  appended again, and leaves the host once `run()` has synced the log;
- what waits is bounded (`max_held`): past it the running turn is cancelled (`on_overflow`), and
  agent output that finds no room is dropped and counted in the outage's record.

Without `run()` (a recorder used on its own) a failed append raises `StoreError`, as
`Log.append` does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sqlite3
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio
import anyio.abc

from tunnel.log import Event, Item, Log, LogClosedError, NewItem, StoreError, SyncError
from tunnel.log.item import format_time, prepare
from tunnel.process.backoff import Backoff

from .errors import SessionError

__all__ = [
    "MAX_HELD",
    "OUTAGE_EVENT",
    "RETRY_INITIAL",
    "RETRY_MAXIMUM",
    "STORAGE_EVENT",
    "LogWriter",
    "reason_of",
]

logger = logging.getLogger("tunnel.agents.writer")

STORAGE_EVENT = "storage"
"""The kind of the ephemeral event that says whether the log can be written."""

OUTAGE_EVENT = "log_unwritable"
"""The `what` of the `session_event` stored first once the log can be written again."""

MAX_HELD = 256
"""Items and events queued for the log at once (`enqueue` and `publish` wait for room past it);
while the log cannot be written, also the agent updates waiting their turn: past it the running
turn is cancelled and agent output is dropped (counted)."""

MAX_BATCH = 256
"""Items written in one transaction at most."""

STOP_DRAIN_TIMEOUT = 5.0
"""Seconds a stopping session spends storing what is still queued before it gives up on it."""

RETRY_INITIAL = 0.25
"""Upper bound of the first delay before the log is tried again, in seconds."""

RETRY_MAXIMUM = 5.0
"""Cap of the delay between tries: the log writes again at most this long after it could."""


@dataclass(eq=False, slots=True)
class _Entry:
    """One item in the writer's queue; `done` is set once it is stored (or never will be)."""

    new: NewItem
    done: anyio.Event = field(default_factory=anyio.Event)
    item: Item | None = None
    error: Exception | None = None
    writing: bool = False
    """In a write under way: a waiter cancelled now may still see it stored."""
    waited: bool = True
    """Whether a caller waits for it (False for `enqueue`: nobody is told but through the log)."""
    holdable: bool = True
    """False for what must be stored now or refused (`try_append`): never held by an outage."""
    events: list[Event] = field(default_factory=list)
    """Events published after it was queued: they go out once it is settled, in order."""


@dataclass(slots=True, kw_only=True)
class _Outage:
    since: datetime
    started: float
    reason: str
    attempts: int = 0
    retry_in: float = 0.0
    dropped: int = 0
    turn_cancelled: bool = False
    recorded: bool = False
    """Whether its `log_unwritable` session event is stored already."""
    unsynced: bool = False
    """Whether items are committed that a sync failed to cover (`SyncError`): `run()` syncs
    them before the log counts as written again."""
    written: int = 0


def reason_of(exc: BaseException) -> str:
    """What went wrong, in SQLite's or the system's words, without the log's path: this is
    shown to teammates."""
    cause = exc.__cause__
    if isinstance(cause, sqlite3.Error | OSError):
        text = str(cause.strerror if isinstance(cause, OSError) and cause.strerror else cause)
    else:
        text = str(exc).rsplit(": ", 1)[-1]
    return text[:200] or type(exc).__name__


class LogWriter:
    """Appends one conversation's items in order and rides out a log that cannot be written.

    See the module docstring. `append` waits until its item is stored; `append_or_hold` only
    while the log writes (otherwise it keeps the item and returns None at once); `try_append`
    never keeps anything (the caller says it was not stored); `enqueue` waits for none of it.
    """

    def __init__(
        self,
        log: Log,
        conversation_id: str,
        *,
        max_held: int = MAX_HELD,
        retry_initial: float = RETRY_INITIAL,
        retry_maximum: float = RETRY_MAXIMUM,
    ) -> None:
        if max_held < 1:
            raise ValueError("max_held must be at least 1")
        self._log = log
        self.conversation_id = conversation_id
        self.max_held = max_held
        """The bound on what is queued (see `MAX_HELD`)."""
        self._retry_initial = retry_initial
        self._retry_maximum = retry_maximum
        # Bounded by max_held (enqueue and publish wait for room), plus at most one item per
        # task that waits for its own.
        self._queue: deque[_Entry] = deque()
        self._events_queued = 0
        self._writing = False
        self._settled = anyio.Event()  # set (and replaced) when a write ends or an outage begins
        self._outage: _Outage | None = None
        self._running = False
        self._wakeup = anyio.Event()
        self._resynced = anyio.Event()  # set (and replaced) when run() synced, or stopped
        self._admitted = 0
        self.on_overflow: Callable[[], None] | None = None
        """Called (once per outage) when the bound is hit: the session cancels its turn."""

    # -- state ---------------------------------------------------------------------------------

    @property
    def failing(self) -> bool:
        """Whether the log cannot be written right now (items may be held)."""
        return self._outage is not None

    @property
    def held(self) -> int:
        """Items waiting for the log."""
        return len(self._queue)

    def state(self) -> dict[str, Any] | None:
        """The data of a `storage` event saying the log cannot be written; None when it can."""
        outage = self._outage
        if outage is None:
            return None
        return {
            "state": "failing",
            "reason": outage.reason,
            "since": format_time(outage.since),
            "attempts": outage.attempts,
            "held": len(self._queue),
            "retry_in": round(outage.retry_in, 2),
        }

    def check_writable(self) -> None:
        """Raise `SessionError("agent_unavailable")` while the log cannot be written: a request
        that would record something is refused rather than half done."""
        outage = self._outage
        if outage is not None:
            raise SessionError(
                "agent_unavailable",
                f"the log cannot be written ({outage.reason}); the session is paused and the "
                "host retries: try again when it says the log writes again",
            )

    # -- appending -----------------------------------------------------------------------------

    async def append(self, new: NewItem) -> Item:
        """Store `new` and return it as stored; while the log cannot be written, wait until it
        can (in order with everything queued before it).

        It returns once the item is committed (`durable=False`), and the log syncs it before it
        leaves the host, one sync for a burst of them (docs/log.md, "Durability").

        Cancel-safe as `Log.append`: cancelled while queued, it is never stored; cancelled while
        being written, it may be. Raises `ValueError` for an invalid item, `StoreError` only
        when `run()` is not running.
        """
        if self._outage is not None:
            held = self._hold(new, droppable=False)
            assert held is not None
            return await self._wait(held)
        entry = self._queued(new)
        await self._see_through(entry)
        if not entry.done.is_set():
            return await self._wait(entry)  # an outage began: it is held
        return _result(entry)

    async def enqueue(self, new: NewItem) -> None:
        """Queue `new` to be stored after everything queued before it, and return without
        waiting for the disk: for the agent's output, which nobody is told of but through the
        log. Waits only while `max_held` things are queued (the log is slow, or cannot be
        written: then the running turn is cancelled, as for `append`).

        Raises `ValueError` for an invalid item, at once. Without `run()`, nothing would write
        it later: it is stored now, as `append` does.
        """
        if self._running:
            # Checked now, not once it shares a transaction, which its fault must not fail.
            prepare(new)
            await self._wait_for_room()
        if not self._running:  # not started, or stopped while it waited
            await self.append(new)
            return
        if self._outage is not None:
            self._hold(new, droppable=False, waited=False)
            return
        self._queued(new, checked=True, waited=False)
        self._wake_run()

    async def publish(self, event: Event) -> None:
        """Send an ephemeral event to the conversation's subscribers once everything queued
        before it is stored (at once when nothing is): it never overtakes the items it follows.
        Waits while `max_held` things are queued."""
        if self._queue:
            await self._wait_for_room()
        if self._queue:
            self._queue[-1].events.append(event)
            self._events_queued += 1
            return
        await self._log.publish(event)

    async def append_or_hold(self, new: NewItem) -> Item | None:
        """Store `new` if the log can be written and return it; otherwise keep it to store
        when it can (or drop it, counted, past the bound) and return None without waiting.
        Committed but not synced (`SyncError`), it is not kept: it returns None, and the item
        leaves the host once `run()` has synced the log."""
        if self._outage is not None:
            self._hold(new, droppable=True)
            return None
        entry = self._queued(new)
        await self._see_through(entry)
        if not entry.done.is_set():
            return None  # an outage began: it is held
        item = _result(entry)
        try:
            await self._log.sync()
        except StoreError as exc:
            if not self._running:
                raise SyncError(str(exc), [item]) from exc
            self._unsynced(exc)
            return None
        return item

    async def try_append(self, new: NewItem) -> Item:
        """Store `new` now or raise `StoreError`; never held. For what a person is told was
        stored (a prompt): refused outright while the log cannot be written. A failure starts
        an outage like any other, so everyone is told. Committed but not synced (`SyncError`),
        it is in the log: this waits until `run()` has synced it, then returns it (or raises
        `SyncError` if the session stops first)."""
        outage = self._outage
        if outage is not None:
            raise StoreError(f"the log cannot be written ({outage.reason})")
        entry = self._queued(new, holdable=False)
        await self._see_through(entry)
        if entry.done.is_set():
            item = _result(entry)
        else:
            # An outage began while a stopping run() wrote it: `_refuse_unholdable` left it
            # to that write, which answers it.
            item = await self._wait(entry)
        try:
            await self._log.sync()
        except StoreError as exc:
            if not self._running:
                raise SyncError(str(exc), [item]) from exc
            self._unsynced(exc)
            while not self._log.durable(self.conversation_id, item.seq):
                if not self._running:
                    raise SyncError(str(exc), [item]) from exc
                await self._resynced.wait()
        return item

    @contextlib.contextmanager
    def admitting(self) -> Iterator[bool]:
        """For a producer about to wait its turn to record (an ACP agent's update): yields
        False, and counts it dropped, when the log cannot be written and `max_held` things wait
        already; the running turn is then cancelled."""
        outage = self._outage
        if outage is not None and self._waiting() + self._admitted >= self.max_held:
            outage.dropped += 1
            self._overflow(outage)
            yield False
            return
        self._admitted += 1
        try:
            yield True
        finally:
            self._admitted -= 1

    # -- the queue -----------------------------------------------------------------------------

    def _queued(
        self, new: NewItem, *, checked: bool = False, waited: bool = True, holdable: bool = True
    ) -> _Entry:
        """Queue `new` behind what is queued. Checked now (`ValueError`): it may share a
        transaction with others, which its fault must not fail, even when it is alone in the
        queue (a failed write holds it, and `run()` writes it with whatever follows)."""
        if not checked:
            prepare(new)
        entry = _Entry(new, waited=waited, holdable=holdable)
        self._queue.append(entry)
        return entry

    def _waiting(self) -> int:
        """Items and events queued: what `max_held` bounds."""
        return len(self._queue) + self._events_queued

    def _full(self) -> bool:
        return self._waiting() >= self.max_held

    async def _wait_for_room(self) -> None:
        while self._full():
            outage = self._outage
            if outage is not None:
                self._overflow(outage)
            await self._settled.wait()

    async def _see_through(self, entry: _Entry) -> None:
        """Return once `entry` is settled, writing what is queued when the log is idle; or
        once an outage holds it (`done` not set). Cancelled before it is written, it is never
        stored."""
        try:
            while not entry.done.is_set() and self._outage is None:
                if self._writing or not await self._write_next(entry):
                    await self._settled.wait()
        except BaseException:
            if not entry.writing and not entry.done.is_set():
                self._drop(entry)
            raise
        self._wake_run()  # what others queued meanwhile

    def _take_batch(self, leader: _Entry | None, *, everything: bool = False) -> list[_Entry]:
        """The oldest queued items for one transaction: up to `MAX_BATCH`, never past one with
        events to publish (they must go out before what was queued after them), and, unless
        `everything`, never one another caller waits for but `leader`'s own: that caller writes
        it itself, so it has its item before any other task runs (before a teammate who saw the
        item could act on it)."""
        batch: list[_Entry] = []
        for entry in self._queue:
            if entry.waited and entry is not leader and not everything:
                break
            batch.append(entry)
            if entry.events or len(batch) >= MAX_BATCH:
                break
        return batch

    async def _write_next(self, leader: _Entry | None, *, everything: bool = False) -> bool:
        """Write the next batch of queued items (`_take_batch`), in one transaction; False if
        there was none to take. A `StoreError` with `run()` running begins an outage (what
        `try_append` asked for is refused, the rest is held); any other failure settles the
        batch with it."""
        batch = self._take_batch(leader, everything=everything)
        if not batch:
            return False
        self._writing = True
        for entry in batch:
            entry.writing = True
        try:
            # Shielded: whoever writes answers every item in the batch, cancelled or not.
            with anyio.CancelScope(shield=True):
                stored = await self._log.append(
                    self.conversation_id, [entry.new for entry in batch], durable=False
                )
        except Exception as exc:
            for entry in batch:
                entry.writing = False
            if self._running and isinstance(exc, StoreError):
                self._failed(exc)
                return True
            self._settle_failed(batch, exc)
            return True
        finally:
            self._writing = False
            self._signal_settled()
        self._settle(batch, stored)
        return True

    def _settle(self, batch: list[_Entry], stored: list[Item]) -> None:
        for entry, item in zip(batch, stored, strict=True):
            entry.writing = False
            entry.item = item
            self._finish(entry)

    def _settle_failed(self, batch: list[_Entry], exc: Exception) -> None:
        unwaited = sum(1 for entry in batch if not entry.waited)
        if unwaited:
            logger.warning("%d items of the agent's output were not stored: %s", unwaited, exc)
        for entry in batch:
            entry.error = exc
            self._finish(entry)

    def _refuse_unholdable(self, exc: StoreError) -> None:
        """What `try_append` queued is refused (unless another task is writing it): taken out
        as a cancelled item is, its events left to the item before it."""
        for entry in [e for e in self._queue if not e.holdable and not e.writing]:
            entry.error = exc
            self._drop(entry)
            entry.done.set()

    def _finish(self, entry: _Entry) -> None:
        """`entry` is settled: out of the queue, its waiter woken, its events published."""
        if self._queue and self._queue[0] is entry:
            self._queue.popleft()
        else:
            with contextlib.suppress(ValueError):
                self._queue.remove(entry)
        entry.done.set()
        self._publish_events(entry)

    def _drop(self, entry: _Entry) -> None:
        """Take out an item that will never be written; the events queued after it wait for
        the item before it instead, or go out now."""
        try:
            index = self._queue.index(entry)
        except ValueError:
            return
        del self._queue[index]
        self._signal_settled()  # whoever waits behind it may write now
        self._wake_run()  # or run(), if nobody waits behind it
        if entry.events and index > 0:
            self._queue[index - 1].events.extend(entry.events)
            entry.events = []
        self._publish_events(entry)

    def _publish_events(self, entry: _Entry) -> None:
        events, entry.events = entry.events, []
        self._events_queued -= len(events)
        for event in events:
            with contextlib.suppress(LogClosedError):
                self._log.publish_nowait(event)

    def _signal_settled(self) -> None:
        self._settled.set()
        self._settled = anyio.Event()

    def _wake_run(self) -> None:
        """Have `run()` write what is queued, unless a write under way ends by doing so."""
        if self._queue and not self._writing:
            self._wakeup.set()

    # -- the outage ----------------------------------------------------------------------------

    def _hold(self, new: NewItem, *, droppable: bool, waited: bool = True) -> _Entry | None:
        outage = self._outage
        assert outage is not None
        prepare(new)  # an invalid item is the caller's ValueError now, never a stuck retry
        if self._waiting() + self._admitted >= self.max_held:
            self._overflow(outage)
            if droppable:
                outage.dropped += 1
                return None
        if new.created_at is None:
            # When it happened, not when the disk came back.
            new = dataclasses.replace(new, created_at=datetime.now(UTC))
        entry = _Entry(new, waited=waited)
        self._queue.append(entry)
        return entry

    async def _wait(self, entry: _Entry) -> Item:
        try:
            await entry.done.wait()
        except BaseException:
            if not entry.writing and not entry.done.is_set():
                self._drop(entry)  # never written, and now never will be
            raise
        return _result(entry)

    def _overflow(self, outage: _Outage) -> None:
        if outage.turn_cancelled:
            return
        outage.turn_cancelled = True
        logger.warning(
            "the log still cannot be written and %d items wait: the running turn is cancelled",
            self._waiting() + self._admitted,
        )
        if self.on_overflow is not None:
            self.on_overflow()

    def _unsynced(self, exc: StoreError) -> None:
        """Items are committed but a sync failed: an outage that `run()` ends with a sync."""
        self._failed(exc)
        assert self._outage is not None
        self._outage.unsynced = True

    def _failed(self, exc: StoreError) -> None:
        """An outage begins (or goes on); `run()` tells everyone and retries."""
        self._refuse_unholdable(exc)
        reason = reason_of(exc)
        outage = self._outage
        if outage is not None:
            outage.reason = reason
            return
        self._outage = _Outage(since=datetime.now(UTC), started=time.monotonic(), reason=reason)
        logger.warning(
            "the log cannot be written (%s): the session is paused and prompts are refused "
            "until it can; retrying",
            exc,
        )
        self._wakeup.set()
        self._signal_settled()

    # -- retrying ------------------------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Write what is queued and nobody writes, and retry what is held until the log takes
        it, for as long as the session runs. Stopping, it stores what is still queued first
        (for at most `STOP_DRAIN_TIMEOUT`)."""
        self._running = True
        try:
            task_status.started()
            while True:
                await self._wakeup.wait()
                self._wakeup = anyio.Event()
                if self._outage is not None:
                    await self._recover(self._outage)
                while self._queue and self._outage is None and not self._writing:
                    if not await self._write_next(None):
                        break  # its caller writes the next one
        finally:
            with anyio.move_on_after(STOP_DRAIN_TIMEOUT, shield=True):
                await self._drain()
            self._running = False
            self._give_up()

    async def _drain(self) -> None:
        while self._queue and self._outage is None:
            if self._writing:
                await self._settled.wait()
            else:
                await self._write_next(None, everything=True)

    async def _recover(self, outage: _Outage) -> None:
        backoff = Backoff(
            initial=self._retry_initial,
            maximum=self._retry_maximum,
            refused_maximum=self._retry_maximum,
        )
        while True:
            outage.retry_in = backoff.next_delay()
            await self._publish(self.state())
            await anyio.sleep(outage.retry_in)
            while self._writing:  # a write that began before the outage
                await self._settled.wait()
            while True:
                if await self._write_held(outage):
                    if not self._queue:
                        self._recovered(outage)
                        self._signal_settled()
                        await self._publish(self._recovered_state(outage))
                        return
                    continue  # more queued: write them at once, still in order
                break

    async def _write_held(self, outage: _Outage) -> bool:
        """One try: the outage's record (once) and the held items (a batch, as `_take_batch`
        takes it), in one transaction, then a sync of everything committed. The batch is
        settled once committed, whatever becomes of the sync: never appended again, a sync
        that fails (or is cancelled, run() stopping) is left to the next try."""
        batch = self._take_batch(None, everything=True)
        news = [entry.new for entry in batch]
        if not outage.recorded:
            news.insert(0, self._record(outage, len(self._queue)))
        if news:
            self._writing = True
            for entry in batch:
                entry.writing = True
            try:
                # Shielded, as in `_write_next`: a stopping run() still answers what it wrote.
                with anyio.CancelScope(shield=True):
                    stored = await self._log.append(self.conversation_id, news, durable=False)
            except Exception as exc:
                for entry in batch:
                    entry.writing = False
                if not isinstance(exc, StoreError):
                    raise
                self._still_failing(outage, exc)
                return False
            finally:
                self._writing = False
            self._stored(outage, batch, stored)
            outage.unsynced = True
        if outage.unsynced:
            try:
                await self._log.sync()
            except StoreError as exc:
                self._still_failing(outage, exc)
                return False
            outage.unsynced = False
        self._resynced.set()
        self._resynced = anyio.Event()
        return True

    def _still_failing(self, outage: _Outage, exc: StoreError) -> None:
        outage.attempts += 1
        reason = reason_of(exc)
        if reason != outage.reason:
            logger.warning("the log still cannot be written, now: %s", exc)
        outage.reason = reason

    def _stored(self, outage: _Outage, batch: list[_Entry], stored: list[Item]) -> None:
        """The batch (after the outage's record, if it was in it) is committed."""
        if not outage.recorded:
            outage.recorded = True
            stored = stored[1:]
        self._settle(batch, stored)
        outage.written += len(batch)
        self._signal_settled()

    def _record(self, outage: _Outage, held: int) -> NewItem:
        return NewItem(
            type="session_event",
            data={
                "what": OUTAGE_EVENT,
                "reason": outage.reason,
                "seconds": round(time.monotonic() - outage.started, 1),
                "attempts": outage.attempts + 1,
                "held": held,
                "dropped": outage.dropped,
                "turn_cancelled": outage.turn_cancelled,
            },
            created_by="host",
            created_at=outage.since,
        )

    def _recovered(self, outage: _Outage) -> None:
        self._outage = None
        logger.warning(
            "the log writes again after %.1f s: %d held items stored%s",
            time.monotonic() - outage.started,
            outage.written,
            f", {outage.dropped} dropped" if outage.dropped else "",
        )

    def _recovered_state(self, outage: _Outage) -> dict[str, Any]:
        return {
            "state": "ok",
            "reason": outage.reason,
            "seconds": round(time.monotonic() - outage.started, 1),
            "held": outage.written,
            "dropped": outage.dropped,
            "turn_cancelled": outage.turn_cancelled,
        }

    def _give_up(self) -> None:
        """The session stops: whoever still waits is told their item was not stored, but for
        the items another task is writing: it answers them. Their events are dropped."""
        queued = [entry for entry in self._queue if not entry.writing]
        self._queue = deque(entry for entry in self._queue if entry.writing)
        if queued:
            logger.warning(
                "the session stopped before the log could be written: %d items not stored",
                len(queued),
            )
        for entry in queued:
            self._events_queued -= len(entry.events)
            entry.events = []
            entry.error = StoreError("the session stopped before the log could be written")
            entry.done.set()
        self._outage = None
        self._signal_settled()  # whoever waits for room has it
        self._resynced.set()  # whoever waits for a sync is told it did not come
        self._resynced = anyio.Event()

    async def _publish(self, data: dict[str, Any] | None) -> None:
        if data is None:
            return
        event = Event(conversation_id=self.conversation_id, kind=STORAGE_EVENT, data=data)
        with contextlib.suppress(LogClosedError):
            await self._log.publish(event)


def _result(entry: _Entry) -> Item:
    """What a settled entry's waiter gets: its item, or the error that settled it."""
    if entry.error is not None:
        raise entry.error
    assert entry.item is not None
    return entry.item
