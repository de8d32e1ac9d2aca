"""The host's conversations in words (`/list`) and the requests waiting in the others: every
field from the wire shown escaped and cut short, one bell per request that starts waiting."""

from __future__ import annotations

from typing import Any

from tests.terminal.hostile import WIRE, dangerous
from tunnel.app.conversation_list import (
    MAX_BY_LENGTH,
    ConversationList,
    parse_conversation_message,
)
from tunnel.app.requests import MAX_AGENT_NAME_LENGTH
from tunnel.e2e.opening import MAX_CONVERSATION_LENGTH
from tunnel.terminal.conversations import MAX_FIELD_SHOWN, OtherWaiting, ago, listing_lines


def _listing(*entries: dict[str, Any], agents: list[str] | None = None) -> ConversationList:
    base = {"agent": "demo", "by": "hannah", "state": "idle", "pending": 0, "last": 100.0}
    parsed = parse_conversation_message(
        {
            "op": "conversations",
            "agents": ["demo", "other"] if agents is None else agents,
            "max": 8,
            "list": [{**base, "started": 50.0, **entry} for entry in entries],
        }
    )
    assert isinstance(parsed, ConversationList)
    return parsed


def test_list_says_each_conversation_in_words_numbered_as_switch_counts_them() -> None:
    listing = _listing(
        {"id": "c-1a2b3c4d", "agent": "other", "by": "ann", "state": "waiting", "pending": 2},
        {"id": "main", "state": "working", "last": 40.0},
        {"id": "c-00000000", "state": "closed", "last": 90.0},
    )
    lines = listing_lines(listing, current="main", now=100.0)
    assert lines == [
        "2 conversations open (at most 8); /new NAME starts one with: demo, other",
        "1. c-1a2b3c4d: other, started by ann, waiting, 2 waiting, last active just now",
        "2. main: demo, started by hannah, working, last active 1 min ago  (shown here)",
        "3. c-00000000: demo, started by hannah, closed, last active 10 s ago",
    ]


def test_a_hostile_list_prints_escaped_and_cut_short() -> None:
    # As long as the host may send them (the parser refuses longer: tests/app).
    huge = "c-" + "\u202e" * 10 + "x" * (MAX_CONVERSATION_LENGTH - 12)
    listing = _listing(
        {"id": huge, "agent": WIRE[:MAX_AGENT_NAME_LENGTH], "by": WIRE[:MAX_BY_LENGTH]},
        {"id": WIRE[:MAX_CONVERSATION_LENGTH], "agent": "a\x1b]52;c;eA==\x07", "by": "\x9b2J"},
        agents=[WIRE[:MAX_AGENT_NAME_LENGTH], "x" * MAX_AGENT_NAME_LENGTH],
    )
    lines = listing_lines(listing, current=WIRE[:MAX_CONVERSATION_LENGTH], now=0.0)
    for line in lines:
        assert dangerous(line) == []
        # Five fields at most, each cut to its bound, and the words around them.
        assert len(line) < 5 * MAX_FIELD_SHOWN + 120
    assert "\\u202e" in lines[1]
    assert "(shown here)" in lines[2]
    waiting = OtherWaiting()
    waiting.update(
        _listing({"id": huge, "pending": 1}, {"id": WIRE[:MAX_CONVERSATION_LENGTH], "pending": 3}),
        "main",
    )
    prompt = waiting.prompt("> ")
    assert dangerous(prompt) == []
    assert prompt.startswith("[4 waiting in c-\\u202e")
    assert len(prompt) < 80


def test_each_request_that_starts_waiting_elsewhere_counts_once() -> None:
    waiting = OtherWaiting()
    # What waits in other conversations when first listed is news, as on a fresh attach.
    assert waiting.update(_listing({"id": "main"}, {"id": "c-1", "pending": 1}), "main") == 1
    assert waiting.prompt("> ") == "[1 waiting in c-1] > "
    assert waiting.update(_listing({"id": "main"}, {"id": "c-1", "pending": 1}), "main") == 0
    assert waiting.update(_listing({"id": "main"}, {"id": "c-1", "pending": 2}), "main") == 1
    # The one shown counts nothing here: its own requests ring by their ids.
    busy = _listing({"id": "main", "pending": 5}, {"id": "c-1", "pending": 2})
    assert waiting.update(busy, "main") == 0
    assert waiting.count == 2
    # Answered, then a new one: it rings.
    assert waiting.update(_listing({"id": "main"}, {"id": "c-1"}), "main") == 0
    assert waiting.prompt("> ") == "> "
    assert waiting.update(_listing({"id": "main"}, {"id": "c-1", "pending": 1}), "main") == 1


def test_leaving_a_conversation_whose_requests_were_told_rings_nothing() -> None:
    waiting = OtherWaiting()
    waiting.update(_listing({"id": "main"}, {"id": "c-1"}), "c-1")
    # c-1 was shown with one request waiting (told by its id); main is shown now. The list
    # held from before that request counts again, but takes nothing back.
    waiting.leave("c-1", 1)
    waiting.recount(_listing({"id": "main"}, {"id": "c-1"}), "main")
    assert waiting.count == 0
    assert waiting.update(_listing({"id": "main"}, {"id": "c-1", "pending": 1}), "main") == 0
    assert waiting.prompt("> ") == "[1 waiting in c-1] > "
    # Switching back: that request rang already.
    assert waiting.seen("c-1") == 1
    many = _listing(*({"id": f"c-{n}", "pending": 1} for n in range(5)))
    waiting.update(many, "main")
    assert waiting.prompt("> ") == "[5 waiting in c-0, c-1 and 3 more] > "


def test_ago_says_how_long_in_words() -> None:
    assert [ago(s) for s in (0, 1.5, 12, 61, 7200, 200000)] == [
        "just now",
        "just now",
        "12 s ago",
        "1 min ago",
        "2 h ago",
        "2 d ago",
    ]
