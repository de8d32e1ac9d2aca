"""Replay links without a network: what a replay channel may ask and read, how its link is
named and stored, the console's /share-replay and `ready.replay` (docs/security.md, "Replay
links")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tunnel.app.host_messages import Ready, ReplayInfo, decode_host_message, encode, parse
from tunnel.app.requests import (
    Cancel,
    Fork,
    History,
    ListConversations,
    NewConversation,
    PermissionAnswer,
    Prompt,
    PushOn,
    ReadFile,
    Subscribe,
)
from tunnel.e2e.identity import KeyFileError
from tunnel.host.invitations import InvitationError, Invitations
from tunnel.host.replay_link import ReplayLink, replay_name
from tunnel.terminal.commands import Say, ShareReplay, parse_line
from tunnel.terminal.view import ConversationView


def test_a_replay_channel_may_only_read() -> None:
    link = ReplayLink(conversation="main", upto=7)
    for allowed in (Subscribe(after=None), History(before=3), ReadFile(path="a.py")):
        assert link.allows(allowed)
    refused = (
        Prompt(text="hi"),
        Cancel(),
        PermissionAnswer(request_id="r", option_id="o"),
        NewConversation(agent="demo"),
        Fork(conversation="main", upto=1),
        ListConversations(),
        PushOn(endpoint="https://push.example/x", p256dh=b"k", auth=b"a", browser="b"),
    )
    for request in refused:
        assert not link.allows(request)


def test_a_replay_never_reads_past_its_seq() -> None:
    link = ReplayLink(conversation="main", upto=7)
    assert link.head(100) == 7
    assert link.head(3) == 3
    assert link.before(1000) == 8
    assert link.before(5) == 5
    assert ReplayLink(conversation="main", upto=-1).before(10) == 0
    with pytest.raises(ValueError, match="upto"):
        ReplayLink(conversation="main", upto=-2)
    with pytest.raises(ValueError, match="names a conversation"):
        ReplayLink(conversation="", upto=1)


def test_replay_names_are_one_word_and_never_taken() -> None:
    assert replay_name("main", set()) == "replay-main-1"
    assert replay_name("main", {"replay-main-1", "replay-main-2"}) == "replay-main-3"
    assert replay_name("a b/c", set()) == "replay-a_b_c-1"
    assert len(replay_name("x" * 200, set())) <= 64


def test_a_replay_link_is_a_view_invitation_stored_with_its_scope(tmp_path: Path) -> None:
    path = tmp_path / "share_secrets.invitations"
    invitations = Invitations.load(path)
    invitations.add("alice", "drive")
    replay = invitations.add_replay(ReplayLink(conversation="main", upto=12))
    assert (replay.name, replay.role) == ("replay-main-1", "view")
    assert invitations.add_replay(ReplayLink(conversation="main", upto=3)).name == "replay-main-2"
    assert path.stat().st_mode & 0o777 == 0o600
    doc = json.loads(path.read_text())
    # A host that predates replay links refuses the file rather than serve one as a view link.
    assert doc["format"] == "agent-tunnel invitations v2"
    again = Invitations.load(path)
    assert again.get("replay-main-1") == replay
    assert again.get("alice").replay is None  # type: ignore[union-attr]
    # Its verifier is registered like a person's; its name is an invited one (no role link's
    # holder can take it).
    assert len(again.registered("a" * 26)) == 3
    assert again.has_name("Replay-Main-1")
    again.remove("replay-main-1")
    again.remove("replay-main-2")
    assert json.loads(path.read_text())["format"] == "agent-tunnel invitations v1"


def test_a_replay_link_only_views_and_its_names_are_not_a_persons(tmp_path: Path) -> None:
    invitations = Invitations.load(tmp_path / "inv")
    with pytest.raises(InvitationError):
        invitations.add("replay-main-1", "view")
    with pytest.raises(InvitationError):
        invitations.add("Replay-x", "drive")
    path = tmp_path / "tampered"
    invitations = Invitations.load(path)
    invitations.add_replay(ReplayLink(conversation="main", upto=1))
    doc = json.loads(path.read_text())
    doc["invitations"][0]["role"] = "drive"
    path.write_text(json.dumps(doc))
    with pytest.raises(KeyFileError):
        Invitations.load(path)


def test_share_replay_is_typed_with_an_optional_conversation_and_seq() -> None:
    view = ConversationView()
    assert parse_line("/share-replay", view) == ShareReplay()
    assert parse_line("/share-replay 12", view) == ShareReplay(upto=12)
    assert parse_line("/share-replay c-1a2b", view) == ShareReplay(conversation="c-1a2b")
    assert parse_line("/share-replay main 4", view) == ShareReplay(conversation="main", upto=4)
    assert isinstance(parse_line("/share-replay main x", view), Say)
    assert isinstance(parse_line("/share-replay a 1 2", view), Say)


def test_ready_says_a_replay_and_a_live_channel_says_nothing() -> None:
    ready = Ready(
        conversation_id="main",
        role="view",
        name="replay-main-1",
        agent_name="demo",
        agent_kind="chat",
        verified=True,
        replay=ReplayInfo(conversation="main", upto=9),
    )
    assert decode_host_message(encode(ready))["replay"] == {"conversation": "main", "upto": 9}
    assert parse(encode(ready)) == ready
    live = Ready(conversation_id="c", role="drive", name="a", agent_name="d", agent_kind="chat")
    assert "replay" not in decode_host_message(encode(live))
    assert parse(encode(live)).replay is None  # type: ignore[union-attr]
