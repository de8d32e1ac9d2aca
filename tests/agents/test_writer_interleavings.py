"""The session's writer under interleavings: several producers appending and publishing every way
at once, commits and syncs failing and working again between any two steps, callers cancelled
while queued or mid-write, `run()` stopped mid-flight or never started. What a subscriber saw is
checked against what every call answered: nothing acknowledged lost, nothing refused stored,
nothing stored twice, everything in the order it was asked for, nobody waiting forever.

A seed draws the schedule. Nothing here waits on the clock (retries, commits and syncs take
scheduling steps, not seconds), so asyncio runs a seed the same way every time: a failing seed
fails again. `TUNNEL_TEST_WRITER_SEEDS=1000` tries more of them."""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import anyio
import anyio.abc
import anyio.lowlevel
import pytest

import tunnel.agents.writer as writer_module
import tunnel.log.log as log_module
from tunnel.agents.writer import LogWriter
from tunnel.log import Event, Item, Log, NewItem, StoreError, SyncError
from tunnel.log.store import OnCommit

from ..log.test_sync import GatedSyncStore

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

Mode = Literal["run", "stop", "norun"]

SEEDS = range(int(os.environ.get("TUNNEL_TEST_WRITER_SEEDS", "60")))
PATIENCE = 20_000
"""Scheduling steps the writer may take to empty its queue once the faults are over."""
WAIT = 10.0
"""Seconds before a call that never returns fails the test (it never comes near)."""


async def steps(count: int) -> None:
    for _ in range(count):
        await anyio.lowlevel.checkpoint()


class ChaosStore(GatedSyncStore):
    """`GatedSyncStore` whose commits and syncs take a few scheduling steps, and fail on demand
    as `FaultyStore`'s do: a failed commit stores nothing and is refused before its items are
    looked at, as a read-only SQLite log refuses. `syncing=False`: it syncs as it commits."""

    def __init__(self, rng: random.Random, *, syncing: bool) -> None:
        super().__init__()
        self.rng = rng
        self.syncs_on_commit = not syncing
        self.failing = False
        self.sync_failing = False

    async def append(
        self, conversation_id: str, items: Sequence[NewItem], *, on_commit: OnCommit | None = None
    ) -> list[Item]:
        await steps(self.rng.randrange(3))
        if self.failing:
            raise StoreError("the write transaction failed: database or disk is full")
        return await super().append(conversation_id, items, on_commit=on_commit)

    async def sync(self) -> None:
        reached = dict(self.committed)
        await steps(self.rng.randrange(3))
        if self.sync_failing:
            raise StoreError("cannot sync the log at log.db: Input/output error")
        self.synced_heads.update(reached)
        self.syncs += 1


@dataclass(slots=True)
class Call:
    """One call a producer made, and what it was answered."""

    id: str
    how: str
    asked: int
    returned: int = -1
    outcome: str = "pending"
    """stored (an item returned), unsynced (`SyncError`: stored), queued (`enqueue`), held
    (`append_or_hold` returned None), published, refused (`StoreError`), invalid
    (`ValueError`), cancelled."""
    seq: int | None = None
    invalid: bool = False


