"""The host's list of conversations as a teammate parses it: every field checked, bounded."""

from __future__ import annotations

from typing import Any

import pytest

from tunnel.app.conversation_list import (
    MAX_BY_LENGTH,
    MAX_LISTED,
    ConversationList,
    ConversationStarted,
    parse_conversation_message,
)
from tunnel.app.errors import BadRequest
from tunnel.app.requests import MAX_AGENT_NAME_LENGTH
from tunnel.e2e.opening import MAX_CONVERSATION_LENGTH
from tunnel.handshake import MAX_NAME_LENGTH


def entry(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "main",
        "agent": "demo",
        "by": "hannah",
        "state": "idle",
        "pending": 0,
        "last": 1.5,
        "started": 1,
    }
    return {**base, **fields}


def listing(*entries: dict[str, Any], agents: list[Any] | None = None) -> dict[str, Any]:
    return {"op": "conversations", "agents": agents or ["demo"], "max": 8, "list": list(entries)}


def test_a_list_and_a_start_are_read_and_found_by_id_prefix_or_number() -> None:
    parsed = parse_conversation_message(
        listing(entry(), entry(id="c-1a2b3c4d", pending=2, state="waiting"))
    )
    assert isinstance(parsed, ConversationList)
    assert parsed.pending == 2
    assert parsed.find("2") is parsed.conversations[1]
    assert parsed.find("c-1a") is parsed.conversations[1]
    assert parsed.find("main") is parsed.conversations[0]
    assert parsed.find("x") is None
    started = parse_conversation_message({"op": "conversation_started", "conversation": "c-1"})
    assert started == ConversationStarted(conversation="c-1")


@pytest.mark.parametrize(
    "message",
    [
        listing(entry(id="")),
        listing(entry(id="x" * (MAX_CONVERSATION_LENGTH + 1))),
        listing(entry(agent="a" * (MAX_AGENT_NAME_LENGTH + 1))),
        listing(entry(by="b" * (MAX_BY_LENGTH + 1))),
        listing(entry(state="sleeping")),
        listing(entry(pending=-1)),
        listing(entry(pending=True)),
        listing(entry(last="yesterday")),
        listing(entry(started=True)),
        listing(*[entry()] * (MAX_LISTED + 1)),
        listing(entry(), agents=["a" * (MAX_AGENT_NAME_LENGTH + 1)]),
        listing(entry(), agents=[1]),
        {"op": "conversations", "agents": ["demo"], "max": 0, "list": []},
        {"op": "conversation_started", "conversation": "x" * (MAX_CONVERSATION_LENGTH + 1)},
        {"op": "conversation_started"},
        {"op": "conversations"},
    ],
)
def test_a_malformed_or_oversized_message_is_refused_whole(message: dict[str, Any]) -> None:
    with pytest.raises(BadRequest):
        parse_conversation_message(message)


def test_the_starters_name_is_bounded_as_a_display_name_is() -> None:
    assert MAX_BY_LENGTH == MAX_NAME_LENGTH
