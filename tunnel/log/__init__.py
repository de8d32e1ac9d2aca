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

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tunnel.log.errors import (
        LogClosedError,
        LogError,
        SchemaError,
        SeqConflictError,
        StoreError,
        SyncError,
    )
    from tunnel.log.item import CorruptItem, Event, Item, NewItem
    from tunnel.log.log import Log, LogStatistics
    from tunnel.log.memory import MemoryStore
    from tunnel.log.paths import default_db_path
    from tunnel.log.sqlite import SQLiteStore, StoreStatistics
    from tunnel.log.store import ConversationInfo, Order, Store, TypeFilter
    from tunnel.log.subscription import Subscription, SubscriptionStatistics
else:
    from tunnel.process.lazy import lazy_exports

    # Loaded on first use: `tunnel --help` and the commands that keep no log never load SQLite.
    __getattr__ = lazy_exports(
        __name__,
        {
            "ConversationInfo": "tunnel.log.store",
            "CorruptItem": "tunnel.log.item",
            "Event": "tunnel.log.item",
            "Item": "tunnel.log.item",
            "Log": "tunnel.log.log",
            "LogClosedError": "tunnel.log.errors",
            "LogError": "tunnel.log.errors",
            "LogStatistics": "tunnel.log.log",
            "MemoryStore": "tunnel.log.memory",
            "NewItem": "tunnel.log.item",
            "Order": "tunnel.log.store",
            "SQLiteStore": "tunnel.log.sqlite",
            "SchemaError": "tunnel.log.errors",
            "SeqConflictError": "tunnel.log.errors",
            "Store": "tunnel.log.store",
            "StoreError": "tunnel.log.errors",
            "StoreStatistics": "tunnel.log.sqlite",
            "Subscription": "tunnel.log.subscription",
            "SubscriptionStatistics": "tunnel.log.subscription",
            "SyncError": "tunnel.log.errors",
            "TypeFilter": "tunnel.log.store",
            "default_db_path": "tunnel.log.paths",
        },
    )

__all__ = [
    "ConversationInfo",
    "CorruptItem",
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
    "SyncError",
    "TypeFilter",
    "default_db_path",
]
