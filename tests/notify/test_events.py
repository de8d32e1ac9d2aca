"""What the log says becomes notification events: a request or a question that waits, its end, a
turn's end."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tunnel.log import Event, Item
from tunnel.notify.events import QUESTION, Decided, Notable, TurnEnded, Waiting
from tunnel.notify.webhook import event_fields, ntfy_message


def item(seq: int, type_: str, data: dict[str, Any], by: str = "agent") -> Item:
    return Item(
        seq=seq,
        conversation_id="main",
        type=type_,
        status=None,
        response_id=None,
        created_at=datetime.now(UTC),
        created_by=by,
        data=data,
    )


REQUEST = {
    "request_id": "perm_1",
    "title": "Run tests?",
    "tool_call": {"kind": "execute", "input": {"command": ["pytest", "-q"]}},
    "options": [{"option_id": "allow_once", "name": "Allow", "kind": "allow_once"}],
}


def test_a_waiting_request_then_its_decision() -> None:
    notable = Notable()
    (waiting,) = notable.receive(item(1, "permission_request", REQUEST))
    assert isinstance(waiting, Waiting)
    assert waiting.command == "pytest -q"
    assert waiting.kind == "execute"
    assert waiting.answer == ("host", "drivers")
    assert notable.receive(item(2, "permission_request", REQUEST)) == []
    decision = {"request_id": "perm_1", "outcome": "selected", "option_kind": "allow_once"}
    (decided,) = notable.receive(item(3, "permission_decision", decision, by="bob"))
    assert decided == Decided(
        request_id="perm_1", outcome="selected", option_kind="allow_once", by="bob"
    )
    assert notable.receive(item(4, "permission_decision", decision)) == []


def test_a_request_the_policy_decided_at_once_never_waits() -> None:
    notable = Notable()
    assert notable.receive(item(1, "permission_request", {**REQUEST, "policy": {}})) == []
    assert notable.receive(item(2, "permission_request", {**REQUEST, "remembered": {}})) == []


def test_who_may_answer_follows_the_rule() -> None:
    notable = Notable()
    named = {**REQUEST, "approval": {"answer": ["alice"]}}
    (waiting,) = notable.receive(item(1, "permission_request", named))
    assert isinstance(waiting, Waiting)
    assert waiting.may_answer(role="drive", person="alice")
    assert not waiting.may_answer(role="drive", person=None)
    assert not waiting.may_answer(role="view", person="alice")


def test_a_turn_ends_when_the_agent_goes_idle() -> None:
    notable = Notable()

    def status(state: str) -> Event:
        return Event(conversation_id="main", kind="status", data={"state": state, "queued": 0})

    assert notable.receive(status("idle")) == []
    assert notable.receive(status("running")) == []
    assert notable.receive(status("running")) == []
    assert notable.receive(status("idle")) == [TurnEnded()]


def test_a_question_waits_for_any_driver_and_its_answer_ends_it() -> None:
    notable = Notable()
    asked = {"request_id": "ask_1", "message": "Which colour?", "fields": []}
    (waiting,) = notable.receive(item(1, "elicitation_request", asked))
    assert waiting == Waiting(
        request_id="ask_1",
        title="Which colour?",
        kind=QUESTION,
        command=None,
        options=(),
        answer=("host", "drivers"),
    )
    assert waiting.may_answer(role="drive", person=None)
    assert not waiting.may_answer(role="view", person=None)
    assert notable.receive(item(2, "elicitation_request", asked)) == []
    response = {"request_id": "ask_1", "action": "decline"}
    (decided,) = notable.receive(item(3, "elicitation_response", response, by="bob"))
    assert decided == Decided(
        request_id="ask_1", outcome="declined", option_kind="", by="bob", kind=QUESTION
    )
    assert notable.receive(item(4, "elicitation_response", response)) == []
    fields = event_fields(decided, host_id="h", conversation_id="main", details=False)
    assert (fields["event"], fields["kind"], fields["outcome"]) == (
        "decided",
        "question",
        "declined",
    )
    text, _ = ntfy_message(event_fields(waiting, host_id="h", conversation_id="main", details=True))
    assert text == "The agent asks a question and waits for an answer.\nWhich colour?"
