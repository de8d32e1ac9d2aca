"""Host messages: every type round-trips through encode and parse; anything else is a BadRequest."""

from __future__ import annotations

import contextlib

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tunnel.app.errors import ERROR_CODES, BadRequest
from tunnel.app.host_messages import (
    Error,
    EventMessage,
    HostMessage,
    ItemMessage,
    Member,
    PresenceMessage,
    Ready,
    SandboxInfo,
    Snapshot,
    decode_host_message,
    encode,
    pack,
    parse,
)

ITEM = {"id": "c:0", "seq": 0, "type": "message", "data": {"role": "user", "text": "hi"}}

EVERY_KIND: list[HostMessage] = [
    Ready(conversation_id="c", role="drive", name="ana", agent_name="demo", agent_kind="chat"),
    Ready(
        conversation_id="c",
        role="view",
        name="bo",
        agent_name="bash",
        agent_kind="terminal",
        sandbox=SandboxInfo(
            enabled=True, writable=["/srv/proj", "/home/bo/.claude"], network=False
        ),
    ),
    Snapshot(items=[ITEM], last_seq=0, more=False, reset=True),
    Snapshot(items=[], last_seq=-1, more=True),
    ItemMessage(item=ITEM),
    EventMessage(event={"conversation_id": "c", "kind": "delta", "data": {"text": "h"}}),
    PresenceMessage(members=[Member(name="ana", role="drive"), Member(name="bo", role="view")]),
    *(Error(code=code, message="no") for code in ERROR_CODES),
]


@pytest.mark.parametrize("message", EVERY_KIND, ids=lambda m: type(m).__name__)
def test_every_host_message_round_trips(message: HostMessage) -> None:
    assert parse(encode(message)) == message


def test_the_wire_names_are_those_of_the_docs() -> None:
    assert decode_host_message(encode(Error(code="forbidden", message="viewers cannot"))) == {
        "op": "error",
        "code": "forbidden",
        "message": "viewers cannot",
    }
    ready = decode_host_message(encode(EVERY_KIND[0]))
    assert ready["agent"] == {"name": "demo", "kind": "chat"}


def test_ready_says_whether_and_how_the_agent_is_sandboxed() -> None:
    sandboxed = decode_host_message(encode(EVERY_KIND[1]))
    assert sandboxed["sandbox"] == {
        "enabled": True,
        "writable": ["/srv/proj", "/home/bo/.claude"],
        "network": False,
    }
    unconfined = Ready(
        conversation_id="c",
        role="drive",
        name="ana",
        agent_name="demo",
        agent_kind="chat",
        sandbox=SandboxInfo(enabled=False),
    )
    wire = decode_host_message(encode(unconfined))
    assert wire["sandbox"] == {"enabled": False, "writable": [], "network": True}
    # A host from before the sandbox says nothing; a teammate then knows nothing.
    assert "sandbox" not in decode_host_message(encode(EVERY_KIND[0]))
    parsed = parse(encode(EVERY_KIND[0]))
    assert isinstance(parsed, Ready)
    assert parsed.sandbox is None


def test_fields_a_newer_host_adds_are_ignored() -> None:
    wire = {"op": "item", "item": ITEM, "priority": 3}
    assert parse(pack(wire)) == ItemMessage(item=ITEM)


@pytest.mark.parametrize(
    "wire",
    [
        [1],
        {"op": "hello"},
        {"op": "ready", "role": "view"},
        {"op": "snapshot", "items": [], "last_seq": True, "more": False},
        {"op": "error", "code": "teapot", "message": "x"},
        {"op": "presence", "members": "ana"},
        {"op": "item", "item": [1, 2]},
        *(
            {
                "op": "ready",
                "conversation_id": "c",
                "role": "view",
                "name": "bo",
                "agent": {"name": "bash", "kind": "terminal"},
                "sandbox": sandbox,
            }
            for sandbox in (
                True,
                {"enabled": "yes", "writable": [], "network": True},
                {"enabled": True, "writable": "/srv", "network": True},
                {"enabled": True, "writable": [1], "network": True},
                {"enabled": True, "writable": []},
            )
        ),
    ],
)
def test_malformed_host_messages_are_bad_requests(wire: object) -> None:
    with pytest.raises(BadRequest):
        parse(msgpack.packb(wire))


@given(st.binary(max_size=256))
def test_parse_raises_nothing_but_bad_request(data: bytes) -> None:
    with contextlib.suppress(BadRequest):
        parse(data)
