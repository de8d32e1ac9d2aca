"""A log that cannot be written pauses the session, never ends it: appends are held and retried,
prompts refused, everyone told, and nothing acknowledged lost. The fault is injected at the
store's boundary (`FaultyStore`); tests/host/test_faults.py makes a real one."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

import tunnel.agents.writer as writer_module
from tunnel.agents import AcpSession, DemoSession, SessionError
from tunnel.agents.writer import OUTAGE_EVENT, STORAGE_EVENT, LogWriter
from tunnel.log import Event, Item, Log, NewItem, StoreError
from tunnel.log.sqlite import open_host_store

from ..log.test_sync import GatedSyncStore
from .conftest import Recording, running
from .faulty_store import FaultyStore

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

FAKE_AGENT = Path(__file__).with_name("fake_acp_agent.py")


@pytest.fixture
def store() -> FaultyStore:
    return FaultyStore()


@pytest.fixture
async def log(store: FaultyStore) -> AsyncIterator[Log]:
    the_log = Log(store)
    try:
        yield the_log
    finally:
        await the_log.aclose()


def new(text: str, by: str = "agent") -> NewItem:
    return NewItem(type="message", data={"role": "agent", "text": text}, created_by=by)


def quick(writer: LogWriter) -> LogWriter:
    """Retry every few milliseconds: the tests wait for the log, not for the backoff."""
    writer._retry_initial, writer._retry_maximum = 0.01, 0.05
    return writer


def storage_events(rec: Recording) -> list[dict[str, object]]:
    return [e.data for e in rec.events if e.kind == STORAGE_EVENT]


async def test_a_failed_append_waits_and_is_stored_in_order_when_the_log_writes_again(
    log: Log, store: FaultyStore
) -> None:
    writer = quick(LogWriter(log, "c"))
    rec = Recording(log, "c")
    stored: list[str] = []
    async with anyio.create_task_group() as tg:
        await tg.start(rec.pump)
        await tg.start(writer.run)
        await writer.append(new("before"))
        store.failing = True

        async def waiter() -> None:
            item = await writer.append(new("first"))
            stored.append(item.data["text"])

        tg.start_soon(waiter)
        await rec.wait_until(lambda: writer.failing and writer.held == 1)
        # Held, not waited for: the caller goes on at once.
        assert await writer.append_or_hold(new("second", by="host")) is None
        assert writer.held == 2
        state = writer.state()
        assert state is not None
        assert (state["state"], state["reason"]) == ("failing", "database or disk is full")
        await rec.wait_until(lambda: store.failures >= 3)  # retried, with backoff
        assert stored == []
        store.failing = False
        await rec.wait_until(lambda: any(e["state"] == "ok" for e in storage_events(rec)))
        assert stored == ["first"]
        assert not writer.failing
        assert writer.state() is None
        tg.cancel_scope.cancel()
    texts = [(i.type, i.data.get("text") or i.data.get("what")) for i in rec.items]
    assert texts == [
        ("message", "before"),
        ("session_event", OUTAGE_EVENT),
        ("message", "first"),
        ("message", "second"),
    ]
    record = rec.items[1]
    assert record.created_by == "host"
    assert record.data["held"] == 2
    assert record.data["dropped"] == 0
    assert record.data["reason"] == "database or disk is full"
    assert record.data["attempts"] >= 3
    # When it happened: the outage's start, and each held item's own moment.
    assert rec.items[0].created_at <= record.created_at <= rec.items[2].created_at
    events = storage_events(rec)
    assert events[0]["state"] == "failing"
    assert events[-1]["state"] == "ok"
    assert events[-1]["held"] == 2


async def test_an_item_committed_whose_sync_fails_is_stored_once() -> None:
    store = GatedSyncStore()
    async with Log(store) as log:
        writer = quick(LogWriter(log, "c"))
        async with anyio.create_task_group() as tg:
            await tg.start(writer.run)
            store.failures = 1_000  # every fsync fails (an I/O error), until told otherwise
            # Committed, its sync failed: not kept to be appended again.
            assert await writer.append_or_hold(new("decided", by="host")) is None
            assert writer.failing
            assert writer.held == 0
            assert await writer.append_or_hold(new("noted", by="host")) is None
            with anyio.fail_after(10):
                while store.failures > 996:  # retried: the outage's record and "noted" commit
                    await anyio.sleep(0.01)
            assert writer.failing
            store.failures = 0
            with anyio.fail_after(10):
                while writer.failing:
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
        items = await store.inner.query("c")
        assert [i.data.get("text") or i.data["what"] for i in items] == [
            "decided",
            OUTAGE_EVENT,
            "noted",
        ]
        assert store.synced_head("c") is None  # all synced now


async def test_a_prompt_committed_whose_sync_fails_is_accepted_once_synced() -> None:
    store = GatedSyncStore()
    async with Log(store) as log:
        writer = quick(LogWriter(log, "c"))
        async with anyio.create_task_group() as tg:
            await tg.start(writer.run)
            store.failures = 3
            with anyio.fail_after(10):
                item = await writer.try_append(new("a prompt", by="alice"))
            assert store.synced("c", item.seq)  # returned only once synced
            tg.cancel_scope.cancel()
        items = await store.inner.query("c")
        assert [i.data.get("text") or i.data["what"] for i in items] == ["a prompt", OUTAGE_EVENT]
        assert items[0].seq == item.seq


async def test_without_run_a_failed_append_raises_as_the_log_does(
    log: Log, store: FaultyStore
) -> None:
    writer = LogWriter(log, "c")
    store.fail_next = 1
    with pytest.raises(StoreError):
        await writer.append(new("x"))
    assert not writer.failing
    assert (await writer.append(new("y"))).seq == 0


async def test_a_waiter_cancelled_while_held_leaves_nothing_behind(
    log: Log, store: FaultyStore
) -> None:
    writer = quick(LogWriter(log, "c"))
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        store.failing = True
        with anyio.move_on_after(0.2):
            await writer.append(new("abandoned"))
        assert writer.held == 0
        store.failing = False
        with anyio.fail_after(5):
            while writer.failing:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    items = await log.query("c")
    assert [i.data["what"] for i in items] == [OUTAGE_EVENT]


async def test_past_the_bound_output_is_dropped_counted_and_the_turn_cancelled_once(
    log: Log, store: FaultyStore
) -> None:
    writer = quick(LogWriter(log, "c", max_held=3))
    overflows: list[int] = []
    writer.on_overflow = lambda: overflows.append(writer.held)
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        store.failing = True
        for n in range(5):
            await writer.append_or_hold(new(f"n{n}"))
        with writer.admitting() as admitted:
            assert not admitted
        assert writer.held == 3
        assert overflows == [3]
        store.failing = False
        with anyio.fail_after(5):
            while writer.failing:
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    items = await log.query("c")
    assert [i.data.get("text") for i in items[1:]] == ["n0", "n1", "n2"]
    record = items[0].data
    assert (record["held"], record["dropped"], record["turn_cancelled"]) == (3, 3, True)


async def test_an_invalid_item_is_refused_at_once_never_held(log: Log, store: FaultyStore) -> None:
    writer = quick(LogWriter(log, "c"))
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        store.failing = True
        await writer.append_or_hold(new("held"))
        with pytest.raises(ValueError, match="surrogate"):
            await writer.append_or_hold(new("\ud800"))
        assert writer.held == 1
        tg.cancel_scope.cancel()


def demo(log: Log, workspace: Path) -> DemoSession:
    session = DemoSession(log=log, workspace=workspace, conversation_id="c1", delay=0)
    quick(session._recorder.writer)
    return session


async def test_prompts_are_refused_while_the_log_cannot_be_written_and_accepted_after(
    log: Log, store: FaultyStore, workspace: Path
) -> None:
    session = demo(log, workspace)
    async with running(session, log) as rec:
        store.failing = True
        with pytest.raises(SessionError) as refused:
            await session.prompt("hello", by="alice")
        assert refused.value.code == "agent_unavailable"
        assert "the prompt was not stored" in refused.value.message
        # Everyone was told; the next prompt is refused before anything is tried.
        await rec.wait_until(lambda: any(e["state"] == "failing" for e in storage_events(rec)))
        with pytest.raises(SessionError, match="the log cannot be written"):
            await session.prompt("again", by="bob")
        assert session.storage() is not None
        store.failing = False
        await rec.wait_until(lambda: any(e["state"] == "ok" for e in storage_events(rec)))
        assert session.storage() is None
        await session.prompt("now", by="alice")
        await rec.wait_item("permission_request")
    prompts = [i.data["text"] for i in rec.of_type("message") if i.data["role"] == "user"]
    assert prompts == ["now"]  # nothing refused was recorded
    whats = [i.data["what"] for i in rec.of_type("session_event")]
    assert whats == [OUTAGE_EVENT]


async def test_the_running_turn_pauses_while_the_log_fails_and_finishes_after(
    log: Log, store: FaultyStore, workspace: Path
) -> None:
    (workspace / "README.md").write_text("one\ntwo\n")
    session = demo(log, workspace)
    async with running(session, log) as rec:
        await session.prompt("count", by="alice")
        request = await rec.wait_item("permission_request")
        store.failing = True
        # Answered as the log fails: the decision is held, the tool runs, its items wait.
        await session.answer_permission(request.data["request_id"], "allow_once", by="bob")
        await rec.wait_until(lambda: session._recorder.writer.held >= 2)
        with pytest.raises(SessionError, match="the log cannot be written"):
            await session.answer_permission(request.data["request_id"], "allow_once", by="c")
        assert not rec.of_type("tool_result")
        store.failing = False
        await rec.wait_item("tool_result")
        await rec.wait_idle()
    types = [i.type for i in rec.items]
    start = types.index("session_event")
    assert types[start:] == [
        "session_event",
        "permission_decision",
        "tool_call_update",
        "tool_call_update",
        "tool_result",
        "plan",
        "message",
        "plan",
    ]
    decision = rec.of_type("permission_decision")[0]
    assert (decision.data["outcome"], decision.created_by) == ("selected", "bob")
    seqs = [i.seq for i in rec.items]
    assert seqs == list(range(len(seqs)))


async def test_an_agent_flooding_a_log_that_cannot_be_written_has_its_turn_cancelled(
    log: Log, store: FaultyStore, workspace: Path
) -> None:
    session = AcpSession(
        argv=[sys.executable, str(FAKE_AGENT)],
        log=log,
        workspace=workspace,
        conversation_id="c1",
    )
    writer = quick(session._recorder.writer)
    writer.max_held = 20
    async with running(session, log) as rec:
        await session.prompt("wait", by="alice")
        await rec.wait_until(lambda: any(e.kind == "delta" for e in rec.events))
        store.failing = True
        # The stream is stored in parts: force one, so the recorder needs the log.
        session._recorder._stream.started -= 3600  # type: ignore[union-attr]
        await rec.wait_until(
            lambda: any(
                isinstance(e, Event) and e.kind == STORAGE_EVENT and e.data["state"] == "failing"
                for e in rec.events
            )
        )
        with anyio.fail_after(20):
            while not writer._outage or not writer._outage.turn_cancelled:  # type: ignore[union-attr]
                await anyio.sleep(0.02)
        store.failing = False
        await rec.wait_idle()
    record = next(i for i in rec.of_type("session_event") if i.data["what"] == OUTAGE_EVENT)
    assert record.data["turn_cancelled"] is True
    assert record.data["dropped"] > 0


# -- the queue: the agent's output committed in groups, in order --------------------------------


async def test_the_agents_output_is_committed_in_groups_in_order_in_the_hosts_sqlite_log(
    tmp_path: Path,
) -> None:
    store = await open_host_store(tmp_path / "log.db")
    async with Log(store) as log:
        writer = LogWriter(log, "c")
        rec = Recording(log, "c")
        async with anyio.create_task_group() as tg:
            await tg.start(rec.pump)
            await tg.start(writer.run)
            for n in range(200):
                await writer.enqueue(new(f"item {n}"))
            assert writer.held > 0  # queued, not waited for: the disk is slower than this loop
            await rec.wait_until(lambda: len(rec.items) == 200)
            tg.cancel_scope.cancel()
        assert [i.data["text"] for i in rec.items] == [f"item {n}" for n in range(200)]
        assert [i.seq for i in rec.items] == list(range(200))
        # One transaction per item before; now the items that queued up share one.
        assert store.statistics().transactions < 20


async def test_an_event_goes_out_after_the_items_queued_before_it_never_before() -> None:
    store = GatedSyncStore()
    async with Log(store) as log:
        writer = LogWriter(log, "c")
        rec = Recording(log, "c")
        async with anyio.create_task_group() as tg:
            await tg.start(rec.pump)
            await tg.start(writer.run)
            for n in range(3):
                await writer.enqueue(new(f"a{n}"))
                await writer.publish(Event(conversation_id="c", kind="delta", data={"n": n}))
            await writer.enqueue(new("last"))
            await rec.wait_until(lambda: len(rec.entries) == 7)
            tg.cancel_scope.cancel()
    assert [e.data["text"] if isinstance(e, Item) else e.data["n"] for e in rec.entries] == [
        "a0", 0, "a1", 1, "a2", 2, "last",
    ]  # fmt: skip


async def test_a_caller_has_its_item_before_a_subscriber_sees_it_even_behind_queued_output(
    tmp_path: Path,
) -> None:
    store = await open_host_store(tmp_path / "log.db")
    async with Log(store) as log:
        writer = LogWriter(log, "c")
        returned: list[int] = []
        seen_before_return: list[bool] = []

        async def watch(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            async with log.subscribe("c") as sub:
                task_status.started()
                async for entry in sub:
                    if isinstance(entry, Item) and entry.type == "permission_request":
                        seen_before_return.append(entry.seq not in returned)
                        return

        async with anyio.create_task_group() as tg:
            await tg.start(watch)
            await tg.start(writer.run)
            for n in range(50):
                await writer.enqueue(new(f"output {n}"))
            item = await writer.append(
                NewItem(type="permission_request", data={"request_id": "r"}, created_by="agent")
            )
            returned.append(item.seq)
            assert item.seq == 50  # after every item queued before it
            with anyio.fail_after(10):
                while not seen_before_return:
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
        assert seen_before_return == [False]


async def test_a_stopping_session_stores_what_its_agent_said_before_it_stopped(
    tmp_path: Path,
) -> None:
    store = await open_host_store(tmp_path / "log.db")
    async with Log(store) as log:
        writer = LogWriter(log, "c")
        async with anyio.create_task_group() as tg:
            await tg.start(writer.run)
            for n in range(100):
                await writer.enqueue(new(f"item {n}"))
            tg.cancel_scope.cancel()  # the session stops with output still queued
        assert writer.held == 0
        items = await log.query("c", limit=1000)
    assert [i.data["text"] for i in items] == [f"item {n}" for n in range(100)]


async def test_enqueue_waits_for_room_past_the_bound_and_refuses_an_invalid_item_at_once() -> None:
    store = GatedSyncStore()
    async with Log(store) as log:
        writer = LogWriter(log, "c", max_held=4)
        slow = anyio.Event()
        inner_append = store.append

        async def gated_append(*args: object, **kwargs: object) -> list[Item]:
            await slow.wait()
            return await inner_append(*args, **kwargs)  # type: ignore[arg-type]

        store.append = gated_append  # type: ignore[method-assign]
        queued = 0
        async with anyio.create_task_group() as tg:
            await tg.start(writer.run)

            async def producer() -> None:
                nonlocal queued
                for n in range(10):
                    await writer.enqueue(new(f"item {n}"))
                    queued += 1

            tg.start_soon(producer)
            with anyio.fail_after(10):
                while queued < 4:
                    await anyio.sleep(0.01)
            await anyio.sleep(0.05)
            assert queued == 4  # the bound: the producer waits while the log is slow
            assert writer.held == 4
            with pytest.raises(ValueError, match="type"):
                await writer.enqueue(NewItem(type="", data={}, created_by="agent"))
            slow.set()
            with anyio.fail_after(10):
                while queued < 10 or writer.held:
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
        items = await store.inner.query("c")
    assert [i.data["text"] for i in items] == [f"item {n}" for n in range(10)]


async def test_output_queued_while_the_log_fails_is_stored_in_order_with_its_events_after(
    log: Log, store: FaultyStore
) -> None:
    writer = quick(LogWriter(log, "c"))
    rec = Recording(log, "c")
    async with anyio.create_task_group() as tg:
        await tg.start(rec.pump)
        await tg.start(writer.run)
        store.failing = True
        await writer.enqueue(new("first"))
        await writer.publish(Event(conversation_id="c", kind="delta", data={"n": 1}))
        await writer.enqueue(new("second"))
        await rec.wait_until(lambda: writer.failing and store.failures >= 2)
        assert [e for e in rec.entries if not isinstance(e, Event) or e.kind == "delta"] == []
        store.failing = False
        await rec.wait_until(lambda: not writer.failing and len(rec.items) == 3)
        tg.cancel_scope.cancel()
    shown = [
        e.data.get("text") or e.data.get("what") if isinstance(e, Item) else e.data.get("n")
        for e in rec.entries
        if isinstance(e, Item) or e.kind == "delta"
    ]
    assert shown == [OUTAGE_EVENT, "first", 1, "second"]


# -- interleavings: each found by tests/agents/test_writer_interleavings.py ---------------------


@dataclass(slots=True)
class HeldAppend:
    """One of the store's appends, held: `entered` once it is under way, until `release`."""

    entered: anyio.Event = field(default_factory=anyio.Event)
    release: anyio.Event = field(default_factory=anyio.Event)


