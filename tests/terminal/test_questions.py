"""The agent's questions in a terminal: shown escaped, answered with /answer."""

from __future__ import annotations

from typing import Any

from tunnel.agents.elicitation import form_fields
from tunnel.app.requests import ElicitationAnswer
from tunnel.terminal.commands import Say, parse_line
from tunnel.terminal.render import render_item
from tunnel.terminal.view import ConversationView

from ..agents.fake_acp_agent import FORM


def asked(request_id: str = "ask_1", **extra: Any) -> dict[str, Any]:
    data = {"request_id": request_id, "message": "Pick", "fields": form_fields(FORM), **extra}
    return {"seq": 5, "type": "elicitation_request", "created_by": "agent", "data": data}


def test_a_question_is_numbered_with_its_choices_and_escaped() -> None:
    item = asked(message="Pick \x1b]52;c;aGk=\x07 one")
    shown = render_item(item).plain
    assert "\x1b" not in shown
    assert "\x07" not in shown
    assert "1. Name (text, length 1..20, required)" in shown
    assert "2. Color (one of: 1 r (Red), 2 g (Green), required)" in shown
    assert "/answer N=VALUE" in shown


def test_answer_fills_fields_by_number_name_and_label() -> None:
    view = ConversationView()
    assert view.accept(asked())
    command = parse_line("/answer 1='Ann Lee' color=Green 3=4 urgent=yes", view)
    assert command == ElicitationAnswer(
        request_id="ask_1",
        action="accept",
        content={"name": "Ann Lee", "color": "g", "count": 4, "urgent": True},
    )
    assert parse_line("/answer decline", view) == ElicitationAnswer(
        request_id="ask_1", action="decline"
    )
    said = parse_line("/answer 9=x", view)
    assert isinstance(said, Say)
    assert "1 name, 2 color" in said.text
    said = parse_line("/answer 3=many", view)
    assert isinstance(said, Say)
    assert "integer" in said.text


def test_an_answered_question_is_no_longer_waiting() -> None:
    view = ConversationView()
    view.accept(asked())
    response = {"request_id": "ask_1", "action": "cancel"}
    view.accept({"seq": 6, "type": "elicitation_response", "created_by": "bob", "data": response})
    said = parse_line("/answer decline", view)
    assert isinstance(said, Say)
    assert said.text == "no question is waiting"
    view.absorb_earlier(asked())  # an earlier copy cannot reopen it
    assert view.questions == {}
