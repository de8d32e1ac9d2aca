"""Remembered answers: for the turn or the session, keyed by rule, kind, command and paths."""

from __future__ import annotations

from tunnel.policy import Rule, ToolRequest
from tunnel.policy.decide import Verdict
from tunnel.policy.memory import MAX_REMEMBERED, Memory, Remembered, key_of

RULE = Rule(index=4, line=9, verdict="ask", remember="session")


def key(command: str) -> tuple[int, str, str | None, tuple[str | None, ...]]:
    request = ToolRequest(kind="execute", command=command)
    return key_of(Verdict(rule=RULE, matched=True), request)


def answer(scope: str, turn: int | None = 1) -> Remembered:
    return Remembered(allow=True, scope=scope, turn=turn, by=("alice",))


def test_a_turn_answer_holds_in_its_turn_only() -> None:
    memory = Memory()
    memory.remember(key("make"), answer("turn", turn=3))
    assert memory.recall(key("make"), turn=3) is not None
    assert memory.recall(key("make"), turn=4) is None
    assert memory.recall(key("make test"), turn=3) is None


def test_a_session_answer_holds_across_turns_and_once_is_never_kept() -> None:
    memory = Memory()
    memory.remember(key("make"), answer("session"))
    memory.remember(key("ls"), answer("once"))
    assert memory.recall(key("make"), turn=99) is not None
    assert memory.recall(key("ls"), turn=1) is None


def test_the_oldest_answer_is_forgotten_first() -> None:
    memory = Memory()
    for n in range(MAX_REMEMBERED + 1):
        memory.remember(key(f"cmd {n}"), answer("session"))
    assert memory.recall(key("cmd 0"), turn=1) is None
    assert memory.recall(key(f"cmd {MAX_REMEMBERED}"), turn=1) is not None