def hold_append(store: FaultyStore | GatedSyncStore, nth: int = 1) -> HeldAppend:
    """Hold the store's `nth` append from now on (its items are looked at once released)."""
    held = HeldAppend()
    inner = store.append
    count = 0

    async def append(*args: Any, **kwargs: Any) -> list[Item]:
        nonlocal count
        count += 1
        if count == nth:
            held.entered.set()
            await held.release.wait()
        return await inner(*args, **kwargs)

    store.append = append  # type: ignore[method-assign]
    return held


async def until(condition: Callable[[], bool]) -> None:
    with anyio.fail_after(10):
        while not condition():
            await anyio.sleep(0)


async def test_output_queued_behind_a_caller_cancelled_in_the_queue_is_still_written() -> None:
    store = GatedSyncStore()
    async with Log(store) as log:
        writer = LogWriter(log, "c")
        held = hold_append(store)
        async with anyio.create_task_group() as tg:
            await tg.start(writer.run)
            await writer.enqueue(new("output 0"))
            await held.entered.wait()  # run() writes it
            asking = anyio.CancelScope()

            async def request() -> None:
                with asking:
                    await writer.append(new("a request"))

            tg.start_soon(request)
            await until(lambda: writer.held == 2)
            # Behind the request: its caller would write it with its own item.
            await writer.enqueue(new("output 1"))
            held.release.set()
            # run() stored "output 0" and left the request to its caller, who is gone before
            # it could write: run() writes what was behind it.
            await anyio.sleep(0)
            asking.cancel()
            await until(lambda: writer.held == 0)
            tg.cancel_scope.cancel()
        items = await store.inner.query("c")
    assert [i.data["text"] for i in items] == ["output 0", "output 1"]


