"""A bounded join still carries the session's state: the first snapshot page of a fresh join
brings, as `context`, the items from before its tail whose state still holds (the latest
settings, commands and plan, the open permission requests and the tool calls they gate). In
memory, with the channel faked; a resume and a whole-log subscribe get no context."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tunnel.agents import DemoSession
from tunnel.app.entries import SNAPSHOT_PAGE_BYTES
from tunnel.app.host_messages import pack
from tunnel.app.requests import DEFAULT_HISTORY_ITEMS, Subscribe
from tunnel.host.presence import Presence
from tunnel.host.session import CONTEXT_BYTES, SessionChannelHandler
from tunnel.log import Item, Log, MemoryStore, NewItem

from .test_session_history import ScriptedChannel, message_item

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

FILLER = 500


def event(what: str, **data: Any) -> NewItem:
    return NewItem(type="session_event", data={"what": what, **data}, created_by="agent")


def settings(mode: str, **extra: Any) -> NewItem:
    modes = {"current": mode, "available": [{"id": mode, "name": mode, "description": ""}]}
    return event("settings", modes=modes, models=None, config_options=None, **extra)


def commands(*names: str) -> NewItem:
    return event("commands", commands=[{"name": n, "description": n} for n in names])


def tool_call(turn: int, tool_call_id: str) -> NewItem:
    data = {"turn": turn, "tool_call_id": tool_call_id, "title": "edit", "status": "pending"}
    return NewItem(type="tool_call", data=data, created_by="agent")


def permission_request(turn: int, request_id: str, tool_call_id: str) -> NewItem:
    data = {
        "turn": turn,
        "request_id": request_id,
        "title": "Edit notes.txt?",
        "tool_call_id": tool_call_id,
        "options": [{"option_id": "yes", "name": "Yes", "kind": "allow_once"}],
        "tool_call": {"tool_call_id": tool_call_id, "title": "edit"},
    }
    return NewItem(type="permission_request", data=data, created_by="agent")


class WaitingSession(DemoSession):
    """The demo session, with the permission requests it waits on given by the test (the demo
    opens none of its own here: it is not run)."""

    def __init__(self, *, pending: list[Item], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pending = pending

    def pending_permissions(self) -> list[Item]:
        return [item for item in self.pending if item.type == "permission_request"]

    def pending_elicitations(self) -> list[Item]:
        return [item for item in self.pending if item.type == "elicitation_request"]


@contextlib.asynccontextmanager
async def serve(
    channel: ScriptedChannel, log: Log, workspace: Path, pending: list[Item] | None = None
) -> AsyncIterator[None]:
    session = WaitingSession(
        pending=pending or [], log=log, workspace=workspace, conversation_id="c1", delay=0
    )
    handler = SessionChannelHandler(channel, session=session, log=log, presence=Presence())
    async with anyio.create_task_group() as tg:
        tg.start_soon(handler.run)
        yield
        tg.cancel_scope.cancel()


async def log_of(*parts: NewItem | list[NewItem]) -> Log:
    log = Log(MemoryStore())
    items: list[NewItem] = []
    for part in parts:
        items += part if isinstance(part, list) else [part]
    await log.append("c1", items)
    return log


def filler(count: int = FILLER) -> list[NewItem]:
    return [message_item(n) for n in range(count)]


async def join(
    log: Log, workspace: Path, subscribe: Subscribe, pending: list[Item] | None = None
) -> list[dict[str, Any]]:
    """The snapshot pages a teammate gets for `subscribe`."""
    channel = ScriptedChannel()
    async with serve(channel, log, workspace, pending):
        await channel.request(subscribe)
        await channel.wait_for(channel.snapshot_done)
    return channel.of("snapshot")


async def test_a_fresh_join_gets_the_latest_settings_commands_and_plan_from_before_its_tail(
    tmp_path: Path,
) -> None:
    log = await log_of(
        settings("default"),  # 0: superseded by 2
        commands("old"),  # 1: superseded by 4
        settings("plan"),  # 2
        NewItem(type="plan", data={"entries": [{"content": "a"}]}, created_by="agent"),  # 3
        commands("compact", "review"),  # 4
        event("agent_exited"),  # 5: no state
        filler(),
    )
    try:
        pages = await join(log, tmp_path, Subscribe(after=None))
        first = pages[0]
        head = FILLER + 5
        assert first["first_seq"] == head + 1 - DEFAULT_HISTORY_ITEMS
        stored = {item.seq: item.to_wire() for item in await log.query("c1", limit=6)}
        assert first["context"] == [stored[2], stored[3], stored[4]]
        # As context only: the snapshot itself is the tail, every item once, and the later
        # pages carry none.
        seqs = [item["seq"] for page in pages for item in page["items"]]
        assert seqs == list(range(first["first_seq"], head + 1))
        assert all("context" not in page for page in pages[1:])
    finally:
        await log.aclose()


async def test_an_open_permission_request_comes_with_the_tool_call_it_gates(
    tmp_path: Path,
) -> None:
    log = await log_of(
        NewItem(type="message", data={"role": "user", "text": "go"}, created_by="ana"),  # 0
        tool_call(0, "call_1"),  # 1: gated by the open request
        tool_call(0, "call_2"),  # 2
        permission_request(0, "perm_open", "call_1"),  # 3: still open
        permission_request(0, "perm_done", "call_2"),  # 4: answered below
        NewItem(
            type="permission_decision", data={"request_id": "perm_done"}, created_by="ana"
        ),  # 5
        filler(),
    )
    try:
        (request,) = await log.query("c1", after=2, limit=1)
        pages = await join(log, tmp_path, Subscribe(after=None, tail=10), pending=[request])
        context = pages[0]["context"]
        assert [item["seq"] for item in context] == [1, 3]
        assert context[1] == request.to_wire()
        assert [item["seq"] for item in pages[0]["items"]] == list(range(FILLER - 4, FILLER + 6))
    finally:
        await log.aclose()


async def test_an_open_request_in_the_tail_still_brings_its_tool_call_from_before_it(
    tmp_path: Path,
) -> None:
    log = await log_of(
        NewItem(type="message", data={"role": "user", "text": "go"}, created_by="ana"),  # 0
        tool_call(0, "call_1"),  # 1
        tool_call(1, "call_1"),  # 2: another turn's call of the same id
        filler(20),
        permission_request(0, "p", "call_1"),  # 23
    )
    try:
        (request,) = await log.query("c1", after=22, limit=1)
        pages = await join(log, tmp_path, Subscribe(after=None, tail=5), pending=[request])
        # The request is in the snapshot, its card's tool call (of its own turn) is not.
        assert [item["seq"] for item in pages[0]["context"]] == [1]
        assert pages[0]["items"][-1]["seq"] == request.seq
    finally:
        await log.aclose()


async def test_state_inside_the_tail_is_not_repeated_as_context(tmp_path: Path) -> None:
    log = await log_of(commands("a"), filler(), settings("plan"), filler(10))
    try:
        pages = await join(log, tmp_path, Subscribe(after=None))
        # The settings are among the items sent; only the commands come from before them.
        assert [item["seq"] for item in pages[0]["context"]] == [0]
        # A join that reaches seq 0 has nothing before it to carry.
        whole = await join(log, tmp_path, Subscribe(after=None, tail=10_000))
        assert "context" not in whole[0]
    finally:
        await log.aclose()


@pytest.mark.parametrize("subscribe", [Subscribe(after=-1), Subscribe(after=300)])
async def test_a_resume_or_a_whole_log_subscribe_gets_no_context(
    tmp_path: Path, subscribe: Subscribe
) -> None:
    log = await log_of(settings("plan"), commands("review"), filler())
    try:
        pages = await join(log, tmp_path, subscribe)
        assert all("context" not in page for page in pages)
        seqs = [item["seq"] for page in pages for item in page["items"]]
        assert subscribe.after is not None
        assert seqs == list(range(subscribe.after + 1, FILLER + 2))
    finally:
        await log.aclose()


async def test_a_tail_of_nothing_still_gets_the_state(tmp_path: Path) -> None:
    log = await log_of(settings("plan"), commands("review"), filler(3))
    try:
        (page,) = await join(log, tmp_path, Subscribe(after=None, tail=0))
        assert page["items"] == []
        assert [item["seq"] for item in page["context"]] == [0, 1]
    finally:
        await log.aclose()


async def test_large_state_items_keep_the_first_page_within_one_message(tmp_path: Path) -> None:
    # Each settings item alone fits the context's share of the page, both together do not; the
    # newest is kept, and an item too large for the share is never cut into a note.
    big = "x" * (CONTEXT_BYTES * 2 // 3)
    log = await log_of(
        event("commands", commands=[{"name": "huge", "description": ""}], padding=big),
        settings("plan", padding=big),
        NewItem(type="plan", data={"entries": [], "pad": "y" * CONTEXT_BYTES}, created_by="agent"),
        [message_item(n, size=3000) for n in range(400)],
    )
    try:
        pages = await join(log, tmp_path, Subscribe(after=None))
        first = pages[0]
        assert [item["seq"] for item in first["context"]] == [1]
        assert first["context"][0]["data"]["padding"] == big
        assert len(pack(first)) <= SNAPSHOT_PAGE_BYTES + 1024
        seqs = [item["seq"] for page in pages for item in page["items"]]
        assert seqs == list(range(first["first_seq"], 403))
    finally:
        await log.aclose()


async def test_the_latest_usage_and_an_open_question_come_as_context(tmp_path: Path) -> None:
    asked = {"request_id": "ask_1", "message": "Which?", "fields": []}
    log = await log_of(
        event("usage", used=1000, size=9000, cost=None),  # 0: superseded by 1
        event("usage", used=5000, size=9000, cost=None),  # 1
        NewItem(type="elicitation_request", data=asked, created_by="agent"),  # 2: open
        filler(),
    )
    try:
        (question,) = await log.query("c1", after=1, limit=1)
        pages = await join(log, tmp_path, Subscribe(after=None, tail=5), pending=[question])
        assert [item["seq"] for item in pages[0]["context"]] == [1, 2]
    finally:
        await log.aclose()
