"""The `Store` protocol every conversation-log backend implements, and what backends share:
`ConversationInfo`, query checking (`Query`) and the commit callback type.

Pagination (docs/application.md): `after` and `before` are exclusive seq bounds; `order="desc"`
returns the newest items first and applies `limit` after ordering; `types` keeps only items of
the given type(s). A backend answers a query in O(limit) (times the number of types), never in
O(size of the log).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol, runtime_checkable

from tunnel.log.item import Item, NewItem, check_conversation_id

__all__ = [
    "ConversationInfo",
    "OnCommit",
    "Order",
    "Query",
    "Store",
    "SyncingStore",
    "TypeFilter",
    "notify_commit",
]

logger = logging.getLogger("tunnel.log")

Order = Literal["asc", "desc"]
TypeFilter = str | Collection[str] | None
"""One type, several types, or None for every type. An empty collection matches nothing."""

OnCommit = Callable[[list[Item]], None]
"""Called in the event loop with the items of one append once they are durable.

Calls come in commit order across every append to the store (so seqs of one conversation arrive
ascending), before the append returns. It must not block; an exception it raises is logged and
otherwise ignored.
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConversationInfo:
    """What a store knows about one conversation without reading its items."""

    conversation_id: str
    """The conversation."""
    last_seq: int
    """The seq of its newest item (seqs run 0..last_seq with no gap)."""
    item_count: int
    """How many items it holds: `last_seq + 1`."""
    updated_at: datetime | None = None
    """`created_at` of its newest item."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Query:
    """A checked query: build it with `Query.make()`."""

    conversation_id: str
    after: int
    """Exclusive lower bound; -1 when the caller gave none."""
    before: int | None
    """Exclusive upper bound, or None for no bound."""
    limit: int
    order: Order
    types: tuple[str, ...] | None
    """Distinct types, sorted; None for every type."""

    @classmethod
    def make(
        cls,
        conversation_id: str,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int = 100,
        order: Order = "asc",
        types: TypeFilter = None,
    ) -> Query:
        """Check the arguments of `Store.query()`; raises `ValueError` naming the bad one."""
        check_conversation_id(conversation_id)
        for name, bound in (("after", after), ("before", before)):
            if bound is not None and (type(bound) is not int or bound < -1):
                raise ValueError(f"{name} must be None or an integer >= -1, not {bound!r}")
        if type(limit) is not int or limit < 0:
            raise ValueError(f"limit must be an integer >= 0, not {limit!r}")
        if order not in ("asc", "desc"):
            raise ValueError(f"order must be 'asc' or 'desc', not {order!r}")
        wanted: tuple[str, ...] | None
        if types is None:
            wanted = None
        elif isinstance(types, str):
            wanted = (types,)
        else:
            if not all(isinstance(t, str) for t in types):
                raise ValueError("types must be strings")
            wanted = tuple(sorted(set(types)))
        return cls(
            conversation_id=conversation_id,
            after=-1 if after is None else after,
            before=before,
            limit=limit,
            order=order,
            types=wanted,
        )

    @property
    def empty(self) -> bool:
        """True when no item can match, so a backend need not look."""
        return (
            self.limit == 0
            or self.types == ()
            or (self.before is not None and self.before <= self.after + 1)
        )


@runtime_checkable
class Store(Protocol):
    """Durable, append-only storage of conversations. Every method is safe to call from many
    tasks at once; none blocks the event loop on disk."""

    async def append(
        self,
        conversation_id: str,
        items: Sequence[NewItem],
        *,
        on_commit: OnCommit | None = None,
    ) -> list[Item]:
        """Store `items` at the next consecutive seqs of the conversation, atomically.

        Raises `ValueError` (nothing stored) if any item is invalid, `StoreError` if the storage
        failed, `LogClosedError` after `close()`. A cancelled call may or may not have stored
        its items; if it did, `on_commit` still runs.
        """
        ...

    async def extend(self, items: Iterable[Item]) -> int:
        """Store already-numbered items (an import), all or nothing; returns how many.

        Each conversation's items must continue exactly at its `last_seq + 1`, in order:
        otherwise `SeqConflictError` names the first offending item and nothing is stored.
        `items` may be a lazy iterable; a `ValueError` it raises also aborts the whole import.
        """
        ...

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
        """Items with `after < seq < before`, of the given types, `limit` of them in `order`.

        A stored item that cannot be read comes back as a `CorruptItem` at its seq (docs/log.md,
        "Faults"), not as an error.
        """
        ...

    async def get_conversation(self, conversation_id: str) -> ConversationInfo | None:
        """The conversation's info, or None if it has no item."""
        ...

    async def list_conversations(self) -> list[ConversationInfo]:
        """Every conversation, most recently updated first."""
        ...

    def close(self) -> None:
        """Release the storage now; calls still running fail with `LogClosedError`."""
        ...

    async def aclose(self) -> None:
        """Refuse new calls, wait for appends already accepted to finish, then release."""
        ...


@runtime_checkable
class SyncingStore(Protocol):
    """A store that may commit before the disk itself holds the commit (`SQLiteStore` with
    `synchronous=NORMAL`): the `Log` calls `sync()` before what it committed leaves the host."""

    @property
    def syncs_on_commit(self) -> bool:
        """True when every commit is on the disk itself at once, so `sync()` has nothing to do."""
        ...

    async def sync(self) -> None:
        """Wait until every commit made before this call survives a power cut."""
        ...

    def synced(self, conversation_id: str, seq: int) -> bool:
        """False while item `seq` of the conversation is being committed, or committed, by this
        store and no sync has covered it yet; True otherwise (another process's items too)."""
        ...

    def synced_head(self, conversation_id: str) -> int | None:
        """None if every item this store committed to the conversation is synced; else the
        last seq that is (-1 for none)."""
        ...


def notify_commit(on_commit: OnCommit | None, items: list[Item]) -> None:
    """Run a store's commit callback; its failure must not undo or hide a durable append."""
    if on_commit is None:
        return
    try:
        on_commit(items)
    except Exception:
        logger.exception("commit callback failed; the items are stored")