async def test_a_prompt_queued_as_a_failed_sync_pauses_the_session_is_refused_not_stored() -> None:
    store = GatedSyncStore()
    async with Log(store) as log:
        writer = quick(LogWriter(log, "c"))
        answers: dict[str, object] = {}
        async with anyio.create_task_group() as tg:
            await tg.start(writer.run)
            held = hold_append(store, 2)
            store.gate, store.failures = anyio.Event(), 1

            async def decision() -> None:  # committed; its sync waits for the gate, and fails
                answers["decision"] = await writer.append_or_hold(new("decided", by="host"))

            async def request() -> None:  # its write waits for `held`
                answers["request"] = (await writer.append(new("a request"))).seq

            async def prompt() -> None:  # queued behind the request
                try:
                    answers["prompt"] = await writer.try_append(new("a prompt", by="alice"))
                except StoreError as exc:
                    answers["prompt"] = exc

            tg.start_soon(decision)
            await until(lambda: store.committed.get("c") == 0)
            tg.start_soon(request)
            await held.entered.wait()
            tg.start_soon(prompt)
            await until(lambda: writer.held == 2)
            store.gate.set()
            await until(lambda: writer.failing)
            store.gate = None
            held.release.set()
            await until(lambda: len(answers) == 3 and not writer.failing)
            tg.cancel_scope.cancel()
        assert isinstance(answers["prompt"], StoreError)  # refused: the sender is told
        assert answers["decision"] is None
        assert answers["request"] == 1
        items = await store.inner.query("c")
    assert [i.data.get("text") or i.data["what"] for i in items] == [
        "decided",
        "a request",
        OUTAGE_EVENT,
    ]


