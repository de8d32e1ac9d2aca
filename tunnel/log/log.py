"""`Log`: the conversation log as the rest of the host sees it: append items, publish ephemeral
events, query, and subscribe (snapshot plus live tail, exactly once).

The store numbers and persists items and calls back, in commit order, once they are durable;
the `Log` then pushes them to the conversation's subscribers. Events skip the store and go to
the subscribers directly, so an event published after an append returned reaches everyone after
that append's items.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import NamedTuple

import anyio
import anyio.lowlevel

from tunnel.log.errors import LogClosedError
from tunnel.log.item import Event, Item, NewItem, check_conversation_id
from tunnel.log.store import ConversationInfo, Order, Store, TypeFilter
from tunnel.log.subscription import Subscription

__all__ = ["Log", "LogStatistics"]

logger = logging.getLogger("tunnel.log")

DEFAULT_BUFFER_SIZE = 256
"""Live entries a subscriber may have waiting before it falls back to reading the store."""

DEFAULT_PAGE_SIZE = 100
"""Items a subscriber reads from the store at a time while catching up."""


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
        self._topics: dict[str, _Topic] = {}
        self._closed = False
        self._items_appended = 0
        self._events_published = 0
        self._overflows = 0

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

    async def append(self, conversation_id: str, items: NewItem | Sequence[NewItem]) -> list[Item]:
        """Store `items` at consecutive seqs, atomically, and return them as stored.

        Subscribers receive them before this returns. Raises `ValueError` (nothing stored) for
        an invalid item, `StoreError` if the storage failed, `LogClosedError` once closed.
        """
        self._check_open()
        batch = [items] if isinstance(items, NewItem) else list(items)
        return await self._store.append(conversation_id, batch, on_commit=self._committed)

    async def publish(self, event: Event) -> None:
        """Send an ephemeral event to the conversation's current subscribers; never stored."""
        if not isinstance(event, Event):
            raise ValueError(f"publish takes an Event, not {type(event).__name__}")
        self._check_open()
        self._events_published += 1
        topic = self._topics.get(event.conversation_id)
        if topic is not None:
            for subscriber in topic.subscribers:
                subscriber._push(event)
        await anyio.lowlevel.checkpoint()

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
        """Stored items of one conversation, paginated as `Store.query()` describes."""
        self._check_open()
        return await self._store.query(
            conversation_id, after=after, before=before, limit=limit, order=order, types=types
        )

    async def get_conversation(self, conversation_id: str) -> ConversationInfo | None:
        """The conversation's head and size, or None if it has no item."""
        self._check_open()
        return await self._store.get_conversation(conversation_id)

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
            self,
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
        topics, self._topics = self._topics, {}
        for topic in topics.values():
            for subscriber in list(topic.subscribers):
                subscriber._end()
        await self._store.aclose()

    def statistics(self) -> LogStatistics:
        """Counters and the number of live subscribers (see `LogStatistics`)."""
        return LogStatistics(
            subscribers=sum(len(t.subscribers) for t in self._topics.values()),
            conversations_watched=len(self._topics),
            items_appended=self._items_appended,
            events_published=self._events_published,
            overflows=self._overflows,
        )

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError("the log is closed")

    # -- the store's commit callback -----------------------------------------------------------

    def _committed(self, items: list[Item]) -> None:
        self._items_appended += len(items)
        topic = self._topics.get(items[0].conversation_id)
        if topic is None:
            return
        if topic.head is None:
            # The head is being read; subscribers get these anyway and drop what the store
            # read turns out to include.
            topic.seen = max(topic.seen, items[-1].seq)
            for item in items:
                for subscriber in topic.subscribers:
                    subscriber._push(item)
            return
        for item in items:
            # The head read may already have seen this commit: skip what is not new.
            if item.seq <= topic.head:
                continue
            topic.head = item.seq
            for subscriber in topic.subscribers:
                subscriber._push(item)

    # -- used by Subscription ------------------------------------------------------------------

    async def _attach(self, subscriber: Subscription) -> int:
        """Register `subscriber` and return the conversation's head at that instant."""
        self._check_open()
        cid = subscriber.conversation_id
        topic = self._topics.get(cid)
        if topic is None:
            topic = self._topics[cid] = _Topic()
        # Registered before the head is known, so no commit can fall between the two.
        topic.subscribers[subscriber] = None
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
            self._detach(subscriber)
            raise
        return topic.head

    def _detach(self, subscriber: Subscription) -> None:
        cid = subscriber.conversation_id
        topic = self._topics.get(cid)
        if topic is None:
            return
        topic.subscribers.pop(subscriber, None)
        if not topic.subscribers:
            del self._topics[cid]

    def _head_of(self, subscriber: Subscription) -> int:
        topic = self._topics.get(subscriber.conversation_id)
        if topic is None or topic.head is None:
            return subscriber.head_seq
        return topic.head

    def _count_overflow(self) -> None:
        self._overflows += 1
