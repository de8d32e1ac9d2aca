"""A session that starts after a host stopped mid-turn closes what that host left open; a stream
is stored in parts as it goes, so a crash loses a bounded tail. tests/host/test_faults.py kills a
real host; here the log a kill leaves is copied into a fresh store, which is the same thing."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from tunnel.agents import DemoSession, Recorder
from tunnel.agents import recorder as recorder_module
from tunnel.agents.recovery import (
    FORKED,
    INTERRUPTED,
    RESTART_EVENT,
    Interrupted,
    closing_items,
    find_interrupted,
)
from tunnel.log import Item, Log, MemoryStore

from .conftest import running

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

NOW = datetime(2025, 1, 1, tzinfo=UTC)


def items(*specs: tuple[str, str, dict[str, Any]]) -> list[Item]:
    """Stored items from (type, created_by, data), numbered from 0."""
    return [
        Item(
            conversation_id="c",
            seq=seq,
            type=type_,
            status=None,
            response_id=data.pop("response_id", None),
            created_at=NOW,
            created_by=by,
            data=data,
        )
        for seq, (type_, by, data) in enumerate(specs)
    ]


def newest_first(stored: Sequence[Item]) -> list[Item]:
    return list(reversed(stored))


def prompt(text: str) -> tuple[str, str, dict[str, Any]]:
    return ("message", "alice", {"role": "user", "text": text})


def test_a_turn_killed_at_its_permission_request_is_closed_and_queued_prompts_dropped() -> None:
    log = items(
        prompt("one"),  # 0
        ("message", "agent", {"role": "agent", "text": "hi", "turn": 0}),
        ("tool_call", "agent", {"tool_call_id": "t1", "status": "pending", "turn": 0}),
        ("permission_request", "agent", {"request_id": "p1", "turn": 0, "options": []}),
        prompt("two"),  # 4
        prompt("three"),  # 5
    )
    found = find_interrupted(newest_first(log))
    assert [i.seq for i in found.permissions] == [3]
    assert [i.seq for i in found.tool_calls] == [2]
    assert (found.turn, found.dropped, found.partial) == (0, (4, 5), False)
    closing = closing_items(found)
    assert [c.type for c in closing] == ["permission_decision", "tool_call_update", "session_event"]
    decision, update, summary = (c.data for c in closing)
    assert decision == {
        "request_id": "p1",
        "option_id": "",
        "option_name": "Cancelled",
        "option_kind": "",
        "outcome": "cancelled",
        "reason": INTERRUPTED,
        "turn": 0,
    }
    assert update == {"tool_call_id": "t1", "status": "failed", "turn": 0, "reason": INTERRUPTED}
    assert summary == {
        "what": RESTART_EVENT,
        "reason": INTERRUPTED,
        "interrupted_turn": 0,
        "dropped_prompts": [4, 5],
        "closed_permissions": ["p1"],
        "closed_questions": [],
        "closed_tool_calls": ["t1"],
        "partial_text": False,
    }
    assert all(c.created_by == "host" for c in closing)


def test_what_a_forks_copy_holds_open_is_closed_as_left_at_the_fork_not_as_a_restart() -> None:
    copied = [
        prompt("one"),  # 0
        ("tool_call", "agent", {"tool_call_id": "t1", "status": "pending", "turn": 0}),
        ("permission_request", "agent", {"request_id": "p1", "turn": 0, "options": []}),
    ]
    fork = ("session_event", "ann", {"what": "session_fork", "from": "main", "upto": 2})
    found = find_interrupted(newest_first(items(*copied, fork)))
    assert found.forked
    assert [i.seq for i in found.permissions] == [2]
    reasons = {c.data["reason"] for c in closing_items(found)}
    assert reasons == {FORKED}
    # The source records the fork too (`to`): that is no boundary of its own.
    told = ("session_event", "ann", {"what": "session_fork", "to": "c-1", "upto": 2})
    found = find_interrupted(newest_first(items(*copied, told)))
    assert not found.forked
    assert {c.data["reason"] for c in closing_items(found)} == {INTERRUPTED}
    # A fork that ran and was then killed: what it left open is a restart's.
    ran = items(*copied, fork, prompt("two"))
    assert not find_interrupted(newest_first(ran)).forked


def test_a_question_left_open_is_cancelled_and_an_answered_one_is_not() -> None:
    log = items(
        prompt("one"),  # 0
        ("elicitation_request", "agent", {"request_id": "q1", "turn": 0, "fields": []}),
        ("elicitation_response", "bob", {"request_id": "q1", "action": "decline"}),
        ("elicitation_request", "agent", {"request_id": "q2", "turn": 0, "fields": []}),
    )
    found = find_interrupted(newest_first(log))
    assert ([i.seq for i in found.questions], found.turn) == ([3], 0)
    closing = closing_items(found)
    assert [(c.type, c.created_by, c.data) for c in closing[:1]] == [
        (
            "elicitation_response",
            "host",
            {"request_id": "q2", "action": "cancel", "reason": INTERRUPTED},
        )
    ]
    assert closing[-1].data["closed_questions"] == ["q2"]


def test_a_conversation_that_ended_cleanly_has_nothing_to_close() -> None:
    log = items(
        prompt("one"),
        ("tool_call", "agent", {"tool_call_id": "t1", "status": "pending", "turn": 0}),
        ("permission_request", "agent", {"request_id": "p1", "turn": 0}),
        ("permission_decision", "bob", {"request_id": "p1", "outcome": "selected"}),
        ("tool_call_update", "agent", {"tool_call_id": "t1", "status": "completed", "turn": 0}),
        ("message", "agent", {"role": "agent", "text": "done", "turn": 0}),
        prompt("two"),  # 6: its turn stored nothing but the marker
        ("session_event", "host", {"what": "turn_ended", "turn": 6}),
    )
    found = find_interrupted(newest_first(log))
    assert found == Interrupted()
    assert not found
    assert closing_items(found) == []


def test_a_tool_call_id_reused_in_a_later_turn_is_its_own_call() -> None:
    log = items(
        prompt("one"),
        ("tool_call", "agent", {"tool_call_id": "t", "status": "completed", "turn": 0}),
        prompt("two"),  # 2
        ("tool_call", "agent", {"tool_call_id": "t", "status": "in_progress", "turn": 2}),
    )
    found = find_interrupted(newest_first(log))
    assert [(i.seq, i.data["turn"]) for i in found.tool_calls] == [(3, 2)]
    assert found.turn == 2
    assert found.dropped == ()


def test_the_scan_stops_at_the_previous_restart() -> None:
    log = items(
        prompt("old"),
        ("permission_request", "agent", {"request_id": "p0", "turn": 0}),
        ("session_event", "host", {"what": RESTART_EVENT}),
        prompt("new"),  # 3
    )
    found = find_interrupted(newest_first(log))
    assert (found.permissions, found.dropped) == ((), (3,))


def test_a_stream_cut_by_the_kill_is_reported_as_partial() -> None:
    log = items(
        prompt("one"),
        ("message", "agent", {"role": "agent", "text": "a", "continued": True, "turn": 0,
                              "response_id": "r1"}),
        ("message", "agent", {"role": "agent", "text": "b", "continues": "r1",
                              "continued": True, "turn": 0, "response_id": "r2"}),
    )  # fmt: skip
    found = find_interrupted(newest_first(log))
    assert (found.turn, found.partial, found.dropped) == (0, True, ())
    # Continued to its end: not partial, nothing to close.
    ended = items(*[(i.type, i.created_by, {**i.data, "response_id": i.response_id})
                    for i in log],
                  ("message", "agent", {"role": "agent", "text": "c", "continues": "r2",
                                        "turn": 0, "response_id": "r3"}))  # fmt: skip
    assert not find_interrupted(newest_first(ended))


async def killed_mid_turn(workspace: Path) -> list[Item]:
    """The items a host leaves when killed with a turn waiting for permission and two prompts
    queued behind it: read before any cleanup could run."""
    log = Log(MemoryStore())
    session = DemoSession(log=log, workspace=workspace, conversation_id="c1", delay=0)
    async with running(session, log) as rec:
        await session.prompt("first", by="alice")
        await rec.wait_item("permission_request")
        await session.prompt("second", by="bob")
        await session.prompt("third", by="alice")
        snapshot = await log.query("c1", limit=1000)
    await log.aclose()
    return snapshot


async def test_a_restarted_session_closes_what_the_killed_host_left_and_serves_anew(
    workspace: Path,
) -> None:
    (workspace / "README.md").write_text("one\n")
    left = await killed_mid_turn(workspace)
    store = MemoryStore()
    await store.extend(left)
    log = Log(store)
    session = DemoSession(log=log, workspace=workspace, conversation_id="c1", delay=0)
    async with running(session, log) as rec:
        await rec.wait_item("session_event", what=RESTART_EVENT)
        closing = rec.items[len(left) :]
        assert [i.type for i in closing] == [
            "permission_decision",
            "tool_call_update",
            "session_event",
        ]
        old_request = next(i for i in left if i.type == "permission_request")
        first, second, third = (i for i in left if i.data.get("role") == "user")
        decision, update, summary = closing
        assert decision.data["request_id"] == old_request.data["request_id"]
        assert (decision.data["outcome"], decision.created_by) == ("cancelled", "host")
        assert update.data["status"] == "failed"
        assert update.data["turn"] == first.seq
        assert summary.data["interrupted_turn"] == first.seq
        assert summary.data["dropped_prompts"] == [second.seq, third.seq]
        # A new request is answerable as ever.
        await session.prompt("again", by="carol")
        request = await rec.wait_item("permission_request", count=2)
        await session.answer_permission(request.data["request_id"], "allow_once", by="carol")
        await rec.wait_item("tool_result")
        await rec.wait_idle()
    # Starting again finds nothing more to close.
    again = DemoSession(log=log, workspace=workspace, conversation_id="c1", delay=0)
    count = len(await log.query("c1", limit=1000))
    async with running(again, log):
        pass
    assert len(await log.query("c1", limit=1000)) == count
    await log.aclose()


async def test_a_long_stream_is_stored_in_parts_as_it_goes(
    log: Log, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recorder_module, "STREAM_PART_SECONDS", 0.05)
    recorder = Recorder(log, "c")
    recorder.turn = 7
    for n in range(6):
        await recorder.delta("message", f"chunk{n} ")
        await anyio.sleep(0.03)
    stored = await log.query("c")
    # Stored while streaming, each part continued by the next one; the last chunk waits.
    assert len(stored) >= 2
    assert all(i.data["continued"] is True for i in stored)
    for earlier, later in itertools.pairwise(stored):
        assert later.data["continues"] == earlier.response_id
    assert find_interrupted(reversed(stored)).partial
    await recorder.flush()
    stored = await log.query("c")
    assert "continued" not in stored[-1].data
    assert stored[-1].data["continues"] == stored[-2].response_id
    assert "".join(i.data["text"] for i in stored) == "".join(f"chunk{n} " for n in range(6))
    assert {i.data["turn"] for i in stored} == {7}
    assert not find_interrupted(reversed(stored))


async def test_a_short_stream_is_one_item_as_before(log: Log) -> None:
    recorder = Recorder(log, "c")
    await recorder.delta("message", "hello ")
    await recorder.delta("message", "world")
    await recorder.flush()
    (item,) = await log.query("c")
    assert item.data == {"role": "agent", "text": "hello world"}
