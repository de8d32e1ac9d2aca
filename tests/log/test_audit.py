"""`tunnel log audit` as a real process: per turn who asked, what the agent asked to do, who
decided and by which rule; fields a log lacks are left out, never an error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from tunnel.log import NewItem, SQLiteStore
from tunnel.process.exit_codes import EXIT_CONFIG

from .helpers import tunnel


def new(type: str, by: str, **data: Any) -> NewItem:
    return NewItem(type=type, data=data, created_by=by)


def make_log(path: Path) -> None:
    rule = {"source": "team.toml", "index": 2, "line": 9, "rule": 'deny edit "**/.env"'}
    items = [
        new("message", "alice", role="user", text="fix the tests\nplease"),  # 0: turn 0
        new(
            "permission_request",
            "agent",
            request_id="r1",
            title="Run pytest",
            turn=0,
            tool_call={"kind": "execute"},
            approval={
                "answer": ["drivers"],
                "approvals": 2,
                "approved_by": [],
                "rule": {"index": 1, "line": 4, "rule": 'ask execute "pytest*"'},
            },
        ),
        new("message", "agent", role="agent", text="running", turn=0),
        new(
            "permission_approval",
            "alice",
            request_id="r1",
            option_id="allow",
            option_name="Allow once",
            option_kind="allow_once",
            approved_by=["alice"],
            needed=1,
            turn=0,
        ),
        new(
            "permission_decision",
            "bob",
            request_id="r1",
            outcome="selected",
            option_id="allow",
            option_name="Allow once",
            option_kind="allow_once",
            approved_by=["alice", "bob"],
            turn=0,
        ),
        new("message", "carol", role="user", text="edit .env"),  # 5: turn 5
        new("permission_request", "agent", request_id="r2", title="Edit .env", turn=5),
        new(
            "permission_decision",
            "policy",
            request_id="r2",
            outcome="selected",
            option_id="reject",
            option_name="Reject",
            option_kind="reject_once",
            policy=rule,
            turn=5,
        ),
        # Written before decisions said more: only who answered.
        new("permission_request", "agent", request_id="r3", title="Read notes"),
        new("permission_decision", "dave", request_id="r3"),
        new("message", "erin", role="user", text="nothing to ask"),  # 10: turn 10
    ]

    async def fill() -> None:
        store = await SQLiteStore.open(path)
        try:
            await store.append("main", items)
        finally:
            await store.aclose()

    anyio.run(fill)


def test_audit_prints_who_asked_who_decided_and_by_which_rule(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    make_log(db)
    result = tunnel("log", "audit", "--db", str(db))
    assert result.returncode == 0, result.stderr
    lines = [line.split("  ", 2)[-1] if line.startswith("turn") else line for line in
             result.stdout.splitlines()]  # fmt: skip
    assert lines == [
        'alice asked: "fix the tests"',
        '  #1 agent asked: [execute] "Run pytest"; may answer: drivers; needs 2 approvals; '
        'rule 1 line 4: "ask execute "pytest*""',
        "  #3 approved by alice: Allow once; 1 more needed",
        "  #4 decided by bob: Allow once (allow_once); approved by alice, bob",
        'carol asked: "edit .env"',
        '  #6 agent asked: "Edit .env"',
        "  #7 decided by policy: Reject (reject_once); by rule 2 of team.toml line 9: "
        '"deny edit "**/.env""',
        'erin asked: "nothing to ask"',
        "  no permission requests",
        "outside any turn:",
        '  #8 agent asked: "Read notes"',
        "  #9 decided by dave",
        "chain: unsigned up to seq 10",
    ]
    assert result.stdout.startswith("turn #0  ")


def test_audit_of_an_unknown_conversation_is_one_line_and_exit_2(tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    make_log(db)
    result = tunnel("log", "audit", "nope", "--db", str(db))
    assert result.returncode == EXIT_CONFIG
    assert result.stderr == "tunnel log: no conversation 'nope'\n"
