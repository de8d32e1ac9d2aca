"""`LogWriter`: a session's appends to the log, carried through storage faults.

While the log can be written, an append goes straight to it. When one fails with `StoreError`
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
"""Items (and agent updates waiting their turn) held while the log cannot be written; past it
the running turn is cancelled and agent output is dropped (counted)."""

RETRY_INITIAL = 0.25
"""Upper bound of the first delay before the log is tried again, in seconds."""

RETRY_MAXIMUM = 5.0
"""Cap of the delay between tries: the log writes again at most this long after it could."""


@dataclass(eq=False, slots=True)
class _Held:
    """One item waiting for the log; `done` is set once it is stored (or will never be)."""

    new: NewItem
    done: anyio.Event = field(default_factory=anyio.Event)
    item: Item | None = None
    error: StoreError | None = None
    writing: bool = False
    """In a write under way: a waiter cancelled now may still see it stored."""


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
    never keeps anything (the caller says it was not stored).
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
        """The bound on what waits while the log cannot be written (see `MAX_HELD`)."""
        self._retry_initial = retry_initial
        self._retry_maximum = retry_maximum
        # Bounded by max_held, plus at most one item per task that waits for its own.
        self._held: deque[_Held] = deque()
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
        return len(self._held)

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
            "held": len(self._held),
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
        can (in order with everything held before it).

        For the agent's output, which nobody is told of but through the log: it returns once
        the item is committed (`durable=False`), and the log syncs it before it leaves the
        host, one sync for a burst of them (docs/log.md, "Durability").

        Cancel-safe as `Log.append`: cancelled while held, it is never stored; cancelled while
        being written, it may be. Raises `ValueError` for an invalid item, `StoreError` only
        when `run()` is not running.
        """
        if self._outage is None:
            try:
                (item,) = await self._log.append(self.conversation_id, new, durable=False)
                return item
            except StoreError as exc:
                if not self._running:
                    raise
                self._failed(exc)
        held = self._hold(new, droppable=False)
        assert held is not None
        return await self._wait(held)

    async def append_or_hold(self, new: NewItem) -> Item | None:
        """Store `new` if the log can be written and return it; otherwise keep it to store
        when it can (or drop it, counted, past the bound) and return None without waiting.
        Committed but not synced (`SyncError`), it is not kept: it returns None, and the item
        leaves the host once `run()` has synced the log."""
        if self._outage is None:
            try:
                (item,) = await self._log.append(self.conversation_id, new)
                return item
            except SyncError as exc:
                if not self._running:
                    raise
                self._unsynced(exc)
                return None
            except StoreError as exc:
                if not self._running:
                    raise
                self._failed(exc)
        self._hold(new, droppable=True)
        return None

    async def try_append(self, new: NewItem) -> Item:
        """Store `new` now or raise `StoreError`; never held. For what a person is told was
        stored (a prompt): refused outright while the log cannot be written. A failure starts
        an outage like any other, so everyone is told. Committed but not synced (`SyncError`),
        it is in the log: this waits until `run()` has synced it, then returns it (or raises
        `SyncError` if the session stops first)."""
        outage = self._outage
        if outage is not None:
            raise StoreError(f"the log cannot be written ({outage.reason})")
        try:
            (item,) = await self._log.append(self.conversation_id, new)
        except SyncError as exc:
            if not self._running:
                raise
            self._unsynced(exc)
            (item,) = exc.items
            while not self._log.durable(self.conversation_id, item.seq):
                if not self._running:
                    raise
                await self._resynced.wait()
        except StoreError as exc:
            if self._running:
                self._failed(exc)
            raise
        return item

    @contextlib.contextmanager
    def admitting(self) -> Iterator[bool]:
        """For a producer about to wait its turn to record (an ACP agent's update): yields
        False, and counts it dropped, when the log cannot be written and `max_held` things wait
        already; the running turn is then cancelled."""
        outage = self._outage
        if outage is not None and len(self._held) + self._admitted >= self.max_held:
            outage.dropped += 1
            self._overflow(outage)
            yield False
            return
        self._admitted += 1
        try:
            yield True
        finally:
            self._admitted -= 1

    def _hold(self, new: NewItem, *, droppable: bool) -> _Held | None:
        outage = self._outage
        assert outage is not None
        prepare(new)  # an invalid item is the caller's ValueError now, never a stuck retry
        if len(self._held) + self._admitted >= self.max_held:
            self._overflow(outage)
            if droppable:
                outage.dropped += 1
                return None
        if new.created_at is None:
            # When it happened, not when the disk came back.
            new = dataclasses.replace(new, created_at=datetime.now(UTC))
        held = _Held(new)
        self._held.append(held)
        return held

    async def _wait(self, held: _Held) -> Item:
        try:
            await held.done.wait()
        except BaseException:
            if not held.writing and held in self._held:
                self._held.remove(held)  # never written, and now never will be
            raise
        if held.error is not None:
            raise held.error
        assert held.item is not None
        return held.item

    def _overflow(self, outage: _Outage) -> None:
        if outage.turn_cancelled:
            return
        outage.turn_cancelled = True
        logger.warning(
            "the log still cannot be written and %d items wait: the running turn is cancelled",
            len(self._held) + self._admitted,
        )
        if self.on_overflow is not None:
            self.on_overflow()

    def _unsynced(self, exc: SyncError) -> None:
        """Items are committed but a sync failed: an outage that `run()` ends with a sync."""
        self._failed(exc)
        assert self._outage is not None
        self._outage.unsynced = True

    def _failed(self, exc: StoreError) -> None:
        """An outage begins (or goes on); `run()` tells everyone and retries."""
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

    # -- retrying ------------------------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Retry the held items until the log takes them, for as long as the session runs."""
        self._running = True
        try:
            task_status.started()
            while True:
                await self._wakeup.wait()
                self._wakeup = anyio.Event()
                if self._outage is not None:
                    await self._recover(self._outage)
        finally:
            self._running = False
            self._give_up()

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
            while True:
                if await self._write_held(outage):
                    if not self._held:
                        self._recovered(outage)
                        await self._publish(self._recovered_state(outage))
                        return
                    continue  # more arrived meanwhile: write them at once, still in order
                break

    async def _write_held(self, outage: _Outage) -> bool:
        """One try: the outage's record (once) and every held item, in one transaction, and
        synced; or, with nothing to write, a sync of what is committed and not synced."""
        batch = list(self._held)
        news = [held.new for held in batch]
        if not outage.recorded:
            news.insert(0, self._record(outage, len(batch)))
        for held in batch:
            held.writing = True
        try:
            if news:
                stored = await self._log.append(self.conversation_id, news)
            else:
                stored = []
                if outage.unsynced:
                    await self._log.sync()
        except SyncError as exc:
            # Committed: never appended again; the next try syncs them.
            self._stored(outage, batch, exc.items)
            outage.unsynced = True
            self._still_failing(outage, exc)
            return False
        except StoreError as exc:
            for held in batch:
                held.writing = False
            self._still_failing(outage, exc)
            return False
        except BaseException:
            for held in batch:
                held.writing = False
            raise
        self._stored(outage, batch, stored)
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

    def _stored(self, outage: _Outage, batch: list[_Held], stored: list[Item]) -> None:
        """The batch (after the outage's record, if it was in it) is committed."""
        if not outage.recorded:
            outage.recorded = True
            stored = stored[1:]
        for held, item in zip(batch, stored, strict=True):
            held.writing = False
            held.item = item
            held.done.set()
            # Not necessarily first any more: a cancelled waiter may have left meanwhile.
            with contextlib.suppress(ValueError):
                self._held.remove(held)
        outage.written += len(batch)

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
        """The session stops: whoever still waits is told their item was not stored."""
        held, self._held = list(self._held), deque()
        if held:
            logger.warning(
                "the session stopped while the log could not be written: %d items not stored",
                len(held),
            )
        for entry in held:
            entry.error = StoreError("the session stopped before the log could be written")
            entry.done.set()
        self._outage = None
        self._resynced.set()  # whoever waits for a sync is told it did not come
        self._resynced = anyio.Event()

    async def _publish(self, data: dict[str, Any] | None) -> None:
        if data is None:
            return
        event = Event(conversation_id=self.conversation_id, kind=STORAGE_EVENT, data=data)
        with contextlib.suppress(LogClosedError):
            await self._log.publish(event)
