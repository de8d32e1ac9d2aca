"""Which session an ACP agent's start continues (tunnel.agents.acp_origin), and the transcript a
fork's new session is given (tunnel.agents.transcript): pure, from made-up log items."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tunnel.agents.acp_origin import AskedSession, ForkOrigin, Origin, OriginScan, OwnSession
from tunnel.agents.transcript import render
from tunnel.log import Item


def items(*entries: tuple[str, str, dict[str, Any]]) -> list[Item]:
    """(type, created_by, data) in order, seq 0, 1, 2, ..."""
    return [
        Item(
            conversation_id="c",
            seq=seq,
            type=type_,
            status=None,
            response_id=None,
            created_at=datetime(2026, 1, 1, tzinfo=UTC),
            created_by=by,
            data=data,
        )
        for seq, (type_, by, data) in enumerate(entries)
    ]


def started(session_id: str, agent_id: str = "a", **more: Any) -> tuple[str, str, dict[str, Any]]:
    data = {"what": "agent_started", "agent_id": agent_id, "session_id": session_id, **more}
    return ("session_event", "host", data)


def forked(source: str, upto: int) -> tuple[str, str, dict[str, Any]]:
    return ("session_event", "ann", {"what": "session_fork", "from": source, "upto": upto})


def scan(log: list[Item], agent_id: str = "a") -> Origin:
    origin = OriginScan(agent_id)
    for item in reversed(log):
        if origin.feed(item):
            break
    return origin.result()


def test_a_forks_first_start_finds_the_sources_session_never_its_own() -> None:
    log = items(started("s1"), started("s1", resumed=True), forked("src", 1))
    assert scan(log) == ForkOrigin(source="src", upto=1, boundary=2, session_id="s1")
    # Another agent ran the source: nothing of it to fork.
    assert scan(log, agent_id="b") == ForkOrigin(source="src", upto=1, boundary=2, session_id=None)


def test_once_the_fork_started_its_own_session_is_the_one_resumed() -> None:
    log = items(started("s1"), forked("src", 0), started("s2", forked="session_fork"))
    origin = scan(log)
    assert isinstance(origin, OwnSession)
    assert (origin.session_id, origin.started_seq, origin.boundary) == ("s2", 2, None)
    # Given the transcript: the boundary is found too, to give it again if it is still owed.
    log = items(started("s1"), forked("src", 0), started("s2", forked="transcript"))
    origin = scan(log)
    assert isinstance(origin, OwnSession)
    assert (origin.session_id, origin.forked, origin.boundary) == ("s2", "transcript", 1)


def test_a_fork_of_a_fork_forks_the_session_of_the_one_it_was_forked_from() -> None:
    log = items(
        started("s1"),
        forked("src", 0),
        started("s2", forked="session_fork"),
        forked("mid", 2),
    )
    assert scan(log) == ForkOrigin(source="mid", upto=2, boundary=3, session_id="s2")
    # That one never started this agent: the older source's session is not taken for it.
    log = items(started("s1"), forked("src", 0), forked("mid", 1))
    assert scan(log) == ForkOrigin(source="mid", upto=1, boundary=2, session_id=None)


def test_a_conversation_never_forked_resumes_as_before() -> None:
    log = items(started("s1"), started("s1", resumed=True), started("s2"), started("s2", resumed=1))
    origin = scan(log)
    assert isinstance(origin, OwnSession)
    assert (origin.session_id, origin.started_seq, origin.forked) == ("s2", 2, None)
    assert scan(items(started("s1", agent_id="other"))) is None
    assert scan([]) is None


def test_a_transcript_shows_who_said_what_and_the_tool_calls_and_skips_the_rest() -> None:
    log = items(
        ("message", "alice", {"role": "user", "text": "fix it"}),
        ("reasoning", "agent", {"text": "secret thoughts"}),
        ("tool_call", "agent", {"title": "Read a.py", "kind": "read"}),
        ("tool_result", "agent", {"ok": True, "output": "x" * 600}),
        ("message", "agent", {"role": "agent", "text": "first part ", "continued": True}),
        ("message", "agent", {"role": "agent", "text": "second part", "continues": "r1"}),
        ("permission_decision", "bob", {"outcome": "selected", "option_name": "Allow once"}),
        ("session_event", "host", {"what": "agent_started"}),
    )
    transcript = render(log, header="HEADER")
    lines = transcript.text.split("\n")
    assert lines[0] == "HEADER"
    assert lines[1:3] == ["alice: fix it", "agent's tool call: Read a.py (read)"]
    assert lines[3] == "  result (done): " + "x" * 500 + " […]"
    assert lines[4:] == ["agent: first part second part", "  bob chose: Allow once"]
    assert (transcript.entries, transcript.left_out) == (5, False)


def test_a_long_transcript_keeps_the_newest_entries_within_its_budget() -> None:
    log = items(
        *[("message", "alice", {"role": "user", "text": f"{n:04} " * 500}) for n in range(60)]
    )
    transcript = render(log, header="HEADER", limit=16 * 1024)
    assert len(transcript.text.encode()) <= 16 * 1024
    assert transcript.left_out
    assert "[… the earlier part of the conversation is left out]" in transcript.text
    assert transcript.text.endswith("0059 ")
    assert "0000" not in transcript.text
    assert transcript.summary()["entries"] == transcript.entries < 60
    # Only the end was read: said so even when all of it fits.
    assert render(log[-1:], header="H", earlier=True).left_out


def asked(session_id: str) -> tuple[str, str, dict[str, Any]]:
    data = {"what": "conversation_started", "agent": "fake", "resume": session_id}
    return ("session_event", "hannah", data)


def test_a_conversation_started_to_resume_a_past_session_resumes_it_until_it_starts_its_own() -> (
    None
):
    # Nothing started yet: the past session the host user asked for.
    assert scan(items(asked("old"))) == AskedSession(session_id="old")
    # Another agent's start recorded before it changes nothing: the newest event rules.
    assert scan(items(started("s0", agent_id="b"), asked("old"))) == AskedSession(session_id="old")
    # Once its agent started (resuming it), that start rules, as any conversation's own.
    log = items(asked("old"), started("old", resumed=True, resumed_with="session/load"))
    origin = scan(log)
    assert isinstance(origin, OwnSession)
    assert origin.session_id == "old"
    # A later new session of its own rules over the one asked for.
    log = items(asked("old"), started("old", resumed=True), started("s2"))
    origin = scan(log)
    assert isinstance(origin, OwnSession)
    assert origin.session_id == "s2"
    # A plain start names no session: nothing to resume.
    plain = ("session_event", "hannah", {"what": "conversation_started", "agent": "fake"})
    assert scan(items(plain)) is None
