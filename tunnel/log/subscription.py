"""`Subscription`: one reader of a conversation's stored items (from a cursor) and live events.

Delivery is cursor-based. The subscription remembers the highest seq it has fetched; stored
items up to the conversation's head are read from the store a page at a time, newer ones arrive
pushed by the `Log` into a small live buffer. An item is handed out only if it is exactly the
next seq, so every item after `after` arrives once, in order, whatever the interleaving of
appends, subscribes and store reads.

Memory is bounded: the live buffer holds at most `buffer_size` entries and the store backlog at
most one page. When the live buffer is full the subscription drops it and catches up from the
store by cursor instead; ephemeral events published while it is that far behind are lost (they
are ephemeral: the items that follow carry what they said).

A subscription knows its log only as a `Feed` (the protocol below): the log depends on this
module, never the other way round.
"""

from __future__ import annotations

import enum
from collections import deque
from types import TracebackType
from typing import NamedTuple, Protocol

import anyio

from tunnel.log.errors import LogClosedError, StoreError
from tunnel.log.item import Event, Item

__all__ = ["Feed", "Subscription", "SubscriptionStatistics"]


class Feed(Protocol):
    """What a `Subscription` needs from the log that feeds it.

    The feed pushes every new item of the conversation (in commit order) and every event to each
    attached subscription with `Subscription.push()`, and calls `Subscription.end()` on them all
    when the log closes.
    """

    async def attach(self, subscription: Subscription) -> int:
        """Start pushing to `subscription` and return its conversation's last stored seq at that
        instant (-1 if it has none). Raises `LogClosedError` once the log is closed."""
        ...

    def detach(self, subscription: Subscription) -> None:
        """Stop pushing to `subscription`; nothing happens if it is not attached."""
        ...

    def head(self, conversation_id: str) -> int | None:
        """The last seq pushed to the conversation's subscriptions; None if it is not known."""
        ...

    def overflowed(self) -> None:
        """Count one overflow of a subscription's live buffer (for the log's statistics)."""
        ...

    def durable(self, conversation_id: str, seq: int) -> bool:
        """Whether item `seq` may be handed out: it survives a power cut (docs/log.md,
        "Durability"). False only until a `sync()` that began after its commit returns."""
        ...

    async def sync(self) -> None:
        """Wait until every item pushed so far is `durable`."""
        ...

    async def query(
        self, conversation_id: str, *, after: int, before: int, limit: int
    ) -> list[Item]:
        """At most `limit` stored items with `after < seq < before`, oldest first."""
        ...


class SubscriptionStatistics(NamedTuple):
    """The state of one subscription, for tests and diagnostics."""

    cursor: int
    """The highest seq fetched so far (handed out or waiting in the backlog)."""
    head_seq: int
    """The conversation's last seq when the subscription started."""
    buffered: int
    """Live entries waiting (at most `buffer_size`)."""
    backlog: int
    """Items read from the store and not yet handed out (at most one page)."""
    overflows: int
    """How often the live buffer overflowed and the subscription fell back to the store."""
    catching_up: bool
    """True while live entries are dropped because the subscription reads from the store."""


class _State(enum.Enum):
    NEW = "new"
    OPEN = "open"
    ENDED = "ended"  # the log was closed
    LEFT = "left"  # the subscriber left the `async with`


