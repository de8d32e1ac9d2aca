"""What an ACP agent asks of the host about tools: permissions with the whole tool call, files
(a missing file reads empty, so new files can be written), terminals, and tool-call ids reused
across turns. Driven through a real subprocess: tests/agents/fake_acp_agent.py."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from tunnel.agents import AcpSession, create_session
from tunnel.agents.acp_updates import MAX_CONTENT_BYTES, MAX_INPUT_BYTES
from tunnel.agents.workspace import Workspace
from tunnel.app.entries import MAX_ITEM_BYTES
from tunnel.app.requests import MAX_REQUEST_SIZE
from tunnel.log import Log
from tunnel.policy import parse_policy

from .conftest import running
from .test_acp import SPEC

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


def acp_session(log: Log, workspace: Path) -> AcpSession:
    session = create_session(SPEC, log, workspace=workspace, conversation_id="c1")
    assert isinstance(session, AcpSession)
    return session


async def test_a_permission_request_carries_the_whole_tool_call(log: Log, workspace: Path) -> None:
    notes = workspace / "notes.txt"
    notes.write_text("milk\n")
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        await session.prompt("ask", by="alice")
        request = await rec.wait_item("permission_request")
        call = request.data["tool_call"]
        assert call["tool_call_id"] == "call_ask"
        assert (call["title"], call["kind"], call["status"]) == (
            "Edit notes.txt",
            "edit",
            "pending",
        )
        assert call["locations"] == [{"path": str(notes), "line": 1}]
        assert call["input"] == {
            "file_path": str(notes),
            "old_string": "milk",
            "new_string": "bread",
        }
        assert call["content"] == [
            {"type": "diff", "path": str(notes), "old_text": "milk\n", "new_text": "bread\n"}
        ]
        assert "truncated" not in call
        # Every option is offered as the agent listed it, bypass first.
        assert [o["option_id"] for o in request.data["options"]] == [
            "bypassPermissions",
            "acceptEdits",
            "default",
            "plan",
        ]
        await session.answer_permission(request.data["request_id"], "default", by="bob")
        await rec.wait_item("message", text="chose default")
        decision = rec.of_type("permission_decision")[0]
        assert decision.created_by == "bob"
        assert decision.data == {
            "request_id": request.data["request_id"],
            "option_id": "default",
            "option_name": "Yes, and manually approve edits",
            "option_kind": "allow_once",
            "outcome": "selected",
        }
        assert request.data["turn"] == rec.of_type("message")[0].seq


async def test_a_huge_tool_call_is_cut_to_fit_one_message_and_says_so(
    log: Log, workspace: Path
) -> None:
    (workspace / "notes.txt").write_text("milk\n")
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        await session.prompt("ask-big", by="alice")
        request = await rec.wait_item("permission_request")
        call = request.data["tool_call"]
        assert call["truncated"] is True
        assert len(json.dumps(call["input"])) <= MAX_INPUT_BYTES
        assert len(json.dumps(call["content"])) <= MAX_CONTENT_BYTES
        # The cut strings say how much is missing; the diff keeps its shape.
        assert "more characters not stored]" in call["input"]["blob"]
        (diff,) = call["content"]
        assert diff["type"] == "diff"
        assert diff["old_text"].startswith("milk\nmilk\n")
        assert "more characters not stored]" in diff["new_text"]
        # Whole, it fits a message: teammates get it, not a "too large" note.
        assert len(json.dumps(request.to_wire())) <= MAX_ITEM_BYTES
        assert MAX_ITEM_BYTES < MAX_REQUEST_SIZE
        await session.answer_permission(request.data["request_id"], "plan", by="alice")
        await rec.wait_item("message", text="chose plan")


@pytest.mark.parametrize("path", ["new.txt", "deep/er/new.txt"])
async def test_an_agent_can_create_a_file_it_reads_first(
    log: Log, workspace: Path, path: str
) -> None:
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        await session.prompt(f"create {path}", by="alice")
        said = await rec.wait_item("message", role="agent")
        assert said.data["text"] == f"read '' then wrote {path}"
    assert (workspace / path).read_text() == "created\n"


async def test_an_existing_file_reads_as_it_is(log: Log, workspace: Path) -> None:
    (workspace / "there.txt").write_text("old\n")
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        await session.prompt("create there.txt", by="alice")
        said = await rec.wait_item("message", role="agent")
        assert said.data["text"] == "read 'old\\n' then wrote there.txt"


async def test_a_terminal_runs_in_the_workspace_and_its_output_is_shown(
    log: Log, workspace: Path
) -> None:
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        await session.prompt("term", by="alice")
        said = await rec.wait_item("message", role="agent")
        assert said.data["text"] == "exit 3 output err out after release gone"
        ended = await rec.wait_item("tool_terminal")
        assert ended.data["exit_code"] == 3
        assert ended.data["signal"] is None
        assert ended.data["cwd"] == "."
        assert sorted(ended.data["output"].split()) == ["err", "out"]
        assert ended.data["turn"] == rec.of_type("message")[0].seq
        # The tool call names the terminal; its output was streamed as it came.
        call = rec.of_type("tool_call")[0]
        assert call.data["content"] == [
            {"type": "terminal", "terminal_id": ended.data["terminal_id"]}
        ]
        streamed = "".join(
            e.data["text"]
            for e in rec.events
            if e.kind == "tool_terminal" and e.data["terminal_id"] == ended.data["terminal_id"]
        )
        assert sorted(streamed.split()) == ["err", "out"]


async def test_a_terminal_outside_the_workspace_is_refused(log: Log, workspace: Path) -> None:
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        await session.prompt("term-outside", by="alice")
        said = await rec.wait_item("message", role="agent")
        assert said.data["text"].startswith("refused: ")
        refused = await rec.wait_item("session_event", what="terminal_refused")
        assert refused.data["cwd"] == str(workspace.parent)
        assert rec.of_type("tool_terminal") == []


async def test_a_killed_terminal_reports_its_signal(log: Log, workspace: Path) -> None:
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        await session.prompt("term-sleep", by="alice")
        said = await rec.wait_item("message", role="agent")
        assert said.data["text"] == "killed by SIGKILL"
        ended = await rec.wait_item("tool_terminal")
        assert ended.data["signal"] == "SIGKILL"


async def test_a_tool_call_id_reused_in_a_later_turn_is_told_apart_by_its_turn(
    log: Log, workspace: Path
) -> None:
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        await session.prompt("tool", by="alice")
        await session.prompt("tool", by="bob")
        await rec.wait_item("tool_result", count=2)
        await rec.wait_idle()
    prompts = [m.seq for m in rec.of_type("message") if m.data["role"] == "user"]
    calls = rec.of_type("tool_call")
    results = rec.of_type("tool_result")
    assert [c.data["tool_call_id"] for c in calls] == ["call_1", "call_1"]
    assert [(c.data["tool_call_id"], c.data["turn"]) for c in calls] == [
        ("call_1", prompts[0]),
        ("call_1", prompts[1]),
    ]
    assert [r.data["turn"] for r in results] == prompts


async def test_the_policy_judges_a_request_by_its_tool_call_as_far_as_it_is_known(
    log: Log, workspace: Path
) -> None:
    # The agent showed the command in its tool call, then asked with the call's input empty:
    # a rule on the command still applies, though the recorded request stays as the agent sent
    # it.
    policy = parse_policy(
        """
        [[rule]]
        verdict = "allow"
        kind = "execute"

        [[rule]]
        verdict = "deny"
        kind = "execute"
        command = "rm *"
        """,
        source="team.toml",
    )
    session = acp_session(log, workspace)
    session.set_policy(policy, workspace=Workspace(workspace))
    async with running(session, log) as rec:
        await session.prompt("bare-ask", by="alice")
        decision = await rec.wait_item("permission_decision")
        assert decision.created_by == "policy"
        assert decision.data["option_id"] == "no"
        assert decision.data["policy"]["index"] == 2
        request = rec.of_type("permission_request")[0]
        assert request.data["tool_call"]["input"] == {}
        # The agent was told the refusal.
        with anyio.fail_after(30):
            while not any(
                m.data.get("role") == "agent" and "chose no" in m.data.get("text", "")
                for m in rec.of_type("message")
            ):
                await anyio.sleep(0.05)