async def test_an_event_after_a_refused_prompt_waits_for_the_items_queued_before_the_prompt(
    log: Log, store: FaultyStore
) -> None:
    writer = quick(LogWriter(log, "c"))
    rec = Recording(log, "c")
    async with anyio.create_task_group() as tg:
        await tg.start(rec.pump)
        await tg.start(writer.run)
        held = hold_append(store)

        async def request() -> None:
            await writer.append(new("a request"))

        async def prompt() -> None:
            with pytest.raises(StoreError):
                await writer.try_append(new("a prompt", by="alice"))

        tg.start_soon(request)
        await held.entered.wait()
        await writer.enqueue(new("output"))
        tg.start_soon(prompt)
        await until(lambda: writer.held == 3)
        await writer.publish(Event(conversation_id="c", kind="delta", data={"n": 1}))
        store.fail_next = 1  # the request's write fails: the prompt is refused, the rest held
        held.release.set()
        await rec.wait_until(lambda: any(e.kind == "delta" for e in rec.events))
        await rec.wait_until(lambda: not writer.failing)
        tg.cancel_scope.cancel()
    shown = [
        e.data.get("text") or e.data.get("what") if isinstance(e, Item) else e.data.get("n")
        for e in rec.entries
        if isinstance(e, Item) or e.kind == "delta"
    ]
    assert shown == [OUTAGE_EVENT, "a request", "output", 1]


