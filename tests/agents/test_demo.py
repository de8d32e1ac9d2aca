"""The demo agent and the shared chat session core: turns, permissions, queue, cancel."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from tunnel.agents import DemoSession, SessionError
from tunnel.agents.chat import MAX_QUEUED_PROMPTS
from tunnel.agents.demo_agent import choose_tool, run_tool
from tunnel.agents.workspace import Workspace
from tunnel.app.requests import MAX_PROMPT_LENGTH
from tunnel.log import Log

from .conftest import running

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def demo(log: Log, workspace: Path) -> DemoSession:
    return DemoSession(log=log, workspace=workspace, conversation_id="c1", delay=0)


async def test_prompt_streams_reasoning_and_reply_then_asks_permission(
    log: Log, workspace: Path
) -> None:
    (workspace / "README.md").write_text("one\ntwo\nthree\n")
    session = demo(log, workspace)
    async with running(session, log) as rec:
        await session.prompt("count the lines please", by="alice")
        request = await rec.wait_item("permission_request")

        types = [i.type for i in rec.items]
        assert types == [
            "message",
            "plan",
            "reasoning",
            "message",
            "plan",
            "tool_call",
            "permission_request",
        ]
        prompt, _, reasoning, reply, _, tool_call, _ = rec.items
        assert prompt.data == {"role": "user", "text": "count the lines please"}
        assert prompt.created_by == "alice"
        assert reply.data["role"] == "agent"
        assert tool_call.data["title"] == "Count the lines of README.md"
        assert tool_call.data["status"] == "pending"
        assert request.status == "action_required"
        assert request.data["tool_call_id"] == tool_call.data["tool_call_id"]
        assert [o["kind"] for o in request.data["options"]] == ["allow_once", "reject_once"]
        assert session.pending_permissions() == [request]

        # The deltas of each stream add up to its final item, under the same response id.
        for final, channel in ((reasoning, "reasoning"), (reply, "message")):
            chunks = [
                e.data["text"]
                for e in rec.events
                if e.kind == "delta" and e.data["response_id"] == final.response_id
            ]
            assert len(chunks) > 1
            assert "".join(chunks) == final.data["text"]
            assert {
                e.data["channel"]
                for e in rec.events
                if e.kind == "delta" and e.data["response_id"] == final.response_id
            } == {channel}
        statuses = [e.data for e in rec.events if e.kind == "status"]
        # The running turn is known by its prompt: prompts stored after it wait.
        assert statuses[-1] == {"state": "running", "queued": 0, "turn": prompt.seq}
        assert session.status() == statuses[-1]


async def test_allowed_tool_runs_and_the_result_is_reported(log: Log, workspace: Path) -> None:
    (workspace / "README.md").write_text("one\ntwo\nthree\n")
    session = demo(log, workspace)
    async with running(session, log) as rec:
        await session.prompt("go", by="alice")
        request = await rec.wait_item("permission_request")
        await session.answer_permission(request.data["request_id"], "allow_once", by="bob")
        result = await rec.wait_item("tool_result")
        await rec.wait_idle()

        decision = rec.of_type("permission_decision")[0]
        assert decision.created_by == "bob"
        assert decision.data["option_id"] == "allow_once"
        assert decision.data["outcome"] == "selected"
        assert result.data["ok"] is True
        assert result.data["output"] == "README.md has 3 lines"
        updates = [u.data["status"] for u in rec.of_type("tool_call_update")]
        assert updates == ["in_progress", "completed"]
        final = [m for m in rec.of_type("message") if m.data["role"] == "agent"][-1]
        assert "README.md has 3 lines" in final.data["text"]
        assert rec.items[-1].type == "plan"
        assert all(e["status"] == "completed" for e in rec.items[-1].data["entries"])
        assert session.pending_permissions() == []


async def test_rejected_tool_is_not_run_and_the_agent_says_so(log: Log, workspace: Path) -> None:
    session = demo(log, workspace)
    async with running(session, log) as rec:
        await session.prompt("go", by="alice")
        request = await rec.wait_item("permission_request")
        await session.answer_permission(request.data["request_id"], "reject_once", by="carol")
        await rec.wait_idle()

        assert [u.data["status"] for u in rec.of_type("tool_call_update")] == ["failed"]
        assert rec.of_type("tool_result")[0].data["ok"] is False
        final = [m for m in rec.of_type("message") if m.data["role"] == "agent"][-1]
        assert "carol said no" in final.data["text"]


async def test_first_answer_wins_and_later_answers_are_refused(log: Log, workspace: Path) -> None:
    session = demo(log, workspace)
    async with running(session, log) as rec:
        await session.prompt("go", by="alice")
        request_id = (await rec.wait_item("permission_request")).data["request_id"]

        with pytest.raises(SessionError) as unknown_option:
            await session.answer_permission(request_id, "allow_always", by="alice")
        assert unknown_option.value.code == "unknown_request"
        with pytest.raises(SessionError) as unknown_request:
            await session.answer_permission("perm_nope", "allow_once", by="alice")
        assert unknown_request.value.code == "unknown_request"

        async with anyio.create_task_group() as tg:
            outcomes: dict[str, str] = {}

            async def answer(name: str, option: str) -> None:
                try:
                    await session.answer_permission(request_id, option, by=name)
                    outcomes[name] = "won"
                except SessionError as exc:
                    outcomes[name] = exc.code

            tg.start_soon(answer, "alice", "allow_once")
            tg.start_soon(answer, "bob", "reject_once")
        assert outcomes == {"alice": "won", "bob": "already_answered"}
        await rec.wait_idle()
        decisions = rec.of_type("permission_decision")
        assert [(d.created_by, d.data["option_id"]) for d in decisions] == [("alice", "allow_once")]
        assert rec.of_type("tool_result")[0].data["ok"] is True


async def test_queued_prompts_run_in_order_and_status_counts_them(
    log: Log, workspace: Path
) -> None:
    session = demo(log, workspace)
    async with running(session, log) as rec:
        for n in range(3):
            await session.prompt(f"prompt {n}", by=f"user{n}")
        first = await rec.wait_item("message")

        def counted_two_queued() -> bool:
            # Waited for: the recording follows the log in a task of its own, which a loaded
            # machine may run after this one.
            statuses = [e.data for e in rec.events if e.kind == "status"]
            return {"state": "running", "queued": 2, "turn": first.seq} in statuses

        await rec.wait_until(counted_two_queued)

        for n in range(3):
            request = await rec.wait_item("permission_request", count=n + 1)
            # Each turn works on its own prompt, in the order they were sent.
            assert f'"prompt {n}"' in rec.of_type("reasoning")[n].data["text"]
            assert f"user{n} asked" in rec.of_type("reasoning")[n].data["text"]
            await session.answer_permission(request.data["request_id"], "allow_once", by="x")
        await rec.wait_idle()

        users = [m.data["text"] for m in rec.of_type("message") if m.data["role"] == "user"]
        assert users == ["prompt 0", "prompt 1", "prompt 2"]
        assert len(rec.of_type("tool_result")) == 3


async def test_a_full_queue_refuses_the_prompt_and_records_nothing(
    log: Log, workspace: Path
) -> None:
    session = demo(log, workspace)
    async with running(session, log) as rec:
        await session.prompt("first", by="alice")
        await rec.wait_item("permission_request")
        for n in range(MAX_QUEUED_PROMPTS):
            await session.prompt(f"waiting {n}", by="alice")
        stored = len(rec.items)

        with pytest.raises(SessionError) as refused:
            await session.prompt("one too many", by="bob")
        assert refused.value.code == "agent_unavailable"
        await anyio.sleep(0.05)
        assert len(rec.items) == stored
        assert not any(i.data.get("text") == "one too many" for i in rec.items)


async def test_cancel_ends_the_turn_and_closes_the_permission_request(
    log: Log, workspace: Path
) -> None:
    session = demo(log, workspace)
    async with running(session, log) as rec:
        await session.prompt("go", by="alice")
        request = await rec.wait_item("permission_request")
        await session.cancel(by="carol")
        await rec.wait_idle()

        cancelled = rec.of_type("session_event")[-1]
        assert cancelled.data["what"] == "cancelled"
        assert cancelled.created_by == "carol"
        decision = rec.of_type("permission_decision")[0]
        assert decision.data["request_id"] == request.data["request_id"]
        assert decision.data["outcome"] == "cancelled"
        assert decision.created_by == "carol"
        assert rec.of_type("tool_result") == []
        assert session.pending_permissions() == []
        with pytest.raises(SessionError) as late:
            await session.answer_permission(request.data["request_id"], "allow_once", by="a")
        assert late.value.code == "already_answered"

        # The session goes on: a new prompt gets a new turn.
        await session.prompt("again", by="alice")
        await rec.wait_item("permission_request", count=2)


async def test_cancel_when_idle_records_nothing(log: Log, workspace: Path) -> None:
    session = demo(log, workspace)
    async with running(session, log) as rec:
        await session.cancel(by="carol")
        await anyio.sleep(0.05)
        assert rec.items == []


async def test_chat_agents_refuse_terminal_input_and_bad_prompts(log: Log, workspace: Path) -> None:
    session = demo(log, workspace)
    with pytest.raises(SessionError) as not_running:
        await session.prompt("hi", by="alice")
    assert not_running.value.code == "agent_unavailable"
    async with running(session, log) as rec:
        with pytest.raises(SessionError) as typed:
            await session.input(b"ls\n", by="alice")
        assert typed.value.code == "not_supported"
        with pytest.raises(SessionError) as resized:
            await session.resize(80, 24, by="alice")
        assert resized.value.code == "not_supported"
        with pytest.raises(SessionError) as empty:
            await session.prompt("   ", by="alice")
        assert empty.value.code == "bad_request"
        for name in ("", "x" * 300):
            with pytest.raises(SessionError) as nameless:
                await session.prompt("hi", by=name)
            assert nameless.value.code == "bad_request"
        with pytest.raises(SessionError) as surrogate:
            await session.prompt("bad \ud800 text", by="alice")
        assert surrogate.value.code == "bad_request"
        await anyio.sleep(0.05)
        assert rec.items == []
    assert session.info.name == "demo"
    assert session.info.kind == "chat"


async def test_a_prompt_longer_than_the_wire_allows_is_refused_from_the_host_too(
    log: Log, workspace: Path
) -> None:
    session = demo(log, workspace)
    async with running(session, log) as rec:
        with pytest.raises(SessionError) as long:
            await session.prompt("x" * (MAX_PROMPT_LENGTH + 1), by="host")
        assert long.value.code == "bad_request"
        assert str(MAX_PROMPT_LENGTH) in long.value.message
        await anyio.sleep(0.05)
        assert rec.items == []


def test_the_tool_prefers_the_readme_then_the_biggest_python_file(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    assert choose_tool(ws).title == "List the files of the workspace"
    assert run_tool(ws, choose_tool(ws)) == (True, "the workspace is empty")

    (tmp_path / "small.py").write_text("a = 1\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "big.py").write_text("x = 1\n" * 50)
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "huge.py").write_text("y = 2\n" * 500)
    tool = choose_tool(ws)
    assert tool.title == f"Count the lines of {os.path.join('pkg', 'big.py')}"
    assert run_tool(ws, tool) == (True, f"{os.path.join('pkg', 'big.py')} has 50 lines")

    (tmp_path / "README.md").write_text("no newline at the end")
    assert run_tool(ws, choose_tool(ws)) == (True, "README.md has 1 line")


def test_the_tool_does_not_follow_a_readme_symlink_out_of_the_workspace(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "secret.md"
    outside.write_text("secret\n")
    inside = tmp_path / "ws"
    inside.mkdir()
    (inside / "README.md").symlink_to(outside)
    assert choose_tool(Workspace(inside)).path is None
