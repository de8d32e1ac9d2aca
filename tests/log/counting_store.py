"""A store that counts its reads: around a real `SQLiteStore`, where each read is a hop to a
reader thread and back, so a test can hold a path to the reads it makes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tunnel.log import ConversationInfo, Item, NewItem, SQLiteStore
from tunnel.log.chain import SignedHead
from tunnel.log.store import OnCommit, Order, TypeFilter


class CountingStore:
    """`inner` as a `Store` (and a `SyncingStore`), recording each read in `reads`: the method
    and its arguments, in the order they came. Anything else of the inner store (its path, its
    statistics, `add_signatures`) is passed through."""

    def __init__(self, inner: SQLiteStore) -> None:
        self.inner = inner
        self.reads: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    # -- reads: counted --------------------------------------------------------------------

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
        self.reads.append(
            f"query({conversation_id!r}, after={after}, before={before}, limit={limit}, "
            f"order={order!r}, types={types!r})"
        )
        return await self.inner.query(
            conversation_id, after=after, before=before, limit=limit, order=order, types=types
        )

    async def get_conversation(self, conversation_id: str) -> ConversationInfo | None:
        self.reads.append(f"get_conversation({conversation_id!r})")
        return await self.inner.get_conversation(conversation_id)

    async def list_conversations(self) -> list[ConversationInfo]:
        self.reads.append("list_conversations()")
        return await self.inner.list_conversations()

    async def signatures(self, conversation_id: str) -> list[SignedHead]:
        self.reads.append(f"signatures({conversation_id!r})")
        return await self.inner.signatures(conversation_id)

    # -- the rest of Store and SyncingStore ------------------------------------------------

    async def append(
        self, conversation_id: str, items: Sequence[NewItem], *, on_commit: OnCommit | None = None
    ) -> list[Item]:
        return await self.inner.append(conversation_id, items, on_commit=on_commit)

    async def extend(self, items: Iterable[Item]) -> int:
        return await self.inner.extend(items)

    @property
    def syncs_on_commit(self) -> bool:
        return self.inner.syncs_on_commit

    async def sync(self) -> None:
        await self.inner.sync()

    def synced(self, conversation_id: str, seq: int) -> bool:
        return self.inner.synced(conversation_id, seq)

    def synced_head(self, conversation_id: str) -> int | None:
        return self.inner.synced_head(conversation_id)

    def close(self) -> None:
        self.inner.close()

    async def aclose(self) -> None:
        await self.inner.aclose()
