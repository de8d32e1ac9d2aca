"""`Transcript`: replies shown as they stream and once when stored, tool calls as one line that
changes in place (or a new line per status without a live part), events in words."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console, RenderableType

from tests.terminal.hostile import dangerous, without_drawing
from tunnel.terminal.render import markdown, render_item
from tunnel.terminal.transcript import Transcript


class Screen:
    """An Output that keeps what was printed, as text, and renders its live part on demand."""

    def __init__(self, *, live: bool) -> None:
        self.live = live
        self.printed = io.StringIO()
        self._console = Console(file=self.printed, width=200, color_system=None)
        self.changes = 0

    def print(self, renderable: RenderableType, *, end: str = "\n") -> None:
        self._console.print(renderable, end=end, soft_wrap=not end)

    def changed(self) -> None:
        self.changes += 1

    def text(self) -> str:
        return self.printed.getvalue()


def _shown(renderables: list[RenderableType]) -> str:
    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None)
    for renderable in renderables:
        console.print(renderable)
    return out.getvalue()


def _delta(response_id: str, text: str, channel: str = "message") -> dict[str, Any]:
    return {"kind": "delta", "data": {"response_id": response_id, "channel": channel, "text": text}}


def _reply(seq: int, response_id: str, text: str) -> dict[str, Any]:
    return {
        "seq": seq,
        "type": "message",
        "response_id": response_id,
        "created_by": "agent",
        "data": {"role": "agent", "text": text},
    }


def _tool(seq: int, type_: str = "tool_call_update", **data: Any) -> dict[str, Any]:
    return {"seq": seq, "type": type_, "data": {"tool_call_id": "call_1", "turn": 1, **data}}


def test_without_a_live_part_a_reply_is_printed_as_it_streams_and_not_again() -> None:
    screen = Screen(live=False)
    transcript = Transcript(screen, markdown=False)
    transcript.event(_delta("r1", "Hello "))
    assert screen.text() == "agent: Hello "  # on the screen before the reply is stored
    transcript.event(_delta("r1", "there"))
    transcript.item(_reply(5, "r1", "Hello there"))
    transcript.item({"seq": 6, "type": "error", "data": {"message": "boom"}})
    assert screen.text() == "agent: Hello there\nerror: boom\n"


def test_with_a_live_part_a_reply_streams_there_then_is_printed_once_as_markdown() -> None:
    screen = Screen(live=True)
    transcript = Transcript(screen)
    transcript.event(_delta("r1", "Hello **wor"))
    assert "Hello" in _shown(transcript.live_view())
    assert screen.text() == ""
    transcript.event(_delta("r1", "ld**"))
    transcript.item(_reply(5, "r1", "Hello **world**"))
    assert transcript.live_view() == []
    printed = screen.text()
    assert printed.count("Hello") == 1
    assert "Hello world" in printed  # markdown: the asterisks are emphasis, not text
    assert printed.startswith("agent Hello world")


def test_a_tool_call_is_one_line_changed_in_place_then_printed_when_it_ends() -> None:
    screen = Screen(live=True)
    transcript = Transcript(screen)
    transcript.item(_tool(1, "tool_call", title="Edit a.py", kind="edit", status="pending"))
    assert _shown(transcript.live_view()).strip() == "tool Edit a.py · edit · pending"
    transcript.item(_tool(2, status="in_progress"))
    # The update has no title: the line keeps its call's, never the id.
    assert _shown(transcript.live_view()).strip() == "tool Edit a.py · edit · in_progress"
    assert screen.text() == ""
    diff = {"type": "diff", "path": "a.py", "old_text": "x\n", "new_text": "y\n"}
    transcript.item(_tool(3, status="completed", content=[diff]))
    assert transcript.live_view() == []
    printed = screen.text()
    # The call's line, then what it changed, as without a live part.
    assert printed.startswith("tool Edit a.py · edit · completed\n")
    assert printed.endswith("-x\n+y\n")
    assert "call_1" not in printed


def test_without_a_live_part_a_tool_call_gets_a_line_per_status() -> None:
    screen = Screen(live=False)
    transcript = Transcript(screen)
    transcript.item(_tool(1, "tool_call", title="Run tests", kind="execute", status="pending"))
    transcript.item(_tool(2, status="in_progress"))
    transcript.item(_tool(3, status="in_progress"))  # no change: no line
    transcript.item(_tool(4, status="failed"))
    assert screen.text().splitlines() == [
        "tool Run tests · execute · pending",
        "tool Run tests · execute · in_progress",
        "tool Run tests · execute · failed",
    ]


def test_a_tool_call_first_seen_in_a_permission_request_keeps_the_requests_title() -> None:
    screen = Screen(live=False)
    transcript = Transcript(screen)
    call = {"tool_call_id": "call_1", "title": "Run tests", "kind": "execute"}
    transcript.item(
        {
            "seq": 1,
            "type": "permission_request",
            "data": {"tool_call_id": "call_1", "turn": 1, "title": "Run tests", "tool_call": call},
        }
    )
    transcript.item(_tool(2, status="completed"))
    assert screen.text().splitlines()[-1] == "tool Run tests · execute · completed"


def test_a_tool_call_remembered_from_unshown_history_keeps_its_title() -> None:
    screen = Screen(live=False)
    transcript = Transcript(screen)
    transcript.remember(_tool(1, "tool_call", title="Read notes", kind="read", status="pending"))
    transcript.item(_tool(2, status="completed"))
    assert screen.text() == "tool Read notes · read · completed\n"


def test_when_the_turn_ends_what_is_still_live_is_printed_as_it_stands() -> None:
    screen = Screen(live=True)
    transcript = Transcript(screen)
    transcript.event({"kind": "status", "data": {"state": "running", "queued": 1}})
    assert "the agent is working, 1 queued" in _shown(transcript.live_view())
    transcript.event(_delta("r1", "cut short"))
    transcript.item(_tool(1, "tool_call", title="Search", kind="search", status="in_progress"))
    transcript.event({"kind": "status", "data": {"state": "idle", "queued": 0}})
    assert transcript.live_view() == []
    assert "agent cut short" in screen.text()
    assert "tool Search · search · in_progress" in screen.text()


def test_a_terminal_agents_unfinished_line_waits_in_the_live_part() -> None:
    screen = Screen(live=True)
    transcript = Transcript(screen)
    transcript.item({"seq": 1, "type": "terminal", "data": {"text": "hello\r\n>>> "}})
    assert screen.text() == "hello\n"
    assert _shown(transcript.live_view()) == ">>> \n"
    transcript.item({"seq": 2, "type": "terminal", "data": {"text": "1+1\r\n2\r\n>>> "}})
    assert screen.text() == "hello\n>>> 1+1\n2\n"


def test_session_events_read_as_sentences_never_as_maps() -> None:
    def said(data: dict[str, Any], by: str = "bob") -> str:
        return render_item(
            {"seq": 9, "type": "session_event", "created_by": by, "data": data}
        ).plain

    assert said({"what": "cancelled"}) == "bob cancelled the turn"
    assert said({"what": "turn_ended", "turn": 3, "stop_reason": "cancelled"}) == (
        "the turn was cancelled"
    )
    assert said({"what": "agent_exited", "code": 3}) == "the agent exited with code 3"
    assert said(
        {"what": "agent_started", "agent": "claude", "version": "1.2", "resumed": True}
    ) == ("the agent started (claude 1.2); it resumed its earlier session")
    unknown = said({"what": "frobnicated", "turn": 2, "detail": {"a": 1, "b": [True, None]}})
    assert unknown == "frobnicated: detail a 1, b yes, none"
    for text in (unknown, said({"what": "cancelled"})):
        assert not set("{}'#") & set(text), text


def test_markdown_shows_entities_escaped_and_links_with_their_target() -> None:
    hostile = "&#x1b;]52;c;eA==&#x07; &#x202e;right [innocent](https://evil.example/) <b>x</b>"
    out = io.StringIO()
    Console(file=out, width=200, color_system="truecolor", force_terminal=True).print(
        markdown(hostile)
    )
    # Colours and bold are the console's own (CSI); nothing else that a terminal acts on.
    assert dangerous(without_drawing(out.getvalue())) == []
    plain = io.StringIO()
    Console(file=plain, width=200, color_system=None).print(markdown(hostile))
    shown = plain.getvalue()
    assert dangerous(shown) == []
    # A control named by an entity is shown as the replacement character; a bidi override
    # is decoded, then escaped.
    assert "\ufffd]52;c;eA==\ufffd" in shown
    assert "\\u202eright" in shown
    assert "innocent (https://evil.example/)" in shown
    assert "<b>x</b>" in shown  # HTML is text, not dropped


def test_a_diff_sent_with_the_call_and_again_with_its_end_is_printed_once() -> None:
    diff = {"type": "diff", "path": "a.py", "old_text": "x\n", "new_text": "y\n"}
    for live in (True, False):
        screen = Screen(live=live)
        transcript = Transcript(screen)
        transcript.item(
            _tool(1, "tool_call", title="Edit a.py", kind="edit", status="pending", content=[diff])
        )
        transcript.item(_tool(2, status="completed", content=[diff]))
        printed = screen.text()
        assert printed.count("+y") == 1, printed
        assert "tool Edit a.py · edit · completed" in printed


def test_a_diff_shown_in_its_permission_request_is_not_printed_again_by_the_update() -> None:
    diff = {"type": "diff", "path": "a.py", "old_text": "x\n", "new_text": "y\n"}
    screen = Screen(live=False)
    transcript = Transcript(screen)
    call = {"tool_call_id": "call_1", "title": "Edit a.py", "kind": "edit", "content": [diff]}
    transcript.item(
        {
            "seq": 1,
            "type": "permission_request",
            "data": {"tool_call_id": "call_1", "turn": 1, "title": "Edit a.py", "tool_call": call},
        }
    )
    transcript.item(_tool(2, status="completed", content=[diff]))
    assert screen.text().count("+y") == 1


def test_a_cancelled_turns_open_tool_call_is_shown_failed_and_not_left_pending() -> None:
    ended = {
        "seq": 3,
        "type": "session_event",
        "created_by": "agent",
        "data": {"what": "turn_ended", "stop_reason": "cancelled", "turn": 1},
    }
    for live in (True, False):
        screen = Screen(live=live)
        transcript = Transcript(screen)
        transcript.event({"kind": "status", "data": {"state": "running", "queued": 0}})
        transcript.item(_tool(1, "tool_call", title="Run tests", kind="execute", status="pending"))
        transcript.item(
            _tool(2, "tool_call", tool_call_id="call_2", title="Done", status="completed")
        )
        transcript.item(ended)
        transcript.event({"kind": "status", "data": {"state": "idle", "queued": 0}})
        transcript.item(_tool(4, status="failed"))  # the agent says so too, later
        lines = [line for line in screen.text().splitlines() if not line.startswith("[agent")]
        after = lines[lines.index("the turn was cancelled") :]
        assert after == ["the turn was cancelled", "tool Run tests · execute · failed"], lines
        assert transcript.live_view() == []


def test_a_tool_call_of_a_cancelled_turn_in_unshown_history_is_remembered_failed() -> None:
    screen = Screen(live=True)
    transcript = Transcript(screen)
    transcript.remember(_tool(1, "tool_call", title="Run tests", kind="execute", status="pending"))
    ended = {"what": "turn_ended", "stop_reason": "cancelled", "turn": 1}
    transcript.remember({"seq": 2, "type": "session_event", "data": ended})
    transcript.item(_tool(3, status="failed"))
    assert screen.text() == ""


def test_a_failed_or_empty_tool_result_prints_no_empty_result_line() -> None:
    for live in (True, False):
        screen = Screen(live=live)
        transcript = Transcript(screen)
        transcript.item(_tool(1, "tool_call", title="Run make", status="in_progress"))
        transcript.item(_tool(2, status="failed"))
        transcript.item({"seq": 3, "type": "tool_result", "data": {"ok": False, "output": ""}})
        transcript.item({"seq": 4, "type": "tool_result", "data": {"ok": True, "output": " \n"}})
        transcript.item({"seq": 5, "type": "tool_result", "data": {"ok": True, "output": "42"}})
        lines = screen.text().splitlines()
        assert "result 42" in lines, live
        assert [line for line in lines if line.startswith("result")] == ["result 42"], live
        # The call's own line says how it ended.
        assert any("Run make" in line and "failed" in line for line in lines), live