class Scenario:
    """One seed's run: the store, the writer, the producers' calls and what a subscriber saw."""

    def __init__(self, seed: int, mode: Mode) -> None:
        self.rng = random.Random(seed)
        self.mode = mode
        self.store = ChaosStore(random.Random(seed + 1), syncing=self.rng.random() < 0.7)
        self.log = Log(self.store, buffer_size=1_000_000)  # a subscriber that never falls behind
        self.max_held = self.rng.choice([2, 5, 64])
        # Retried at every scheduling step: no clock.
        self.writer = LogWriter(
            self.log, "c", max_held=self.max_held, retry_initial=0.0, retry_maximum=0.0
        )
        self.producers = self.rng.randint(1, 3)
        self.overflowed = False
        self.writer.on_overflow = self._overflow
        self.clock = itertools.count()
        self.calls: list[Call] = []
        self.seen: list[Item | Event] = []
        self.stopped_at: int | None = None

    def _overflow(self) -> None:
        self.overflowed = True

    # -- driving -------------------------------------------------------------------------------

    async def play(self) -> None:
        run_scope = anyio.CancelScope()

        async def run_writer(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            with run_scope:
                await self.writer.run(task_status=task_status)
            if self.mode == "stop":  # what was queued until now may be given up
                self.stopped_at = next(self.clock)

        async with anyio.create_task_group() as tg:
            await tg.start(self.pump)
            if self.mode != "norun":
                await tg.start(run_writer)
            tg.start_soon(self.watch)
            async with anyio.create_task_group() as calls:
                calls.start_soon(self.faults, run_scope)
                for p in range(self.producers):
                    calls.start_soon(self.producer, p, random.Random(self.rng.random()))
            self.check_bounds()
            await self.settle()
            run_scope.cancel()
            await self.caught_up()
            tg.cancel_scope.cancel()
        self.check_bounds()
        assert self.writer.held == 0
        assert self.writer._events_queued == 0
        assert not self.writer.failing

    async def pump(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with self.log.subscribe("c") as sub:
            task_status.started()
            async for entry in sub:
                self.seen.append(entry)

    async def watch(self) -> None:
        """At every step: what is queued is being written, or someone is about to write it."""
        writer = self.writer
        while True:
            await anyio.lowlevel.checkpoint()
            idle = writer._running and not writer._writing and not writer.failing
            # Only what nobody waits for is queued: no caller leads, so run() must be woken.
            if idle and writer._queue and not any(entry.waited for entry in writer._queue):
                assert writer._wakeup.is_set(), f"stalled: {writer.held} queued, run() asleep"

    async def faults(self, run_scope: anyio.CancelScope) -> None:
        stop_at = self.rng.randrange(20) if self.mode == "stop" else None
        for step in range(20):
            roll = self.rng.random()
            if roll < 0.3:
                self.store.failing = not self.store.failing
            elif roll < 0.45:
                self.store.sync_failing = not self.store.sync_failing
            if step == stop_at:
                run_scope.cancel()
            await steps(self.rng.randrange(1, 15))
        self.store.failing = self.store.sync_failing = False

    async def producer(self, p: int, rng: random.Random) -> None:
        """Producer 0 calls as the agent does (its output, its events, now and then a
        permission request); the others as teammates and the host do, often cancelled."""
        hows = ["enqueue", "publish", "append", "append_or_hold", "try_append", "pause"]
        weights = [50, 30, 5, 0, 0, 15] if p == 0 else [5, 5, 30, 20, 25, 15]
        cancels = 0.1 if p == 0 else 0.35
        async with anyio.create_task_group() as tg:
            for n in range(30):
                how = rng.choices(hows, weights)[0]
                if how == "pause":
                    await steps(rng.randrange(10))
                    continue
                call = Call(id=f"p{p}-{n}", how=how, asked=next(self.clock))
                call.invalid = how != "publish" and rng.random() < 0.04
                self.calls.append(call)
                with anyio.CancelScope() as scope:
                    if rng.random() < cancels:
                        tg.start_soon(cancel_after, scope, rng.randrange(8))
                    with anyio.fail_after(WAIT):
                        await self.call(call)
                if call.outcome == "pending":
                    assert scope.cancelled_caught
                    call.outcome = "cancelled"
                call.returned = next(self.clock)
                self.check_bounds()

    async def call(self, call: Call) -> None:
        writer = self.writer
        new = NewItem(type="" if call.invalid else "message", data={"id": call.id}, created_by="a")
        try:
            if call.how == "publish":
                await writer.publish(Event(conversation_id="c", kind="delta", data={"id": call.id}))
                call.outcome = "published"
            elif call.how == "enqueue":
                await writer.enqueue(new)
                call.outcome = "queued"
            elif call.how == "append":
                item = await writer.append(new)
                call.outcome, call.seq = "stored", item.seq
            elif call.how == "append_or_hold":
                held = await writer.append_or_hold(new)
                call.outcome = "held" if held is None else "stored"
                call.seq = None if held is None else held.seq
            else:
                item = await writer.try_append(new)
                call.outcome, call.seq = "stored", item.seq
        except SyncError as exc:
            assert self.mode != "run" or self.stopped_at is not None, "SyncError with run()"
            call.outcome = "unsynced"
            (item,) = exc.items
            call.seq = item.seq
        except StoreError:
            call.outcome = "refused"
        except ValueError:
            assert call.invalid
            call.outcome = "invalid"

    async def settle(self) -> None:
        """The faults are over and the producers done: the queue empties by itself."""
        for _ in range(PATIENCE):
            if not self.writer.held and not self.writer.failing:
                return
            await anyio.lowlevel.checkpoint()
        raise AssertionError(
            f"stuck: {self.writer.held} queued, failing={self.writer.failing}, "
            f"writing={self.writer._writing}"
        )

    async def caught_up(self) -> None:
        with anyio.fail_after(WAIT):
            while len([e for e in self.seen if isinstance(e, Item)]) <= self.store.committed.get(
                "c", -1
            ):
                await anyio.lowlevel.checkpoint()

    def check_bounds(self) -> None:
        writer = self.writer
        queue = writer._queue
        assert writer._events_queued == sum(len(entry.events) for entry in queue)
        assert writer.held == len(queue)
        # What nobody waits for (the agent's output and its events) is bounded by max_held;
        # past it a caller adds at most its own item (and a cancelled caller's item stays only
        # while it is written).
        unwaited = sum(1 for entry in queue if not entry.waited)
        assert unwaited + writer._events_queued <= self.max_held
        writing = sum(1 for entry in queue if entry.writing)
        assert len(queue) + writer._events_queued <= self.max_held + self.producers + writing

    # -- checking ------------------------------------------------------------------------------

    def check(self) -> None:
        items = [e for e in self.seen if isinstance(e, Item)]
        assert [i.seq for i in items] == list(range(len(items)))
        ours = [e for e in self.seen if "id" in e.data]
        position = {e.data["id"]: index for index, e in enumerate(ours)}
        assert len(position) == len(ours), "an item or event was seen twice"
        by_id = {e.data["id"]: e for e in ours}
        asked_ids = {call.id for call in self.calls}
        assert set(position) <= asked_ids
        for call in self.calls:
            seen = call.id in position
            lost_to_stop = self.stopped_at is not None and call.asked < self.stopped_at
            if call.outcome in ("stored", "unsynced"):
                assert seen, f"{call} was acknowledged and lost"
                entry = by_id[call.id]
                assert isinstance(entry, Item), call
                assert entry.seq == call.seq, call
            elif call.outcome == "queued":
                assert seen or lost_to_stop, f"{call} was queued and lost"
            elif call.outcome == "held":
                assert seen or lost_to_stop or self.overflowed, f"{call} was held and lost"
            elif call.outcome == "published":
                assert seen or lost_to_stop, f"{call} was never published"
            elif call.outcome in ("refused", "invalid"):
                assert not seen, f"{call} was refused and stored"
            else:
                assert call.outcome == "cancelled", call
        # In the order asked: what was answered before another call was made comes first, from
        # one producer or several, items and events alike.
        shown = [call for call in self.calls if call.id in position]
        for call in shown:
            for later in shown:
                if later.asked > call.returned:
                    assert position[call.id] < position[later.id], (
                        f"{later} was seen before {call}, answered before it was asked"
                    )


async def cancel_after(scope: anyio.CancelScope, count: int) -> None:
    await steps(count)
    scope.cancel()


@pytest.fixture(autouse=True)
def no_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """A subscriber asks again for a failed sync at once, not 0.25 s later."""
    monkeypatch.setattr(log_module, "SYNC_RETRY", 0.0)


@pytest.mark.parametrize("mode", ["run", "stop", "norun"])
@pytest.mark.parametrize("seed", SEEDS)
async def test_every_interleaving_keeps_order_and_loses_nothing_acknowledged(
    seed: int, mode: Mode, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_module, "MAX_BATCH", random.Random(-seed).choice([1, 3, 256]))
    scenario = Scenario(seed, mode)
    try:
        await scenario.play()
    finally:
        await scenario.log.aclose()
    scenario.check()
