"""`Log`: the conversation log as the rest of the host sees it: append items, publish ephemeral
events, query, and subscribe (snapshot plus live tail, exactly once).

The store numbers and persists items and calls back, in commit order, once they are committed;
the `Log` then pushes them to the conversation's subscribers. With a store that syncs to the
disk later than it commits (`SyncingStore`: the host's SQLite log), nothing committed leaves
through the log before it is synced: a subscription hands out an item, and `query` returns it,
only once `sync()` covered it; `append` waits for that too unless told `durable=False`. Events
skip the store and go to the subscribers directly, so an event published after an append
returned reaches everyone after that append's items. The log's `_Feed` keeps the subscribers of
each conversation and is all a `Subscription` sees of the log (`tunnel.log.subscription.Feed`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import NamedTuple

import anyio
import anyio.lowlevel

from tunnel.log.errors import LogClosedError, StoreError, SyncError
from tunnel.log.item import Event, Item, NewItem, check_conversation_id
from tunnel.log.store import ConversationInfo, Order, Store, SyncingStore, TypeFilter
from tunnel.log.subscription import Subscription

__all__ = ["Log", "LogStatistics"]

logger = logging.getLogger("tunnel.log")

DEFAULT_BUFFER_SIZE = 256
"""Live entries a subscriber may have waiting before it falls back to reading the store."""

DEFAULT_PAGE_SIZE = 100
"""Items a subscriber reads from the store at a time while catching up."""

SYNC_RETRY = 0.25
"""Seconds a subscriber waits before asking again for a sync that failed (an I/O error): the
items it would cover are not handed out until one succeeds."""


class LogStatistics(NamedTuple):
    """Counters of one `Log`."""

    subscribers: int
    """Subscriptions currently registered (0 once every subscriber has left)."""
    conversations_watched: int
    """Conversations with at least one subscriber."""
    items_appended: int
    """Items appended through this log."""
    events_published: int
    """Events published through this log (delivered or not)."""
    overflows: int
    """Times a subscriber's live buffer overflowed and it fell back to the store."""


@dataclass(slots=True, eq=False)
class _Topic:
    """The subscribers of one conversation and the last seq pushed to them."""

    subscribers: dict[Subscription, None] = field(default_factory=dict)  # ordered set
    head: int | None = None  # None until read from the store
    seen: int = -1  # the highest seq committed while `head` was being read
    loading: anyio.Event | None = None


