"""The conversation log (docs/log.md): typed, append-only, durable items per conversation,
ephemeral events, and subscriptions that deliver a snapshot plus the live tail exactly once.

    store = SQLiteStore(default_db_path())        # or MemoryStore()
    async with Log(store) as log:
        await log.append("c1", NewItem(type="message", data={...}, created_by="host"))
        async with log.subscribe("c1", after=None) as sub:
            async for entry in sub:                 # Item or Event
                ...
"""

from __future__ import annotations

from tunnel.log.errors import (
    LogClosedError,
    LogError,
    SchemaError,
    SeqConflictError,
    StoreError,
)
from tunnel.log.item import Event, Item, NewItem
from tunnel.log.log import Log, LogStatistics
from tunnel.log.memory import MemoryStore
from tunnel.log.paths import default_db_path
from tunnel.log.sqlite import SQLiteStore, StoreStatistics
from tunnel.log.store import ConversationInfo, Order, Store, TypeFilter
from tunnel.log.subscription import Subscription, SubscriptionStatistics

__all__ = [
    "ConversationInfo",
    "Event",
    "Item",
    "Log",
    "LogClosedError",
    "LogError",
    "LogStatistics",
    "MemoryStore",
    "NewItem",
    "Order",
    "SQLiteStore",
    "SchemaError",
    "SeqConflictError",
    "Store",
    "StoreError",
    "StoreStatistics",
    "Subscription",
    "SubscriptionStatistics",
    "TypeFilter",
    "default_db_path",
]
