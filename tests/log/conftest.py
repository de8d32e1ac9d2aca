"""Fixtures for the conversation log tests: every store-level test runs on both stores."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tunnel.log import MemoryStore, SQLiteStore, Store

StoreFactory = Callable[[], Store]


@pytest.fixture(params=["memory", "sqlite"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """A factory for fresh stores of one kind; SQLite ones live in the test's tmp_path."""
    made: list[Store] = []

    def make() -> Store:
        store: Store
        if request.param == "memory":
            store = MemoryStore()
        else:
            store = SQLiteStore(tmp_path / f"log{len(made)}.db", synchronous="NORMAL")
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


@pytest.fixture
def store(make_store: StoreFactory) -> Store:
    """One fresh store, memory and SQLite in turn."""
    return make_store()