class _Feed:
    """The subscribers of every watched conversation: the `Feed` of this log's subscriptions.

    A conversation is watched while it has at least one subscriber; nothing about it is kept
    once the last one leaves.
    """

    def __init__(
        self, store: Store, durable: Callable[[str, int], bool], sync: Callable[[], Awaitable[None]]
    ) -> None:
        self._store = store
        self._durable = durable
        self._sync = sync
        self.topics: dict[str, _Topic] = {}
        self.closed = False
        self.overflows = 0
        self.sync_failing = False

    # -- the Feed protocol, used by Subscription -----------------------------------------------

    async def attach(self, subscription: Subscription) -> int:
        """Register `subscription` and return the conversation's head at that instant."""
        if self.closed:
            raise LogClosedError("the log is closed")
        cid = subscription.conversation_id
        topic = self.topics.get(cid)
        if topic is None:
            topic = self.topics[cid] = _Topic()
        # Registered before the head is known, so no commit can fall between the two.
        topic.subscribers[subscription] = None
        try:
            while topic.head is None:
                if topic.loading is not None:
                    await topic.loading.wait()
                    continue
                loading = topic.loading = anyio.Event()
                try:
                    info = await self._store.get_conversation(cid)
                    stored = -1 if info is None else info.last_seq
                    topic.head = max(stored, topic.seen)
                finally:
                    topic.loading = None
                    loading.set()
        except BaseException:
            self.detach(subscription)
            raise
        return topic.head

    def detach(self, subscription: Subscription) -> None:
        cid = subscription.conversation_id
        topic = self.topics.get(cid)
        if topic is None:
            return
        topic.subscribers.pop(subscription, None)
        if not topic.subscribers:
            del self.topics[cid]

    def head(self, conversation_id: str) -> int | None:
        topic = self.topics.get(conversation_id)
        return None if topic is None else topic.head

    def overflowed(self) -> None:
        self.overflows += 1

    def durable(self, conversation_id: str, seq: int) -> bool:
        return self._durable(conversation_id, seq)

    async def sync(self) -> None:
        try:
            await self._sync()
            self.sync_failing = False
        except StoreError as exc:
            # What it would cover stays held back; the subscription asks again after a pause.
            if not self.sync_failing:
                logger.warning("cannot sync the log (%s): its new items wait; retrying", exc)
            self.sync_failing = True
            await anyio.sleep(SYNC_RETRY)

    async def query(
        self, conversation_id: str, *, after: int, before: int, limit: int
    ) -> list[Item]:
        return await self._store.query(conversation_id, after=after, before=before, limit=limit)

    # -- used by Log -------------------------------------------------------------------------

    def push_event(self, event: Event) -> None:
        topic = self.topics.get(event.conversation_id)
        if topic is not None:
            for subscriber in topic.subscribers:
                subscriber.push(event)

    def push_committed(self, items: list[Item]) -> None:
        """Push the items of one commit (the store's callback, in commit order)."""
        topic = self.topics.get(items[0].conversation_id)
        if topic is None:
            return
        if topic.head is None:
            # The head is being read; subscribers get these anyway and drop what the store
            # read turns out to include.
            topic.seen = max(topic.seen, items[-1].seq)
            for item in items:
                for subscriber in topic.subscribers:
                    subscriber.push(item)
            return
        for item in items:
            # The head read may already have seen this commit: skip what is not new.
            if item.seq <= topic.head:
                continue
            topic.head = item.seq
            for subscriber in topic.subscribers:
                subscriber.push(item)

    def close(self) -> None:
        """End every subscription; later `attach` calls raise `LogClosedError`."""
        self.closed = True
        topics, self.topics = self.topics, {}
        for topic in topics.values():
            for subscriber in list(topic.subscribers):
                subscriber.end()


