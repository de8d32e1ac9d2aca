"""Permission requests under the host's approval policy: answered by a rule, remembered, or
asked of the people a rule names until enough of them approved."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tunnel.agents import SessionError, create_session
from tunnel.agents.permissions import PendingPermission, PermissionBroker, PermissionOption
from tunnel.agents.recorder import Recorder
from tunnel.agents.workspace import Workspace
from tunnel.log import Log
from tunnel.policy import parse_policy, preset

from .conftest import running

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

OPTIONS = (
    PermissionOption(option_id="yes-always", name="Always Allow", kind="allow_always"),
    PermissionOption(option_id="yes", name="Allow", kind="allow_once"),
    PermissionOption(option_id="no", name="Reject", kind="reject_once"),
    PermissionOption(option_id="no-always", name="Never", kind="reject_always"),
)

POLICY = """
[[rule]]
verdict = "allow"
kind = "read"

[[rule]]
verdict = "deny"
paths = "secrets/**"

[[rule]]
verdict = "ask"
kind = "execute"
approvals = 2

[[rule]]
verdict = "ask"
kind = "delete"
answer = ["alice", "host"]

[[rule]]
verdict = "ask"
kind = "edit"
remember = "turn"
"""


def broker(log: Log, workspace: Path, text: str = POLICY) -> tuple[PermissionBroker, Recorder]:
    recorder = Recorder(log, "c1")
    permissions = PermissionBroker(recorder)
    permissions.policy = parse_policy(text, source="team.toml")
    permissions.workspace = Workspace(workspace)
    return permissions, recorder


def call(kind: str, *paths: str, command: str | None = None) -> dict[str, Any]:
    raw: dict[str, Any] = {"command": command} if command else {}
    return {
        "tool_call": {
            "tool_call_id": "t1",
            "kind": kind,
            "locations": [{"path": p} for p in paths],
            "input": raw,
        }
    }


async def ask(permissions: PermissionBroker, details: dict[str, Any]) -> PendingPermission:
    pending = await permissions.open(
        title="May I?", tool_call_id="t1", options=OPTIONS, details=details
    )
    assert pending is not None
    return pending


async def test_an_allowed_request_is_answered_by_the_policy_and_recorded_with_its_rule(
    log: Log, workspace: Path
) -> None:
    permissions, _ = broker(log, workspace)
    pending = await ask(permissions, call("read", "README.md"))
    decision = await permissions.wait(pending)
    assert (decision.by, decision.option) == ("policy", OPTIONS[1])
    assert permissions.open_requests() == []
    request, decided = await log.query("c1")
    assert request.type == "permission_request"
    assert "approval" not in request.data
    assert decided.type == "permission_decision"
    assert decided.created_by == "policy"
    assert decided.data["option_kind"] == "allow_once"
    assert decided.data["policy"] == {
        "source": "team.toml",
        "index": 1,
        "line": 2,
        "rule": 'verdict = "allow", kind = ["read"]',
    }


async def test_a_denied_request_gets_reject_once_even_through_a_symlink(
    log: Log, workspace: Path
) -> None:
    (workspace / "secrets").mkdir()
    (workspace / "secrets" / "key").write_text("k")
    os.symlink("secrets/key", workspace / "innocent")
    permissions, _ = broker(log, workspace)
    decision = await permissions.wait(await ask(permissions, call("read", "innocent")))
    assert (decision.by, decision.option) == ("policy", OPTIONS[2])
    decided = (await log.query("c1"))[-1]
    assert decided.data["policy"]["index"] == 2


async def test_a_new_file_in_new_directories_is_matched_as_named(log: Log, workspace: Path) -> None:
    permissions, _ = broker(log, workspace)
    pending = await ask(permissions, call("edit", str(workspace / "secrets" / "new" / "key")))
    assert pending.decision is not None
    assert pending.decision.option == OPTIONS[2]
    os.symlink("/etc", workspace / "out")
    escaping = await ask(permissions, call("read", "out/missing/file"))
    assert escaping.decision is None  # outside: no allow rule covers it
    await permissions.cancel_all(by="host")


async def test_a_read_outside_the_workspace_is_not_allowed_by_a_read_rule(
    log: Log, workspace: Path
) -> None:
    permissions, _ = broker(log, workspace)
    pending = await ask(permissions, call("read", "/etc/passwd"))
    assert pending.decision is None
    assert pending.data["approval"]["rule"] is None  # asked by the default
    await permissions.answer(pending.request_id, "no", by="alice")


async def test_two_person_rule_needs_two_distinct_approvals(log: Log, workspace: Path) -> None:
    permissions, _ = broker(log, workspace)
    pending = await ask(permissions, call("execute", command="make deploy"))
    assert pending.data["approval"] == {
        "answer": ["host", "drivers"],
        "approvals": 2,
        "approved_by": [],
        "remember": "once",
        "rule": {
            "index": 3,
            "line": 10,
            "rule": 'verdict = "ask", kind = ["execute"], answer = ["host", "drivers"], '
            'approvals = 2, remember = "once"',
        },
    }
    # No "always" to offer: the rule remembers nothing.
    assert [o["option_id"] for o in pending.data["options"]] == ["yes", "no"]
    await permissions.answer(pending.request_id, "yes", by="alice", verified=True)
    assert pending.decision is None
    assert permissions.open_requests()[0]["approval"]["approved_by"] == ["alice"]
    # A joiner is shown the request and where its approvals stand.
    assert [i.type for i in permissions.pending()] == ["permission_request", "permission_approval"]
    with pytest.raises(SessionError) as again:
        await permissions.answer(pending.request_id, "yes", by="alice", verified=True)
    assert again.value.code == "already_answered"
    assert pending.decision is None
    await permissions.answer(pending.request_id, "yes", by="bob", verified=True)
    decision = await permissions.wait(pending)
    assert (decision.by, decision.option) == ("bob", OPTIONS[1])
    items = await log.query("c1")
    assert [i.type for i in items] == [
        "permission_request",
        "permission_approval",
        "permission_decision",
    ]
    assert items[1].created_by == "alice"
    assert items[1].data["approved_by"] == ["alice"]
    assert items[1].data["needed"] == 1
    assert items[2].data["approved_by"] == ["alice", "bob"]


async def test_a_two_person_request_counts_no_typed_name(log: Log, workspace: Path) -> None:
    # One holder of the drive link with two channels and two names is one person, unproven:
    # neither counts toward two approvals.
    permissions, _ = broker(log, workspace)
    pending = await ask(permissions, call("execute", command="make deploy"))
    for name in ("ann", "ann-again"):
        with pytest.raises(SessionError) as typed:
            await permissions.answer(pending.request_id, "yes", by=name)
        assert typed.value.code == "forbidden"
    assert permissions.open_requests()[0]["approval"]["approved_by"] == []
    await permissions.cancel_all(by="host")


async def test_one_refusal_refuses_a_two_person_request(log: Log, workspace: Path) -> None:
    permissions, _ = broker(log, workspace)
    pending = await ask(permissions, call("execute", command="make deploy"))
    await permissions.answer(pending.request_id, "yes", by="alice", verified=True)
    await permissions.answer(pending.request_id, "no", by="bob", verified=True)
    decision = await permissions.wait(pending)
    assert (decision.by, decision.option) == ("bob", OPTIONS[2])


async def test_a_driver_the_rule_does_not_name_is_forbidden(log: Log, workspace: Path) -> None:
    permissions, _ = broker(log, workspace)
    pending = await ask(permissions, call("delete", "a.txt"))
    with pytest.raises(SessionError) as refused:
        await permissions.answer(pending.request_id, "yes", by="bob", verified=True)
    assert refused.value.code == "forbidden"
    # A driver link's holder typing "host" is not the host console, nor typing "alice" alice.
    with pytest.raises(SessionError):
        await permissions.answer(pending.request_id, "yes", by="host")
    with pytest.raises(SessionError) as typed:
        await permissions.answer(pending.request_id, "yes", by="alice")
    assert typed.value.code == "forbidden"
    assert pending.decision is None
    await permissions.answer(pending.request_id, "yes", by="alice", verified=True)
    assert (await permissions.wait(pending)).by == "alice"
    other = await ask(permissions, call("delete", "b.txt"))
    await permissions.answer(other.request_id, "no", by="carol", role="host")
    assert (await permissions.wait(other)).by == "carol"


async def test_always_is_remembered_for_the_turn_only_and_told_to_the_agent_as_once(
    log: Log, workspace: Path
) -> None:
    permissions, recorder = broker(log, workspace)
    recorder.turn = 1
    first = await ask(permissions, call("edit", "a.txt"))
    assert [o["option_id"] for o in first.data["options"]] == [
        "yes-always",
        "yes",
        "no",
        "no-always",
    ]
    await permissions.answer(first.request_id, "yes-always", by="alice")
    decision = await permissions.wait(first)
    assert decision.option == OPTIONS[1]  # the agent remembers nothing wider than once
    assert (await log.query("c1"))[-1].data["remember"] == "turn"
    again = await ask(permissions, call("edit", "a.txt"))
    assert again.decision is not None
    assert again.decision.option == OPTIONS[1]
    assert again.decision.by == "alice"
    assert (await log.query("c1"))[-1].data["remembered"] == {"scope": "turn", "by": ["alice"]}
    other_file = await ask(permissions, call("edit", "b.txt"))
    assert other_file.decision is None
    await permissions.cancel_all(by="host")
    recorder.turn = 2
    next_turn = await ask(permissions, call("edit", "a.txt"))
    assert next_turn.decision is None
    await permissions.cancel_all(by="host")


async def test_no_policy_keeps_the_first_answer_winning(log: Log, workspace: Path) -> None:
    permissions = PermissionBroker(Recorder(log, "c1"))
    pending = await ask(permissions, call("execute", command="rm -rf /"))
    assert "approval" not in pending.data
    assert len(pending.data["options"]) == 4
    await permissions.answer(pending.request_id, "yes-always", by="alice")
    assert (await permissions.wait(pending)).option == OPTIONS[0]


async def test_the_demo_agent_under_read_only_runs_its_read_without_asking(
    log: Log, workspace: Path
) -> None:
    (workspace / "README.md").write_text("one\ntwo\n")
    session = create_session(
        "demo",
        log,
        workspace=workspace,
        conversation_id="c1",
        demo_delay=0,
        policy=preset("read-only"),
    )
    async with running(session, log) as rec:
        await session.prompt("count", by="alice")
        decided = await rec.wait_item("permission_decision")
        assert decided.created_by == "policy"
        assert decided.data["policy"]["source"] == "preset:read-only"
        await rec.wait_item("tool_result")
        assert rec.of_type("tool_result")[0].data["ok"] is True


async def test_the_demo_agent_is_refused_by_a_deny_rule(log: Log, workspace: Path) -> None:
    (workspace / "README.md").write_text("one\n")
    policy = parse_policy('[[rule]]\nverdict = "deny"\nkind = "read"\n', source="p.toml")
    session = create_session(
        "demo", log, workspace=workspace, conversation_id="c1", demo_delay=0, policy=policy
    )
    async with running(session, log) as rec:
        await session.prompt("count", by="alice")
        decided = await rec.wait_item("permission_decision")
        assert decided.data["option_kind"] == "reject_once"
        result = await rec.wait_item("tool_result")
        assert result.data["ok"] is False


async def test_a_pty_agent_takes_no_policy(log: Log, workspace: Path) -> None:
    with pytest.raises(ValueError, match="approval policy needs a demo or acp"):
        create_session(
            "pty:sh", log, workspace=workspace, conversation_id="c1", policy=preset("ask")
        )


async def test_a_session_scope_outlives_the_turn_but_never_a_deny(
    log: Log, workspace: Path
) -> None:
    text = POLICY + '\n[[rule]]\nverdict = "ask"\nkind = "move"\nremember = "session"\n'
    text += '\n[[rule]]\nverdict = "deny"\nkind = "move"\npaths = "locked/**"\n'
    permissions, recorder = broker(log, workspace, text)
    recorder.turn = 1
    first = await ask(permissions, call("move", "a.txt"))
    await permissions.answer(first.request_id, "yes-always", by="alice")
    await permissions.wait(first)
    recorder.turn = 7
    later = await ask(permissions, call("move", "a.txt"))
    assert later.decision is not None
    assert later.decision.option == OPTIONS[1]
    locked = await ask(permissions, call("move", "locked/a.txt"))
    assert locked.decision is not None
    assert locked.decision.by == "policy"
    assert locked.decision.option == OPTIONS[2]


async def test_a_refusal_remembered_always_refuses_the_same_request_again(
    log: Log, workspace: Path
) -> None:
    permissions, recorder = broker(log, workspace)
    recorder.turn = 1
    first = await ask(permissions, call("edit", "a.txt"))
    await permissions.answer(first.request_id, "no-always", by="bob")
    assert (await permissions.wait(first)).option == OPTIONS[2]
    again = await ask(permissions, call("edit", "a.txt"))
    assert again.decision is not None
    assert again.decision.option == OPTIONS[2]
    assert again.decision.by == "bob"
