"""`ConversationView` learns from earlier items (read after a fresh join showed only the end)
without letting them override what later items said."""

from __future__ import annotations

from typing import Any

from tunnel.terminal.view import ConversationView


def _item(seq: int, kind: str, **data: Any) -> dict[str, Any]:
    return {"seq": seq, "type": kind, "data": data}


def _request(seq: int, request_id: str) -> dict[str, Any]:
    option = {"option_id": "yes", "name": "Yes", "kind": "allow_once"}
    return _item(seq, "permission_request", request_id=request_id, title="t", options=[option])


def test_earlier_items_fill_in_commands_settings_and_open_requests() -> None:
    view = ConversationView()
    assert view.accept(_item(50, "permission_decision", request_id="r2"))
    assert not view.complete
    # Read newest first, as pages walking back give them.
    for item in (
        _item(40, "session_event", what="commands", commands=[{"name": "review"}]),
        _request(30, "r2"),  # answered at seq 50: stays closed
        _request(20, "r1"),
        _item(10, "session_event", what="commands", commands=[{"name": "old"}]),
        _item(5, "session_event", what="settings", modes=None),
    ):
        view.absorb_earlier(item)
    assert [c["name"] for c in view.commands] == ["review"]  # the latest one wins
    assert view.complete
    assert list(view.pending) == ["r1"]


def test_an_earlier_request_queues_before_the_ones_held() -> None:
    view = ConversationView()
    assert view.accept(_request(9, "late"))
    view.absorb_earlier(_request(3, "early"))
    # /allow answers the latest request: still the one that came last.
    assert list(view.pending) == ["early", "late"]


def test_a_request_the_policy_decided_at_once_is_never_open() -> None:
    view = ConversationView()
    for seq, decided in enumerate(({"policy": {"source": "preset:ask"}}, {"remembered": {}}), 1):
        request = {"request_id": f"r{seq}", "title": "t", "options": [], **decided}
        assert view.accept({"seq": seq, "type": "permission_request", "data": request})
    assert view.pending == {}
