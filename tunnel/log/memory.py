"""`MemoryStore`: the conversation log kept in process memory, for tests and throwaway demos.

It behaves exactly like the SQLite store (same checks, same pagination) but keeps everything it
is given: its size is bounded only by the conversations appended to it.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import anyio.lowlevel

from tunnel.log.errors import LogClosedError, SeqConflictError
from tunnel.log.item import Item, NewItem, check_conversation_id, check_data, prepare
from tunnel.log.store import (
    ConversationInfo,
    OnCommit,
    Order,
    Query,
    TypeFilter,
    notify_commit,
)

__all__ = ["MemoryStore"]


@dataclass(slots=True)
class _Conversation:
    items: list[Item] = field(default_factory=list)
    # Seqs of each type, ascending, so a type filter costs O(log n + limit).
    by_type: dict[str, list[int]] = field(default_factory=dict)

    def add(self, item: Item) -> None:
        self.items.append(item)
        self.by_type.setdefault(item.type, []).append(item.seq)

    def info(self) -> ConversationInfo:
        last = self.items[-1]
        return ConversationInfo(
            conversation_id=last.conversation_id,
            last_seq=last.seq,
            item_count=len(self.items),
            updated_at=last.created_at,
        )


class MemoryStore:
    """A `Store` in memory. Every call completes without waiting on anything."""

    def __init__(self) -> None:
        self._conversations: dict[str, _Conversation] = {}
        self._closed = False

    async def append(
        self,
        conversation_id: str,
        items: Sequence[NewItem],
        *,
        on_commit: OnCommit | None = None,
    ) -> list[Item]:
        await anyio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        check_conversation_id(conversation_id)
        prepared = [prepare(new) for new in items]
        conversation = self._conversations.get(conversation_id)
        if conversation is None and prepared:
            conversation = self._conversations[conversation_id] = _Conversation()
        stored: list[Item] = []
        if conversation is not None and prepared:
            now = datetime.now(UTC)
            base = len(conversation.items)
            for offset, p in enumerate(prepared):
                item = p.stored(conversation_id, base + offset, now)
                conversation.add(item)
                stored.append(item)
            notify_commit(on_commit, stored)
        # Shielded: once stored, the caller always learns the seqs it got.
        await anyio.lowlevel.cancel_shielded_checkpoint()
        return stored

    async def extend(self, items: Iterable[Item]) -> int:
        await anyio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        # Check everything first: the import is all or nothing.
        accepted: list[Item] = []
        next_seq: dict[str, int] = {}
        for item in items:
            if not isinstance(item, Item):
                raise ValueError(f"extend takes Item values, not {type(item).__name__}")
            cid = item.conversation_id
            if cid not in next_seq:
                conversation = self._conversations.get(cid)
                next_seq[cid] = 0 if conversation is None else len(conversation.items)
            if item.seq != next_seq[cid]:
                raise SeqConflictError(item.id, next_seq[cid])
            next_seq[cid] += 1
            # Same canonical form as an appended item (tuples to lists, enums to values).
            accepted.append(_with_data(item))
        for item in accepted:
            self._conversations.setdefault(item.conversation_id, _Conversation()).add(item)
        await anyio.lowlevel.cancel_shielded_checkpoint()
        return len(accepted)

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
        await anyio.lowlevel.checkpoint()
        self._check_open()
        conversation = self._conversations.get(conversation_id)
        if conversation is None or q.empty:
            return []
        items = conversation.items
        if q.types is None:
            seqs: Iterable[int] = _window(range(len(items)), q)
        else:
            runs = [_window(conversation.by_type.get(t, []), q) for t in q.types]
            merged = heapq.merge(*runs, reverse=q.order == "desc")
            seqs = [seq for _, seq in zip(range(q.limit), merged, strict=False)]
        return [items[seq] for seq in seqs]

    async def get_conversation(self, conversation_id: str) -> ConversationInfo | None:
        check_conversation_id(conversation_id)
        await anyio.lowlevel.checkpoint()
        self._check_open()
        conversation = self._conversations.get(conversation_id)
        return None if conversation is None else conversation.info()

    async def list_conversations(self) -> list[ConversationInfo]:
        await anyio.lowlevel.checkpoint()
        self._check_open()
        infos = [c.info() for c in self._conversations.values()]
        infos.sort(key=lambda info: (info.updated_at, info.conversation_id), reverse=True)
        return infos

    def close(self) -> None:
        self._closed = True

    async def aclose(self) -> None:
        self.close()
        await anyio.lowlevel.checkpoint()

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError("the memory store is closed")


def _window(seqs: Sequence[int], q: Query) -> Sequence[int]:
    """The seqs of `seqs` (ascending) inside the query's bounds, `limit` of them in its order."""
    start = bisect_right(seqs, q.after)
    stop = len(seqs) if q.before is None else bisect_left(seqs, q.before)
    if q.order == "asc":
        return seqs[start : min(stop, start + q.limit)]
    return seqs[max(start, stop - q.limit) : stop][::-1]


def _with_data(item: Item) -> Item:
    # A private copy in canonical form (tuples to lists, enums to values), as append makes.
    data = check_data(item.data)
    return Item(
        conversation_id=item.conversation_id,
        seq=item.seq,
        type=item.type,
        status=item.status,
        response_id=item.response_id,
        created_at=item.created_at,
        created_by=item.created_by,
        data=data,
    )