class Log:
    """Append-only, typed conversation log over a `Store` (see the module docstring).

    The log owns the store from construction on: `aclose()` closes it.
    """

    def __init__(
        self,
        store: Store,
        *,
        buffer_size: int = DEFAULT_BUFFER_SIZE,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> None:
        """`buffer_size` bounds each subscriber's live buffer, `page_size` its store reads."""
        if buffer_size < 1 or page_size < 1:
            raise ValueError("buffer_size and page_size must be at least 1")
        self._store = store
        self._buffer_size = buffer_size
        self._page_size = page_size
        # Set when commits may reach the disk itself only at `sync()`.
        self._syncer = (
            store if isinstance(store, SyncingStore) and not store.syncs_on_commit else None
        )
        self._feed = _Feed(store, self.durable, self.sync)
        self._closed = False
        self._items_appended = 0
        self._events_published = 0

    @property
    def store(self) -> Store:
        """The store this log writes to and reads from."""
        return self._store

    async def __aenter__(self) -> Log:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def append(
        self,
        conversation_id: str,
        items: NewItem | Sequence[NewItem],
        *,
        durable: bool = True,
    ) -> list[Item]:
        """Store `items` at consecutive seqs, atomically, and return them as stored.

        Subscribers are handed them before this returns. With `durable=False` it returns once
        they are committed, which survives the host process being killed; otherwise once they
        also survive a power cut (the same with a store that syncs each commit). Either way
        nothing leaves through the log before it is synced. Raises `ValueError` (nothing
        stored) for an invalid item, `StoreError` if the storage failed (nothing stored),
        `SyncError` if, durable, the sync after the commit failed (the items are committed,
        and leave once a later sync covers them: not to be appended again), `LogClosedError`
        once closed.
        """
        self._check_open()
        batch = [items] if isinstance(items, NewItem) else list(items)
        stored = await self._store.append(conversation_id, batch, on_commit=self._committed)
        if durable and self._syncer is not None:
            try:
                await self.sync()
            except StoreError as exc:
                raise SyncError(str(exc), stored) from exc
        return stored

    async def sync(self) -> None:
        """Wait until every item committed through this log so far survives a power cut (at
        once with a store that syncs each commit)."""
        if self._syncer is None:
            await anyio.lowlevel.checkpoint()
            return
        await self._syncer.sync()

    def durable(self, conversation_id: str, seq: int) -> bool:
        """Whether item `seq` may leave the host: synced, or not written by this log's store
        (another process wrote it, with its own store's durability)."""
        return self._syncer is None or self._syncer.synced(conversation_id, seq)

    async def publish(self, event: Event) -> None:
        """Send an ephemeral event to the conversation's current subscribers; never stored."""
        self.publish_nowait(event)
        await anyio.lowlevel.checkpoint()

    def publish_nowait(self, event: Event) -> None:
        """`publish` without letting other tasks run: for a caller that must publish several
        events, in order, where it cannot wait (an append's events once it is committed)."""
        if not isinstance(event, Event):
            raise ValueError(f"publish takes an Event, not {type(event).__name__}")
        self._check_open()
        self._events_published += 1
        self._feed.push_event(event)

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
        """Stored items of one conversation, paginated as `Store.query()` describes; only
        items that may leave the host (`durable`): it syncs first if it must, and leaves out what
        was committed while it synced."""
        self._check_open()
        syncer = self._syncer
        if syncer is not None and syncer.synced_head(conversation_id) is not None:
            await self.sync()
            synced = syncer.synced_head(conversation_id)
            if synced is not None:  # committed while it synced: left out
                before = synced + 1 if before is None else min(before, synced + 1)
        return await self._store.query(
            conversation_id, after=after, before=before, limit=limit, order=order, types=types
        )

    async def get_conversation(self, conversation_id: str) -> ConversationInfo | None:
        """The conversation's head and size, or None if it has no item."""
        self._check_open()
        return await self._store.get_conversation(conversation_id)

    async def last_seq(self, conversation_id: str) -> int:
        """The conversation's last seq, -1 if it has none: from memory while it has a
        subscriber (the host's broadcast is one), else read from the store. In memory it counts
        an item once committed, before its sync (`query` and subscriptions wait for that before
        they hand it out), and an item another process wrote once one appended here follows
        it, as the subscribers learn of it."""
        self._check_open()
        head = self._feed.head(conversation_id)
        if head is None:
            info = await self._store.get_conversation(conversation_id)
            return -1 if info is None else info.last_seq
        await anyio.lowlevel.checkpoint()
        return head

    async def list_conversations(self) -> list[ConversationInfo]:
        """Every stored conversation, most recently updated first."""
        self._check_open()
        return await self._store.list_conversations()

    def subscribe(self, conversation_id: str, after: int | None = None) -> Subscription:
        """A subscription to enter with `async with`: every item with a seq above `after`
        (all items if None) exactly once and in order, then live items and events."""
        self._check_open()
        check_conversation_id(conversation_id)
        return Subscription(
            self._feed,
            conversation_id,
            after,
            buffer_size=self._buffer_size,
            page_size=self._page_size,
        )

    async def aclose(self) -> None:
        """End every subscription (they raise `anyio.EndOfStream`) and close the store.

        Appends already accepted by the store finish first. Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        self._feed.close()
        await self._store.aclose()

    def statistics(self) -> LogStatistics:
        """Counters and the number of live subscribers (see `LogStatistics`)."""
        return LogStatistics(
            subscribers=sum(len(t.subscribers) for t in self._feed.topics.values()),
            conversations_watched=len(self._feed.topics),
            items_appended=self._items_appended,
            events_published=self._events_published,
            overflows=self._feed.overflows,
        )

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError("the log is closed")

    # -- the store's commit callback -----------------------------------------------------------

    def _committed(self, items: list[Item]) -> None:
        self._items_appended += len(items)
        self._feed.push_committed(items)
