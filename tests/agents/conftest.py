"""Fixtures for the agent session tests: a log, a recording of what it receives, a running
session."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import pytest

from tunnel.agents import AgentSession
from tunnel.log import Event, Item, Log, MemoryStore, SQLiteStore

WAIT = 15.0
"""Seconds any single wait in these tests may take before the test fails."""


class Recording:
    """Everything one subscriber of a conversation received, in order."""

    def __init__(self, log: Log, conversation_id: str) -> None:
        self.log = log
        self.conversation_id = conversation_id
        self.entries: list[Item | Event] = []
        self._changed = anyio.Event()

    async def pump(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with self.log.subscribe(self.conversation_id) as sub:
            task_status.started()
            async for entry in sub:
                self.entries.append(entry)
                self._changed.set()
                self._changed = anyio.Event()

    @property
    def items(self) -> list[Item]:
        return [e for e in self.entries if isinstance(e, Item)]

    @property
    def events(self) -> list[Event]:
        return [e for e in self.entries if isinstance(e, Event)]

    def of_type(self, type_: str) -> list[Item]:
        return [i for i in self.items if i.type == type_]

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        with anyio.fail_after(WAIT):
            while not condition():
                await self._changed.wait()

    async def wait_item(self, type_: str, count: int = 1, **data: object) -> Item:
        """The `count`-th item of `type_` whose data includes `data`."""

        def matches() -> list[Item]:
            return [
                i for i in self.of_type(type_) if all(i.data.get(k) == v for k, v in data.items())
            ]

        await self.wait_until(lambda: len(matches()) >= count)
        return matches()[count - 1]

    async def wait_idle(self) -> None:
        """Until the latest status event says idle with nothing queued."""

        def idle() -> bool:
            statuses = [e for e in self.events if e.kind == "status"]
            return bool(statuses) and statuses[-1].data == {"state": "idle", "queued": 0}

        await self.wait_until(idle)


@asynccontextmanager
async def running(session: AgentSession, log: Log) -> AsyncIterator[Recording]:
    """Run `session` with a subscriber recording its conversation from the start."""
    recording = Recording(log, session.conversation_id)
    async with anyio.create_task_group() as tg:
        await tg.start(recording.pump)
        with anyio.fail_after(WAIT):
            await tg.start(session.run)
        try:
            yield recording
        finally:
            tg.cancel_scope.cancel()


@pytest.fixture
async def log() -> AsyncIterator[Log]:
    the_log = Log(MemoryStore())
    try:
        yield the_log
    finally:
        await the_log.aclose()


@pytest.fixture(params=["memory", "sqlite"])
async def any_log(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Log]:
    store = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "log.db")
    the_log = Log(store)
    try:
        yield the_log
    finally:
        await the_log.aclose()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    return path


async def process_exists(pid: int) -> bool:
    """Whether `pid` still exists after waiting up to 5 s for it to go."""
    for _ in range(250):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        await anyio.sleep(0.02)
    return True