async def test_an_invalid_item_is_refused_at_once_even_when_its_write_would_fail(
    log: Log, store: FaultyStore
) -> None:
    writer = quick(LogWriter(log, "c"))
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        store.failing = True
        with pytest.raises(ValueError, match="type"):
            await writer.append_or_hold(NewItem(type="", data={}, created_by="host"))
        assert not writer.failing  # never held, so never retried (which would end run())
        store.failing = False
        assert (await writer.append(new("next"))).seq == 0
        tg.cancel_scope.cancel()


async def test_output_waiting_for_room_when_the_session_stops_is_appended_as_without_run(
    log: Log, store: FaultyStore
) -> None:
    writer = quick(LogWriter(log, "c", max_held=2))
    outcome: list[BaseException | None] = []
    async with anyio.create_task_group() as outer:
        async with anyio.create_task_group() as tg:
            await tg.start(writer.run)
            store.failing = True

            async def agent() -> None:
                try:
                    for n in range(3):
                        await writer.enqueue(new(f"output {n}"))
                except StoreError as exc:
                    outcome.append(exc)
                else:
                    outcome.append(None)

            outer.start_soon(agent)
            await until(lambda: writer.failing and writer.held == 2)  # the agent waits
            tg.cancel_scope.cancel()  # the session stops: the two held are given up
        await until(lambda: bool(outcome))
    # Nothing writes it later: appended at once, it fails as `Log.append` does.
    assert isinstance(outcome[0], StoreError)
    assert writer.held == 0
    assert await log.query("c") == []