class Subscription:
    """Receive a conversation's items after `after`, then its live items and events.

    Use as `async with log.subscribe(conversation_id, after=n) as sub:`, then
    `await sub.receive()`, `await sub.receive_batch()` or `async for entry in sub`. One task
    receives at a time. When the log closes, receiving raises `anyio.EndOfStream` (and
    `async for` ends).
    """

    def __init__(
        self,
        feed: Feed,
        conversation_id: str,
        after: int | None,
        *,
        buffer_size: int,
        page_size: int,
    ) -> None:
        if after is not None and (type(after) is not int or after < -1):
            raise ValueError(f"after must be None or an integer >= -1, not {after!r}")
        self.conversation_id = conversation_id
        """The conversation received."""
        self.after = after
        """Items with a seq above this (or all, if None) are delivered."""
        self.head_seq = -1
        """The conversation's last stored seq at the instant of subscribing (-1 if empty).

        Items with `after < seq <= head_seq` are the snapshot, later ones the live tail. Set by
        entering the `async with`."""
        self._feed = feed
        self._buffer_size = buffer_size
        self._page_size = page_size
        self._state = _State.NEW
        self._cursor = -1 if after is None else after
        self._store_until = -1  # items up to this seq must come from the store
        self._backlog: deque[Item] = deque()  # at most one page
        self._live: deque[Item | Event] = deque()  # at most buffer_size entries
        self._catching_up = False
        self._overflows = 0
        self._receiving = False
        self._wakeup: anyio.Event | None = None

    async def __aenter__(self) -> Subscription:
        if self._state is not _State.NEW:
            raise RuntimeError("a subscription can be entered only once")
        self.head_seq = await self._feed.attach(self)
        self._store_until = self.head_seq
        if self._state is _State.NEW:  # not ended by the log closing meanwhile
            self._state = _State.OPEN
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._leave()

    def _leave(self) -> None:
        if self._state is _State.LEFT:
            return
        self._state = _State.LEFT
        self._feed.detach(self)
        self._live.clear()
        self._backlog.clear()
        self._wake()

    # -- receiving -----------------------------------------------------------------------------

    async def receive(self) -> Item | Event:
        """The next item or event, waiting for one if needed."""
        (entry,) = await self.receive_batch(1)
        return entry

    async def receive_batch(self, max_items: int = 100) -> list[Item | Event]:
        """Between 1 and `max_items` entries in order, waiting until at least one is available.

        Cancel-safe: a cancelled call has consumed nothing.
        """
        if type(max_items) is not int or max_items < 1:
            raise ValueError(f"max_items must be an integer >= 1, not {max_items!r}")
        if self._receiving:
            raise anyio.BusyResourceError("receiving from")
        self._receiving = True
        try:
            return await self._receive_batch(max_items)
        finally:
            self._receiving = False

    async def _receive_batch(self, max_items: int) -> list[Item | Event]:
        out: list[Item | Event] = []
        while len(out) < max_items:
            if out and self._state is not _State.OPEN:
                break  # hand out what was taken; the next call reports the end
            self._check_state()
            if self._backlog:
                out.append(self._backlog.popleft())
                continue
            if self._catching_up:
                self._store_until = max(self._store_until, self._head())
                if self._cursor >= self._store_until:
                    # Caught up: from this instant every new item is pushed live again.
                    self._catching_up = False
            if self._cursor < self._store_until:
                if out:
                    break  # never wait while holding entries a cancellation would lose
                if not self._feed.durable(self.conversation_id, self._store_until):
                    # A failed sync returns too: ask again until one covers what is read next.
                    await self._feed.sync()
                    continue
                await self._read_page(max(self._page_size, max_items))
                continue
            if self._live:
                entry = self._live[0]
                if isinstance(entry, Item):
                    if entry.seq <= self._cursor:
                        self._live.popleft()  # already delivered from the store
                        continue
                    if entry.seq > self._cursor + 1:
                        # Items are missing before this one (written elsewhere): read them.
                        self._store_until = entry.seq - 1
                        continue
                    if not self._feed.durable(self.conversation_id, entry.seq):
                        # Nothing leaves before it is synced; the entries behind it wait too.
                        if out:
                            break
                        await self._feed.sync()
                        continue
                    self._cursor = entry.seq
                out.append(self._live.popleft())
                continue
            if out:
                break
            await self._wait()
        return out

    async def _read_page(self, limit: int) -> None:
        try:
            page = await self._feed.query(
                self.conversation_id,
                after=self._cursor,
                before=self._store_until + 1,
                limit=limit,
            )
        except LogClosedError:
            self._check_state()
            raise
        self._check_state()
        if not page:
            raise StoreError(
                f"conversation {self.conversation_id}: items {self._cursor + 1} to "
                f"{self._store_until} are missing from the store"
            )
        self._cursor = page[-1].seq
        self._backlog.extend(page)
        if self._catching_up and self._cursor >= self._head():
            # Caught up: new items (and events) are buffered live again, behind the backlog.
            self._catching_up = False

    def _head(self) -> int:
        """The conversation's last seq pushed live: stored items up to it are not pushed again."""
        head = self._feed.head(self.conversation_id)
        return self.head_seq if head is None else head

    async def _wait(self) -> None:
        self._wakeup = anyio.Event()
        await self._wakeup.wait()

    def _check_state(self) -> None:
        if self._state is _State.OPEN:
            return
        if self._state is _State.ENDED:
            raise anyio.EndOfStream
        if self._state is _State.NEW:
            raise RuntimeError("enter the subscription (`async with`) before receiving")
        raise anyio.ClosedResourceError

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Item | Event:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    # -- called by the feed (synchronously, in the event loop) ----------------------------------

    def push(self, entry: Item | Event) -> None:
        """Take one new item or event from the feed; receivers never call this."""
        if self._catching_up or self._state is _State.LEFT:
            return  # what it would have been is read from the store (events are dropped)
        if isinstance(entry, Item) and entry.seq <= self._cursor:
            return
        if len(self._live) >= self._buffer_size:
            # Too far behind: stop buffering and catch up from the store by cursor instead.
            self._live.clear()
            self._catching_up = True
            self._overflows += 1
            self._feed.overflowed()
        else:
            self._live.append(entry)
        self._wake()

    def end(self) -> None:
        """The log closed: receiving raises `anyio.EndOfStream` from now on (feed only)."""
        if self._state is not _State.LEFT:
            self._state = _State.ENDED
        self._live.clear()
        self._backlog.clear()
        self._wake()

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()
            self._wakeup = None

    def statistics(self) -> SubscriptionStatistics:
        """Where the subscription is and what it holds (see `SubscriptionStatistics`)."""
        return SubscriptionStatistics(
            cursor=self._cursor,
            head_seq=self.head_seq,
            buffered=len(self._live),
            backlog=len(self._backlog),
            overflows=self._overflows,
            catching_up=self._catching_up,
        )
