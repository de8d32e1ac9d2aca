"""A store whose appends fail on demand: the storage fault injected at the store's boundary."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tunnel.log import ConversationInfo, Item, MemoryStore, NewItem, StoreError
from tunnel.log.store import OnCommit, Order, TypeFilter


class FaultyStore:
    """A `MemoryStore` whose `append` raises `StoreError` (nothing stored) while `failing` is
    set, or for the next `fail_next` calls, as SQLite's does when the disk is full."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.failing = False
        self.fail_next = 0
        self.failures = 0
        self.reason = "database or disk is full"

    async def append(
        self,
        conversation_id: str,
        items: Sequence[NewItem],
        *,
        on_commit: OnCommit | None = None,
    ) -> list[Item]:
        if self.failing or self.fail_next > 0:
            self.fail_next = max(0, self.fail_next - 1)
            self.failures += 1
            raise StoreError(f"the write transaction failed: {self.reason}")
        return await self.inner.append(conversation_id, items, on_commit=on_commit)

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