async def test_a_caller_whose_write_is_under_way_as_the_session_stops_gets_its_item(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(writer_module, "STOP_DRAIN_TIMEOUT", 0.01)
    store = GatedSyncStore()
    async with Log(store) as log:
        writer = LogWriter(log, "c")
        held = hold_append(store)
        answers: list[Item] = []
        async with anyio.create_task_group() as outer:

            async def request() -> None:
                answers.append(await writer.append(new("a request")))

            async with anyio.create_task_group() as tg:
                await tg.start(writer.run)
                outer.start_soon(request)
                await held.entered.wait()
                tg.cancel_scope.cancel()  # run() stops, and gives up before the write ends
            held.release.set()
        assert [i.seq for i in answers] == [0]  # not told it was not stored
        assert writer.held == 0
        items = await store.inner.query("c")
    assert [i.data["text"] for i in items] == ["a request"]


async def test_items_a_retry_committed_are_answered_before_its_sync_and_if_the_session_stops() -> (
    None
):
    store = GatedSyncStore()
    async with Log(store) as log:
        writer = quick(LogWriter(log, "c"))
        answers: list[int] = []
        async with anyio.create_task_group() as tg:
            await tg.start(writer.run)
            store.failures = 1
            assert await writer.append_or_hold(new("decided", by="host")) is None  # unsynced

            async def request() -> None:
                answers.append((await writer.append(new("a request"))).seq)

            store.gate = gate = anyio.Event()  # the retry's sync waits
            tg.start_soon(request)
            await until(lambda: bool(answers))  # committed by the retry: answered
            assert writer.failing
            tg.cancel_scope.cancel()  # the session stops during the retry's sync
        gate.set()
        assert answers == [2]
        items = await store.inner.query("c")
    assert [i.data.get("text") or i.data["what"] for i in items] == [
        "decided",
        OUTAGE_EVENT,
        "a request",
    ]


async def test_events_queued_count_against_the_bound_on_what_is_held(
    log: Log, store: FaultyStore
) -> None:
    writer = quick(LogWriter(log, "c", max_held=3))
    overflows: list[int] = []
    writer.on_overflow = lambda: overflows.append(writer.held)
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        store.failing = True
        await writer.enqueue(new("output"))
        await until(lambda: writer.failing)
        for n in range(2):
            await writer.publish(Event(conversation_id="c", kind="delta", data={"n": n}))
        # One item and two events wait: the bound.
        assert await writer.append_or_hold(new("a note", by="host")) is None
        assert writer.held == 1  # dropped, counted
        with writer.admitting() as admitted:
            assert not admitted
        assert overflows == [1]
        store.failing = False
        await until(lambda: not writer.failing)
        tg.cancel_scope.cancel()
    items = await log.query("c")
    assert [i.data.get("text") for i in items[1:]] == ["output"]
    assert items[0].data["dropped"] == 2
