"""The Log: append and publish reach subscribers; snapshot plus live tail exactly once; bounded
buffers; nothing left behind when subscribers leave."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from tunnel.log import (
    ConversationInfo,
    Event,
    Item,
    Log,
    LogClosedError,
    MemoryStore,
    NewItem,
    Store,
    Subscription,
)
from tunnel.log.sqlite import open_host_store
from tunnel.log.store import OnCommit, Order, TypeFilter

from .conftest import StoreFactory
from .counting_store import CountingStore
from .helpers import new, news

pytestmark = pytest.mark.anyio


def seqs(entries: Iterable[Item | Event]) -> list[int | str]:
    """Items as their seq, events as their kind: the order a subscriber saw."""
    return [e.seq if isinstance(e, Item) else e.kind for e in entries]


async def receive_n(sub: Subscription, n: int) -> list[Item | Event]:
    got: list[Item | Event] = []
    with anyio.fail_after(10):
        while len(got) < n:
            got += await sub.receive_batch(n - len(got))
    return got


def event(kind: str = "status", conversation_id: str = "c") -> Event:
    return Event(conversation_id=conversation_id, kind=kind, data={})


async def test_snapshot_then_live_tail_exactly_once(store: Store) -> None:
    async with Log(store) as log:
        await log.append("c", news(5))
        async with log.subscribe("c", after=1) as sub:
            assert sub.head_seq == 4
            await log.append("c", news(2))
            got = await receive_n(sub, 5)
            assert seqs(got) == [2, 3, 4, 5, 6]
            assert all(isinstance(e, Item) and e.data["n"] == e.seq % 5 for e in got[:3])


async def test_after_none_means_everything_and_an_empty_conversation_has_head_minus_one(
    store: Store,
) -> None:
    async with Log(store) as log:
        async with log.subscribe("c") as sub:
            assert sub.head_seq == -1
            await log.append("c", news(3))
            assert seqs(await receive_n(sub, 3)) == [0, 1, 2]
        async with log.subscribe("c", after=None) as sub:
            assert sub.head_seq == 2
            assert seqs(await receive_n(sub, 3)) == [0, 1, 2]


async def test_a_subscriber_ahead_of_the_log_waits_for_seqs_above_after(store: Store) -> None:
    async with Log(store) as log:
        await log.append("c", news(2))
        async with log.subscribe("c", after=4) as sub:
            await log.append("c", news(4))  # seqs 2..5
            assert seqs(await receive_n(sub, 1)) == [5]


async def test_events_arrive_in_order_with_items_and_only_live(store: Store) -> None:
    async with Log(store) as log:
        await log.append("c", news(2))
        await log.publish(event("before"))  # nobody listens yet: gone
        async with log.subscribe("c", after=None) as sub:
            await log.publish(event("e1"))
            await log.append("c", news(1))
            await log.publish(event("e2"))
            await log.publish(event("elsewhere", "other"))
            await log.append("c", [new(), new()])
            got = await receive_n(sub, 7)
            assert seqs(got) == [0, 1, "e1", 2, "e2", 3, 4]


async def test_append_takes_one_item_or_a_sequence(store: Store) -> None:
    async with Log(store) as log:
        (one,) = await log.append("c", new())
        more = await log.append("c", (new(), new()))
        assert [one.seq] + [i.seq for i in more] == [0, 1, 2]
        assert await log.query("c", order="desc", limit=1) == [more[-1]]
        info = await log.get_conversation("c")
        assert info is not None
        assert info.last_seq == 2
        assert [i.conversation_id for i in await log.list_conversations()] == ["c"]
        with pytest.raises(ValueError, match="Event"):
            await log.publish({"kind": "x"})  # type: ignore[arg-type]


async def test_async_iteration_ends_when_the_log_closes(store: Store) -> None:
    log = Log(store)
    await log.append("c", news(2))
    got: list[int | str] = []
    have_both = anyio.Event()
    async with anyio.create_task_group() as tg:

        async def reader() -> None:
            async with log.subscribe("c") as sub:
                async for entry in sub:
                    got.extend(seqs([entry]))
                    if len(got) == 2:
                        have_both.set()
                with pytest.raises(anyio.EndOfStream):
                    await sub.receive()

        tg.start_soon(reader)
        with anyio.fail_after(5):
            await have_both.wait()
        await log.aclose()
    assert got == [0, 1]
    with pytest.raises(LogClosedError):
        await log.append("c", new())
    with pytest.raises(LogClosedError):
        log.subscribe("c")


async def test_one_receiver_at_a_time_and_none_after_leaving(store: Store) -> None:
    async with Log(store) as log:
        async with log.subscribe("c") as sub, anyio.create_task_group() as tg:
            tg.start_soon(sub.receive)
            await anyio.lowlevel.checkpoint()
            with pytest.raises(anyio.BusyResourceError):
                await sub.receive()
            tg.cancel_scope.cancel()
        with pytest.raises(anyio.ClosedResourceError):
            await sub.receive()
        with pytest.raises(RuntimeError, match="only once"):
            async with sub:
                pass
        unentered = log.subscribe("c")
        with pytest.raises(RuntimeError, match="enter"):
            await unentered.receive()
        with pytest.raises(ValueError, match="after"):
            log.subscribe("c", after=-5)
        with pytest.raises(ValueError, match="max_items"):
            async with log.subscribe("c") as sub2:
                await sub2.receive_batch(0)


async def test_no_subscriber_is_left_behind_however_it_leaves(store: Store) -> None:
    async with Log(store) as log:
        await log.append("c", news(3))

        async def normal() -> None:
            async with log.subscribe("c") as sub:
                await receive_n(sub, 3)

        async def errored() -> None:
            async with log.subscribe("c") as sub:
                await sub.receive()
                raise RuntimeError("consumer bug")

        async def cancelled_while_waiting(task_status: Any) -> None:
            async with log.subscribe("c", after=2) as sub:
                task_status.started()
                await sub.receive()  # nothing comes: cancelled here

        await normal()
        with pytest.raises(RuntimeError, match="consumer bug"):
            await errored()
        async with anyio.create_task_group() as tg:
            await tg.start(cancelled_while_waiting)
            assert log.statistics().subscribers == 1
            tg.cancel_scope.cancel()
        with anyio.move_on_after(0):  # cancelled while entering
            async with log.subscribe("c"):
                pytest.fail("entered despite a cancelled scope")  # pragma: no cover
        stats = log.statistics()
        assert stats.subscribers == 0
        assert stats.conversations_watched == 0
        await log.append("c", new())  # pushing to nobody is fine
        await log.publish(event())
        assert log.statistics().subscribers == 0


async def test_a_slow_subscriber_10k_behind_stays_bounded(make_store: StoreFactory) -> None:
    log = Log(make_store(), buffer_size=256, page_size=100)
    async with log:
        for start in range(0, 10_000, 1000):
            await log.append("c", news(1000, start=start))
        async with log.subscribe("c", after=None) as sub:
            assert sub.head_seq == 9_999
            got: list[int] = []
            biggest_buffer = biggest_backlog = 0
            for round_ in range(40):
                # The writer keeps going while the reader takes a little at a time.
                await log.append("c", news(100, start=10_000 + round_ * 100))
                await log.publish(event())
                for _ in range(3):
                    batch = await sub.receive_batch(50)
                    got += [e.seq for e in batch if isinstance(e, Item)]
                    stats = sub.statistics()
                    biggest_buffer = max(biggest_buffer, stats.buffered)
                    biggest_backlog = max(biggest_backlog, stats.backlog)
            assert biggest_buffer <= 256
            assert biggest_backlog <= 100
            assert sub.statistics().overflows >= 1
            assert log.statistics().overflows >= 1
            while len(got) < 14_000:
                batch = await sub.receive_batch(500)
                got += [e.seq for e in batch if isinstance(e, Item)]
                assert sub.statistics().backlog <= 500
            assert got == list(range(14_000))
            # Caught up: live again, events flow again.
            await log.publish(event("fresh"))
            await log.append("c", new())
            assert seqs(await receive_n(sub, 2)) == ["fresh", 14_000]
            assert not sub.statistics().catching_up


async def test_overflow_drops_buffered_events_but_never_items(store: Store) -> None:
    async with Log(store, buffer_size=4, page_size=3) as log, log.subscribe("c") as sub:
        for i in range(10):
            await log.append("c", new(n=i))
            await log.publish(event(f"e{i}"))
        got = await receive_n(sub, 10)
        assert [e for e in seqs(got) if isinstance(e, int)] == list(range(10))
        assert sub.statistics().overflows >= 1


async def test_a_cancelled_receive_consumes_nothing(store: Store) -> None:
    async with Log(store, page_size=2) as log:
        await log.append("c", news(7))
        async with log.subscribe("c") as sub:
            got: list[Item | Event] = []
            appended = False
            with anyio.fail_after(10):
                while len(got) < 9:
                    with anyio.move_on_after(0):
                        got += await sub.receive_batch(3)
                    with anyio.CancelScope() as scope:
                        scope.cancel()
                        got += await sub.receive_batch(3)
                    if len(got) == 7 and not appended:
                        appended = True
                        await log.append("c", news(2))
                    if len(got) < 9:
                        got += await sub.receive_batch(1)
            assert seqs(got) == list(range(9))


class HeldCommitStore:
    """A MemoryStore whose commit callbacks and head reads can be held back, to force the
    orderings a threaded store produces only by chance."""

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.hold_commits = False
        self.held: list[tuple[OnCommit, list[Item]]] = []
        self.hold_heads: anyio.Event | None = None
        self.head_read_waiting = anyio.Event()

    async def append(
        self, conversation_id: str, items: Sequence[NewItem], *, on_commit: OnCommit | None = None
    ) -> list[Item]:
        def commit(stored: list[Item]) -> None:
            if self.hold_commits and on_commit is not None:
                self.held.append((on_commit, stored))
            elif on_commit is not None:
                on_commit(stored)

        return await self.inner.append(conversation_id, items, on_commit=commit)

    def release(self) -> None:
        held, self.held = self.held, []
        for callback, stored in held:
            callback(stored)

    async def get_conversation(self, conversation_id: str) -> ConversationInfo | None:
        info = await self.inner.get_conversation(conversation_id)
        if self.hold_heads is not None:
            self.head_read_waiting.set()
            await self.hold_heads.wait()
        return info

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

    async def list_conversations(self) -> list[ConversationInfo]:
        return await self.inner.list_conversations()

    def close(self) -> None:
        self.inner.close()

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_commit_seen_by_the_head_read_before_its_callback_is_not_duplicated() -> None:
    store = HeldCommitStore()
    async with Log(store) as log:
        await log.append("c", news(2))
        store.hold_commits = True
        await log.append("c", news(2))  # stored (seqs 2, 3) but not yet announced
        async with log.subscribe("c", after=0) as sub:
            assert sub.head_seq == 3
            store.release()  # the late announcement of 2 and 3
            store.hold_commits = False
            await log.append("c", new())
            assert seqs(await receive_n(sub, 4)) == [1, 2, 3, 4]
            with anyio.move_on_after(0.05):
                extra = await sub.receive()
                pytest.fail(f"duplicate delivered: {extra}")  # pragma: no cover


async def test_a_commit_during_the_head_read_is_neither_lost_nor_duplicated() -> None:
    store = HeldCommitStore()
    async with Log(store) as log:
        await log.append("c", news(2))
        store.hold_heads = anyio.Event()
        got: list[int | str] = []
        entered = anyio.Event()
        async with anyio.create_task_group() as tg:

            async def subscriber() -> None:
                async with log.subscribe("c", after=None) as sub:
                    assert sub.head_seq == 3  # the read saw 1, the append during it 3
                    entered.set()
                    got.extend(seqs(await receive_n(sub, 5)))

            tg.start_soon(subscriber)
            with anyio.fail_after(5):
                await store.head_read_waiting.wait()
            assert log.statistics().subscribers == 1
            await log.append("c", news(2))
            store.hold_heads.set()
            with anyio.fail_after(5):
                await entered.wait()
            await log.append("c", new())
        assert got == [0, 1, 2, 3, 4]


async def test_items_written_behind_the_logs_back_are_read_from_the_store() -> None:
    store = MemoryStore()
    async with Log(store) as log:
        await log.append("c", news(1))
        async with log.subscribe("c") as sub:
            await store.append("c", news(2))  # not through the log: no announcement
            await log.append("c", new())  # seq 3 shows a gap before it
            assert seqs(await receive_n(sub, 4)) == [0, 1, 2, 3]


async def test_a_subscription_entering_while_the_log_closes_ends_cleanly() -> None:
    store = HeldCommitStore()
    log = Log(store)
    await log.append("c", news(1))
    store.hold_heads = anyio.Event()
    ended = anyio.Event()

    async def subscriber() -> None:
        async with log.subscribe("c") as sub:
            with pytest.raises(anyio.EndOfStream):
                await sub.receive()
            ended.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(subscriber)
        with anyio.fail_after(5):
            await store.head_read_waiting.wait()
        await log.aclose()
        store.hold_heads.set()
        with anyio.fail_after(5):
            await ended.wait()
    assert log.statistics().subscribers == 0


async def test_last_seq_is_known_in_memory_while_the_conversation_has_a_subscriber(
    tmp_path: Path,
) -> None:
    store = CountingStore(await open_host_store(tmp_path / "log.db"))
    async with Log(store) as log:
        assert await log.last_seq("c") == -1
        await log.append("c", news(3))
        assert await log.last_seq("c") == 2
        assert len(store.reads) == 2  # nobody follows it: read from the store
        async with log.subscribe("c", after=2):
            store.reads.clear()
            assert await log.last_seq("c") == 2
            # Counted once committed; whoever reads the items waits for their sync.
            await log.append("c", news(2), durable=False)
            assert await log.last_seq("c") == 4
            assert store.reads == []
        assert await log.last_seq("c") == 4
        assert store.reads == ["get_conversation('c')"]


async def test_last_seq_counts_items_written_behind_the_logs_back_once_one_of_its_follows() -> None:
    store = MemoryStore()
    async with Log(store) as log:
        await log.append("c", news(1))
        async with log.subscribe("c"):
            await store.append("c", news(2))  # not through the log: no announcement
            assert await log.last_seq("c") == 0
            await log.append("c", new())
            assert await log.last_seq("c") == 3
