"""`/open PATH[:LINE]` and `/login METHOD_ID` in attach: what they send, how a `file` answer is
printed (numbered, the line asked for marked, wire text sanitised by the screen), and how the
agent's asking for a login and its outcome are said."""

from __future__ import annotations

from tunnel.app.file_view import FileWindow, encode_file, parse_file
from tunnel.app.requests import Authenticate, ReadFile, decode_request, encode_request
from tunnel.teammate.attach import file_lines
from tunnel.terminal.commands import Say, parse_line
from tunnel.terminal.render import render_item
from tunnel.terminal.view import ConversationView


def test_open_and_login_send_their_requests() -> None:
    view = ConversationView()
    assert parse_line("/open src/a b.py:12", view) == ReadFile(path="src/a b.py", line=12)
    assert parse_line("/open C:notes", view) == ReadFile(path="C:notes")
    assert isinstance(parse_line("/open", view), Say)
    assert parse_line("/login password", view) == Authenticate(method_id="password")
    assert isinstance(parse_line("/login", view), Say)
    for request in (ReadFile(path="a", line=3, find="x = 1"), Authenticate(method_id="m")):
        assert decode_request(encode_request(request)) == request


def test_a_file_answer_prints_numbered_with_the_line_marked() -> None:
    lines = [f"line {n}" for n in range(41, 241)]
    window = parse_file(
        encode_file(
            FileWindow(path="a.py", line=100, shown="src/a.py", first=41, lines=lines, total=900)
        )
    )
    printed = file_lines(window, around=10)
    assert printed[0] == "src/a.py (lines 95-104 of 900)"
    assert printed[1] == "  95 | line 95"
    assert printed[6] == ">100 | line 100"
    refused = parse_file(encode_file(FileWindow(path="/x", line=None, refused="no")))
    assert refused.refused == "no"


def test_a_login_the_agent_asks_for_is_said_with_its_methods_and_its_outcome() -> None:
    def shown(created_by: str, **data: object) -> str:
        item = {"seq": 1, "type": "session_event", "created_by": created_by, "data": data}
        return render_item(item).plain

    asked = shown(
        "agent",
        what="auth_required",
        reason="it needs a login to answer",
        methods=[{"id": "password", "name": "Password"}, {"id": "browser", "name": "Browser"}],
    )
    assert "needs a login (it needs a login to answer)" in asked
    assert "password (Password), browser (Browser)" in asked
    assert "bob logged the agent in (password)" in shown(
        "bob", what="authenticated", method_id="password"
    )
    assert "bob's login (browser) failed: no browser here" in shown(
        "bob", what="auth_failed", method_id="browser", reason="no browser here"
    )
