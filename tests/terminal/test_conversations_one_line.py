"""A conversation's fields are one line each where a terminal shows them: a name someone chose
cannot add a line that reads as another conversation of `/list`, or break the prompt."""

from __future__ import annotations

from tunnel.app.conversation_list import ConversationList, parse_conversation_message
from tunnel.terminal.conversations import OtherWaiting, listing_lines

FORGED = "eve\n2. main: demo, started by host, idle  (shown here)\t"


def test_a_name_with_line_breaks_prints_as_one_line_of_the_list() -> None:
    parsed = parse_conversation_message(
        {
            "op": "conversations",
            "agents": ["demo"],
            "max": 8,
            "list": [
                {
                    "id": "c-1\r\n3. c-2",
                    "agent": "demo",
                    "by": FORGED,
                    "state": "waiting",
                    "pending": 1,
                    "last": 100.0,
                    "started": 50.0,
                }
            ],
        }
    )
    assert isinstance(parsed, ConversationList)
    lines = listing_lines(parsed, current=None, now=100.0)
    assert len(lines) == 2
    for line in lines:
        assert not set(line) & set("\n\r\t")
    assert "eve\\n2. main" in lines[1]
    waiting = OtherWaiting()
    waiting.update(parsed, "main")
    for shown in (waiting.prompt("> "), waiting.line()):
        assert not set(shown) & set("\n\r")
