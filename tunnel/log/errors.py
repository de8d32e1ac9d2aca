"""The conversation log's exceptions.

Whose fault: `ValueError` (raised as such) means the caller passed something invalid and nothing
was written; `SeqConflictError` is a `ValueError` too. `StoreError` means the storage itself
failed (disk full, a file that cannot be opened, read or written, a damaged file): nothing of the
failed call was written, except with `SyncError`: the items are committed, and it is their fsync
that failed (they leave the host once a later sync covers them). One unreadable item is not an
error: readers get a `CorruptItem`. `LogClosedError` means the owner closed the log or store
while the caller still used it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tunnel.log.item import Item

__all__ = [
    "LogClosedError",
    "LogError",
    "SchemaError",
    "SeqConflictError",
    "StoreError",
    "SyncError",
]


class LogError(Exception):
    """Root of the errors the conversation log raises (besides plain `ValueError`)."""


class LogClosedError(LogError):
    """The log or store was closed: no further append, query or subscription is possible."""


class StoreError(LogError):
    """The storage failed; the operation had no effect (a transaction was rolled back)."""


class SyncError(StoreError):
    """The items were committed, but the sync that was to make them survive a power cut failed.

    They are stored (at the seqs of `items`) and must not be appended again; nothing leaves the
    host before a later sync covers them (docs/log.md, "What is durable when").
    """

    def __init__(self, message: str, items: list[Item]) -> None:
        super().__init__(message)
        self.items = items
        """The items as committed."""


class SchemaError(StoreError):
    """The database is not a conversation log, or was written by a newer version."""


class SeqConflictError(LogError, ValueError):
    """An imported item does not continue its conversation: its seq collides or leaves a gap."""

    def __init__(self, item_id: str, expected_seq: int) -> None:
        self.item_id = item_id
        """The id of the first offending item."""
        self.expected_seq = expected_seq
        """The seq its conversation needed next."""
        verb = "collides with an existing item" if self._collides() else "leaves a gap"
        super().__init__(f"item {item_id} {verb}: its conversation continues at seq {expected_seq}")

    def _collides(self) -> bool:
        seq = int(self.item_id.rsplit(":", 1)[1])
        return seq < self.expected_seq
