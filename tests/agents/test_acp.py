"""ACP agents, driven through a real subprocess: tests/agents/fake_acp_agent.py."""

from __future__ import annotations

import os
import shlex
import signal
import sys
from pathlib import Path

import psutil
import pytest

from tunnel.agents import AcpSession, SessionError, create_session
from tunnel.log import Log

from .conftest import process_exists, running

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

FAKE_AGENT = Path(__file__).with_name("fake_acp_agent.py")
SPEC = f"acp:{sys.executable} {FAKE_AGENT}"


def acp_session(log: Log, workspace: Path) -> AcpSession:
    session = create_session(SPEC, log, workspace=workspace, conversation_id="c1")
    assert isinstance(session, AcpSession)
    return session


async def test_a_turn_records_the_whole_conversation(any_log: Log, tmp_path: Path) -> None:
    log = any_log
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("remember the milk\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (workspace / "escape").symlink_to(elsewhere)
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        started = await rec.wait_item("session_event", what="agent_started")
        assert started.data["agent"] == "fake-agent"
        assert started.data["version"] == "1.0"
        assert (session.info.name, session.info.kind) == ("fake-agent", "chat")

        await session.prompt("work", by="alice")
        request = await rec.wait_item("permission_request")
        assert request.data["tool_call_id"] == "call_1"
        assert request.data["title"] == "Read notes.txt"
        assert [o["option_id"] for o in request.data["options"]] == ["yes", "no"]
        assert session.pending_permissions() == [request]

        await session.answer_permission(request.data["request_id"], "yes", by="alice")
        with pytest.raises(SessionError) as late:
            await session.answer_permission(request.data["request_id"], "no", by="bob")
        assert late.value.code == "already_answered"
        await rec.wait_idle()

    stored = await log.query("c1", limit=1000)
    assert stored == rec.items  # what a subscriber saw is what was stored
    # The agent's settings and commands are recorded too (tests/agents/test_acp_session.py).
    items = [i for i in stored if i.data.get("what") not in ("settings", "commands")]
    assert [(i.type, i.data.get("what")) for i in items] == [
        ("session_event", "agent_started"),
        ("message", None),
        ("reasoning", None),
        ("plan", None),
        ("message", None),
        ("tool_call", None),
        ("permission_request", None),
        ("permission_decision", None),
        ("tool_call_update", None),
        ("tool_result", None),
        ("session_event", "fs_refused"),
        ("session_event", "fs_refused"),
        ("session_event", "fs_refused"),
        ("message", None),
        ("plan", None),
        ("message", None),
    ]
    prompt, thought, plan, hello, tool_call = items[1:6]
    assert (prompt.created_by, prompt.data) == ("alice", {"role": "user", "text": "work"})
    assert thought.data == {"text": "Let me think.", "turn": prompt.seq}
    assert [e["status"] for e in plan.data["entries"]] == ["pending", "pending"]
    assert hello.data == {"role": "agent", "text": "Hello there.", "turn": prompt.seq}
    assert tool_call.data["kind"] == "read"
    assert tool_call.data["input"] == {"path": str(workspace / "notes.txt")}
    decision, update, result = items[7:10]
    assert (decision.created_by, decision.data["option_id"]) == ("alice", "yes")
    assert update.data["status"] == "completed"
    assert update.data["content"] == [{"type": "text", "text": "remember the milk\n"}]
    assert result.data == {
        "tool_call_id": "call_1",
        "ok": True,
        "output": "remember the milk\n",
        "turn": prompt.seq,
    }
    refusals = items[13].data["text"]
    assert refusals.count("refused:") == 3
    assert "WROTE" not in refusals
    assert [e["status"] for e in items[14].data["entries"]] == ["completed", "completed"]
    assert items[15].data["text"] == "Done."

    # Deltas came first, with the final item's response id.
    deltas = [e for e in rec.events if e.kind == "delta"]
    assert [(d.data["channel"], d.data["text"]) for d in deltas[:2]] == [
        ("reasoning", "Let me "),
        ("reasoning", "think."),
    ]
    assert {d.data["response_id"] for d in deltas[:2]} == {thought.response_id}
    assert {d.data["response_id"] for d in deltas[2:4]} == {hello.response_id}

    # The write inside the workspace happened; none of the three escapes did.
    assert (workspace / "out.txt").read_text() == "REMEMBER THE MILK\n"
    assert sorted(p.name for p in elsewhere.iterdir()) == []
    assert not (tmp_path / "escape-dotdot.txt").exists()
    assert not (tmp_path / "escape-absolute.txt").exists()


async def test_a_rejected_permission_reaches_the_agent(log: Log, workspace: Path) -> None:
    (workspace / "notes.txt").write_text("x\n")
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        await session.prompt("work", by="alice")
        request = await rec.wait_item("permission_request")
        await session.answer_permission(request.data["request_id"], "no", by="bob")
        await rec.wait_idle()
        final = rec.of_type("message")[-1]
        assert final.data["text"] == "Not allowed (selected)."
        assert [u.data["status"] for u in rec.of_type("tool_call_update")] == ["failed"]
        assert not (workspace / "out.txt").exists()


async def test_cancel_while_waiting_for_permission_tells_the_agent(
    log: Log, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("x\n")
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        await session.prompt("work", by="alice")
        request = await rec.wait_item("permission_request")
        await session.cancel(by="carol")
        await rec.wait_idle()
        decision = rec.of_type("permission_decision")[0]
        assert decision.data["request_id"] == request.data["request_id"]
        assert (decision.data["outcome"], decision.created_by) == ("cancelled", "carol")
        assert rec.of_type("message")[-1].data["text"] == "Not allowed (cancelled)."


async def test_cancel_stops_a_streaming_turn(log: Log, workspace: Path) -> None:
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        await session.prompt("wait", by="alice")
        await rec.wait_until(lambda: any(e.kind == "delta" for e in rec.events))
        await session.cancel(by="bob")
        ended = await rec.wait_item("session_event", what="turn_ended")
        assert ended.data["stop_reason"] == "cancelled"
        await rec.wait_idle()
        whats = [(i.data["what"], i.created_by) for i in rec.of_type("session_event")]
        assert ("cancelled", "bob") in whats
        partial = rec.of_type("message")[-1]
        assert partial.data["role"] == "agent"
        assert set(partial.data["text"]) == {"."}


async def test_updates_are_recorded_in_the_order_the_agent_sent_them(
    log: Log, workspace: Path
) -> None:
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        await session.prompt("count 300", by="alice")
        await rec.wait_idle()
        expected = "".join(f"{i}," for i in range(300))
        assert rec.of_type("message")[-1].data["text"] == expected
        deltas = [e.data["text"] for e in rec.events if e.kind == "delta"]
        assert "".join(deltas) == expected


async def test_queued_prompts_each_get_their_own_turn(log: Log, workspace: Path) -> None:
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        for word in ("one", "two", "three"):
            await session.prompt(word, by="alice")
        await rec.wait_item("message", text="echo: three")
        user = [m.data["text"] for m in rec.of_type("message") if m.data["role"] == "user"]
        assert user == ["one", "two", "three"]
        agent = [m.data["text"] for m in rec.of_type("message") if m.data["role"] == "agent"]
        assert agent == ["echo: one", "echo: two", "echo: three"]


async def test_a_killed_agent_is_recorded_and_the_next_prompt_restarts_it(
    any_log: Log, workspace: Path
) -> None:
    log = any_log
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        await session.prompt("hello", by="alice")
        await rec.wait_item("message", text="echo: hello")
        first_pid = session.agent_pid
        assert first_pid is not None

        os.kill(first_pid, signal.SIGKILL)
        error = await rec.wait_item("error")
        assert "exited (killed by SIGKILL)" in error.data["message"]
        exited = await rec.wait_item("session_event", what="agent_exited")
        assert exited.data["code"] == -signal.SIGKILL
        assert session.agent_pid is None

        await session.prompt("again", by="bob")
        await rec.wait_item("message", text="echo: again")
        second_pid: int | None = session.agent_pid
        assert second_pid not in (None, first_pid)
        starts = [s for s in rec.of_type("session_event") if s.data["what"].startswith("agent_")]
        assert [s.data["what"] for s in starts] == [
            "agent_started",
            "agent_exited",
            "agent_started",
        ]

    # The log kept everything across the restart.
    stored = await log.query("c1", limit=100)
    assert [m.data["text"] for m in stored if m.type == "message"] == [
        "hello",
        "echo: hello",
        "again",
        "echo: again",
    ]


WRAPPER = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"
"""A launcher that runs the agent as its child, sharing its stdio (as npm's wrapper of
codex-acp runs the real binary)."""


async def test_a_killed_launcher_is_an_exit_and_the_agent_it_started_is_stopped(
    log: Log, workspace: Path
) -> None:
    argv = [sys.executable, "-c", WRAPPER, sys.executable, str(FAKE_AGENT)]
    session = AcpSession(argv=argv, log=log, workspace=workspace, conversation_id="c1")
    async with running(session, log) as rec:
        await session.prompt("hello", by="alice")
        await rec.wait_item("message", text="echo: hello")
        launcher = session.agent_pid
        assert launcher is not None
        [agent] = psutil.Process(launcher).children()

        # Only the launcher dies; its child still holds the pipes and would go on answering.
        os.kill(launcher, signal.SIGKILL)
        exited = await rec.wait_item("session_event", what="agent_exited")
        assert exited.data["code"] == -signal.SIGKILL
        assert not await process_exists(agent.pid)

        await session.prompt("again", by="bob")
        await rec.wait_item("message", text="echo: again")
        assert session.agent_pid not in (None, launcher)
        assert [s.data["what"] for s in rec.of_type("session_event")].count("agent_started") == 2


async def test_an_agent_crashing_mid_turn_ends_the_turn(log: Log, workspace: Path) -> None:
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        await session.prompt("crash", by="alice")
        error = await rec.wait_item("error")
        assert "exit code 3" in error.data["message"]
        await rec.wait_idle()
        await session.prompt("still there?", by="alice")
        await rec.wait_item("message", text="echo: still there?")


async def test_a_missing_program_is_an_error_item_not_a_crash(log: Log, workspace: Path) -> None:
    session = create_session(
        "acp:/nonexistent/agent --flag", log, workspace=workspace, conversation_id="c1"
    )
    assert session.info.name == "agent"
    async with running(session, log) as rec:
        error = await rec.wait_item("error")
        assert error.data["message"] == "could not start the agent agent: program not found"
        await session.prompt("hello", by="alice")
        await rec.wait_item("error", count=2)
        await rec.wait_idle()
        assert [i.type for i in rec.items] == ["error", "message", "error"]


@pytest.mark.parametrize(
    ("program", "reason"),
    [
        ("-c pass", "it exited during the handshake"),
        (
            "-c 'import sys; sys.stdin.readline(); print(\"not json\", flush=True); input()'",
            "no answer to initialize/session/new within 1 s",
        ),
    ],
)
async def test_a_program_that_is_no_acp_agent_is_reported(
    log: Log, workspace: Path, program: str, reason: str
) -> None:
    session = AcpSession(
        argv=[sys.executable, *shlex.split(program)],
        log=log,
        workspace=workspace,
        conversation_id="c1",
        start_timeout=1.0,
    )
    async with running(session, log) as rec:
        error = await rec.wait_item("error")
        name = Path(sys.executable).name
        assert error.data["message"] == f"could not start the agent {name}: {reason}"
        assert session.agent_pid is None


async def test_stopping_the_session_kills_the_agent(log: Log, workspace: Path) -> None:
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        await rec.wait_item("session_event", what="agent_started")
        pid = session.agent_pid
        assert pid is not None
    assert not await process_exists(pid)
