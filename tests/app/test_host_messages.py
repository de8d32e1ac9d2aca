"""Host messages: every type round-trips through encode and parse; anything else is a BadRequest."""

from __future__ import annotations

import contextlib
import dataclasses
import re

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunnel.app.errors import ERROR_CODES, BadRequest
from tunnel.app.host_messages import (
    BroadcastStart,
    Error,
    EventMessage,
    HistoryPage,
    HostMessage,
    ItemMessage,
    Member,
    PresenceDelta,
    PresenceMessage,
    Ready,
    SandboxInfo,
    Snapshot,
    TerminalSize,
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
    Ready(
        conversation_id="c",
        role="view",
        name="cy",
        agent_name="bash",
        agent_kind="terminal",
        terminal=TerminalSize(cols=1000, rows=1),
    ),
    Snapshot(items=[ITEM], last_seq=0, more=False, reset=True),
    Snapshot(items=[], last_seq=-1, more=True),
    Snapshot(items=[ITEM], last_seq=0, more=True, first_seq=0, earlier=False),
    Snapshot(items=[], last_seq=799, more=True, first_seq=800, earlier=True),
    HistoryPage(items=[ITEM], before=1, more=False),
    HistoryPage(items=[], before=0, more=False),
    ItemMessage(item=ITEM),
    EventMessage(event={"conversation_id": "c", "kind": "delta", "data": {"text": "h"}}),
    PresenceMessage(
        members=[Member(name="ana", role="drive"), Member(name="bo", role="view")], count=2
    ),
    PresenceMessage(
        members=[Member(name="ana", role="drive", id=0), Member(name="bo", role="view", id=4)],
        count=900,
        you=4,
    ),
    PresenceDelta(joined=[Member(name="cy", role="view", id=5)], left=[0, 2], count=3),
    PresenceDelta(joined=[], left=[], count=70000),
    Snapshot(items=[], last_seq=9, more=True, first_seq=10, earlier=True, context=[ITEM]),
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


def test_ready_gives_a_terminal_agents_size_and_nothing_for_a_chat_agent() -> None:
    terminal = Ready(
        conversation_id="c",
        role="view",
        name="cy",
        agent_name="bash",
        agent_kind="terminal",
        terminal=TerminalSize(cols=120, rows=40),
    )
    assert decode_host_message(encode(terminal))["terminal"] == {"cols": 120, "rows": 40}
    # A chat agent, or a host from before the field: a teammate keeps its own size.
    assert "terminal" not in decode_host_message(encode(EVERY_KIND[0]))
    parsed = parse(encode(EVERY_KIND[1]))
    assert isinstance(parsed, Ready)
    assert parsed.terminal is None


def test_a_snapshot_says_where_it_starts_and_a_history_page_what_it_answers() -> None:
    snapshot = Snapshot(items=[ITEM], last_seq=0, more=False, first_seq=0, earlier=True)
    assert decode_host_message(encode(snapshot)) == {
        "op": "snapshot",
        "items": [ITEM],
        "last_seq": 0,
        "more": False,
        "reset": False,
        "first_seq": 0,
        "earlier": True,
    }
    assert decode_host_message(encode(HistoryPage(items=[ITEM], before=1, more=True))) == {
        "op": "history",
        "items": [ITEM],
        "before": 1,
        "more": True,
    }
    # A host from before bounded history says neither: the client offers nothing earlier.
    old = parse(pack({"op": "snapshot", "items": [], "last_seq": 3, "more": False}))
    assert isinstance(old, Snapshot)
    assert (old.first_seq, old.earlier) == (None, False)


def test_a_snapshots_context_and_presence_deltas_on_the_wire() -> None:
    snapshot = Snapshot(
        items=[], last_seq=9, more=False, first_seq=10, earlier=True, context=[ITEM]
    )
    assert decode_host_message(encode(snapshot))["context"] == [ITEM]
    # No context, no field: pages after the first, resumes, hosts from before it.
    plain = Snapshot(items=[], last_seq=9, more=False, first_seq=10, earlier=True)
    assert "context" not in decode_host_message(encode(plain))
    full = PresenceMessage(members=[Member(name="ana", role="drive", id=3)], count=51, you=3)
    assert decode_host_message(encode(full)) == {
        "op": "presence",
        "members": [{"name": "ana", "role": "drive", "id": 3}],
        "count": 51,
        "you": 3,
    }
    delta = PresenceDelta(joined=[Member(name="bo", role="view", id=7)], left=[3], count=51)
    assert decode_host_message(encode(delta)) == {
        "op": "presence",
        "joined": [{"name": "bo", "role": "view", "id": 7}],
        "left": [3],
        "count": 51,
    }


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
        {"op": "snapshot", "items": [], "last_seq": 1, "more": False, "first_seq": "0"},
        {"op": "snapshot", "items": [], "last_seq": 1, "more": False, "first_seq": True},
        {"op": "history", "items": [], "more": False},
        {"op": "history", "items": [], "before": 3, "more": 1},
        {"op": "history", "items": {}, "before": 3, "more": False},
        *(
            {"op": "snapshot", "items": [], "last_seq": 1, "more": False, "context": context}
            for context in ({}, [1], [{"seq": "1"}], [{"type": "plan"}], [{"seq": -1}], "x")
        ),
        {"op": "presence", "members": [1]},
        {"op": "presence", "members": [{"name": "a", "role": "view", "id": "1"}]},
        {"op": "presence", "members": [{"name": "a", "role": "view", "id": -1}]},
        {"op": "presence", "members": [], "you": "me"},
        {"op": "presence", "members": [], "you": True},
        {"op": "presence", "members": [], "joined": [], "left": []},
        {"op": "presence", "joined": [], "left": [], "you": 1},
        {"op": "presence", "joined": [{"name": "a", "role": "view"}], "left": []},
        {"op": "presence", "joined": [{"name": "a", "role": "view", "id": True}], "left": []},
        {"op": "presence", "joined": [{"name": 1, "role": "view", "id": 1}], "left": []},
        {"op": "presence", "joined": [], "left": ["1"]},
        {"op": "presence", "joined": [], "left": [-2]},
        {"op": "presence", "joined": [], "left": 1},
        {"op": "presence", "joined": []},
        # Since version 4 every presence message counts the members, listed or not.
        {"op": "presence", "members": []},
        {"op": "presence", "joined": [], "left": []},
        *(
            {"op": "presence", "members": [], "count": count}
            for count in (-1, "1", True, 1.0, None)
        ),
        {"op": "presence", "joined": [], "left": [], "count": -3},
        {"op": "presence", "left": []},
        {"op": "presence"},
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
        *(
            {
                "op": "ready",
                "conversation_id": "c",
                "role": "view",
                "name": "bo",
                "agent": {"name": "bash", "kind": "terminal"},
                "terminal": terminal,
            }
            for terminal in (
                [80, 24],
                {"cols": 80},
                {"cols": 0, "rows": 24},
                {"cols": 80, "rows": 1001},
                {"cols": True, "rows": 24},
                {"cols": 80.0, "rows": 24},
                {"cols": "80", "rows": 24},
                {"cols": 80, "rows": 24, "pixels": 1},
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


def test_presence_members_are_the_members_their_constructor_makes() -> None:
    # Every field set, and the same values, equality, hash and repr as the constructor's.
    assert [field.name for field in dataclasses.fields(Member)] == [
        "name",
        "role",
        "id",
        "verified",
    ]
    wire = {
        "op": "presence",
        "members": [
            {"name": "ana", "role": "drive", "id": 3, "verified": True},
            {"name": "bo", "role": "view", "verified": 1},
        ],
        "count": 2,
    }
    parsed = parse(pack(wire))
    expected = [
        Member(name="ana", role="drive", id=3, verified=True),
        Member(name="bo", role="view"),
    ]
    assert parsed == PresenceMessage(members=expected, count=2)
    assert isinstance(parsed, PresenceMessage)
    assert [(hash(m), repr(m)) for m in parsed.members] == [(hash(m), repr(m)) for m in expected]
    with pytest.raises(dataclasses.FrozenInstanceError):
        parsed.members[0].name = "cy"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("wire", "reason"),
    [
        ({"op": "presence", "members": {}}, "field 'members' must be list"),
        ({"op": "presence", "members": [1]}, "a presence member must be a map"),
        (
            {"op": "presence", "members": [{"name": "a", "role": "view"}, {"name": "b"}]},
            "a presence member's name and role must be str",
        ),
        (
            {"op": "presence", "members": [{"name": "a", "role": "view", "id": 1.0}, 1]},
            "field 'id' must be a non-negative integer",
        ),
        (
            {"op": "presence", "joined": [{"name": "a", "role": "view"}], "left": []},
            "field 'id' must be a non-negative integer",
        ),
        (
            {"op": "presence", "joined": [{"name": "a", "role": "view", "id": False}], "left": []},
            "field 'id' must be a non-negative integer",
        ),
        (
            {"op": "presence", "joined": [{"name": "a", "role": b"view", "id": 1}], "left": []},
            "a presence member's name and role must be str",
        ),
        (
            {
                "op": "broadcast",
                "epoch": b"e",
                "key": b"k",
                "public_key": b"p",
                "counter": 0,
                "members": [{"name": "a", "role": "view", "id": 0}, {"name": "b", "role": "view"}],
                "you": 0,
            },
            "field 'id' must be a non-negative integer",
        ),
    ],
)
def test_a_bad_presence_member_list_says_what_is_wrong_with_its_first_bad_member(
    wire: object, reason: str
) -> None:
    with pytest.raises(BadRequest, match=f"^{re.escape(reason)}$"):
        parse(msgpack.packb(wire))


def _members_by_constructor(wire: list[object], *, id_required: bool) -> list[Member] | str:
    """A member list read one member at a time, each built by `Member(...)`: the parser's
    oracle. The members, or the reason the first bad one gives."""
    members = []
    for value in wire:
        if not isinstance(value, dict):
            return "a presence member must be a map"
        name, role, member_id = value.get("name"), value.get("role"), value.get("id")
        if type(name) is not str or type(role) is not str:
            return "a presence member's name and role must be str"
        verified = value.get("verified") is True
        if member_id is None and not id_required:
            members.append(Member(name=name, role=role, verified=verified))
        elif type(member_id) is not int or member_id < 0:
            return "field 'id' must be a non-negative integer"
        else:
            members.append(Member(name=name, role=role, id=member_id, verified=verified))
    return members


# Each kind a field may wrongly hold, and the values a lax check would let through.
_odd: st.SearchStrategy[object] = st.sampled_from(
    [None, True, False, 0, 1, -1, 2**64 - 1, -(2**63), 1.0, "", "1", b"", [], {}]
)
_valid_member = st.fixed_dictionaries(
    {"name": st.text(max_size=3), "role": st.sampled_from(["view", "drive", "host"])},
    optional={"id": st.integers(0, 9), "verified": st.booleans()},
)


@st.composite
def _member_wire(draw: st.DrawFn) -> object:
    """A valid member, mostly; else one with a field of the wrong kind, or not a map."""
    member: dict[str, object] = dict(draw(_valid_member))
    spoil = draw(st.sampled_from([None, None, None, "name", "role", "id", "verified", "whole"]))
    if spoil == "whole":
        return draw(_odd)
    if spoil is not None:
        member[spoil] = draw(_odd)
    return member


@settings(max_examples=400)
@given(st.lists(_member_wire(), max_size=4), st.booleans())
def test_a_presence_member_list_parses_as_the_member_constructor_reads_it(
    wire: list[object], full: bool
) -> None:
    field = "members" if full else "joined"
    message = (
        {"op": "presence", field: wire, "count": 4}
        if full
        else {"op": "presence", field: wire, "left": [], "count": 4}
    )
    expected = _members_by_constructor(wire, id_required=not full)
    if isinstance(expected, str):
        with pytest.raises(BadRequest, match=f"^{re.escape(expected)}$"):
            parse(msgpack.packb(message))
        return
    parsed = parse(msgpack.packb(message))
    assert isinstance(parsed, PresenceMessage | PresenceDelta)
    got = parsed.members if isinstance(parsed, PresenceMessage) else parsed.joined
    assert list(got) == expected
    assert [(hash(m), repr(m)) for m in got] == [(hash(m), repr(m)) for m in expected]


@pytest.mark.parametrize("count", [0, 1, 15, 16, 800])
def test_a_broadcast_message_packed_with_its_member_list_packed_apart_is_the_map_packed_whole(
    count: int,
) -> None:
    # A host packs the member list once per presence change and splices it into each joiner's
    # message: the bytes must be exactly those of the whole map (the page and every client read
    # it as one map), across msgpack's short and long array forms.
    members = [
        Member(name=f"m{n}", role=("view", "drive")[n % 2], id=n, verified=n % 3 == 0)
        for n in range(count)
    ]
    message = BroadcastStart(
        epoch=b"e" * 8,
        key=b"k" * 32,
        public_key=b"p" * 32,
        counter=70000,
        members=members,
        count=count + 1000,
        you=9,
    )
    listed = []
    for m in members:
        entry: dict[str, object] = {"name": m.name, "role": m.role, "id": m.id}
        if m.verified:
            entry["verified"] = True
        listed.append(entry)
    whole = {
        "op": "broadcast",
        "epoch": b"e" * 8,
        "key": b"k" * 32,
        "public_key": b"p" * 32,
        "counter": 70000,
        "members": listed,
        "count": count + 1000,
        "you": 9,
    }
    assert encode(message) == msgpack.packb(whole, use_bin_type=True)
    assert parse(encode(message)) == message
