"""Typed lines mean the same at the host console and in `tunnel attach`."""

from __future__ import annotations

from tunnel.app.requests import Cancel, PermissionAnswer, Prompt
from tunnel.terminal.commands import Quit, Revoke, Say, parse_line
from tunnel.terminal.view import ConversationView


def _view_with_request() -> ConversationView:
    view = ConversationView()
    view.accept(
        {
            "seq": 3,
            "type": "permission_request",
            "data": {
                "request_id": "r1",
                "title": "run tool",
                "options": [
                    {"option_id": "yes", "name": "Allow", "kind": "allow_once"},
                    {"option_id": "no", "name": "Reject", "kind": "reject_once"},
                ],
            },
        }
    )
    return view


def test_plain_text_is_a_prompt_and_blank_is_nothing() -> None:
    assert parse_line("  fix the bug ", {}) == Prompt(text="fix the bug")
    assert parse_line("   ", {}) is None


def test_allow_and_deny_pick_the_matching_option_of_the_latest_request() -> None:
    view = _view_with_request()
    assert parse_line("/allow", view.pending) == PermissionAnswer(request_id="r1", option_id="yes")
    assert parse_line("/deny r1", view.pending) == PermissionAnswer(request_id="r1", option_id="no")
    assert isinstance(parse_line("/allow r9", view.pending), Say)


def test_a_decision_closes_the_request_so_allow_has_nothing_to_answer() -> None:
    view = _view_with_request()
    view.accept({"seq": 4, "type": "permission_decision", "data": {"request_id": "r1"}})
    assert parse_line("/allow", view.pending) == Say(text="no permission request is waiting")


def test_duplicate_items_are_dropped_by_seq() -> None:
    view = ConversationView()
    assert view.accept({"seq": 0, "type": "message", "data": {}})
    assert not view.accept({"seq": 0, "type": "message", "data": {}})
    assert view.last_seq == 0


def test_other_commands() -> None:
    assert parse_line("/cancel", {}) == Cancel()
    assert parse_line("/quit", {}) == Quit()
    assert parse_line("/revoke", {}) == Revoke()
    assert isinstance(parse_line("/frobnicate", {}), Say)
