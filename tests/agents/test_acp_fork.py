"""A forked conversation's ACP agent continues from the fork, never in the source's session: with
session/fork where the agent offers it, else in a new session given the copied conversation as a
transcript with its first prompt; after a restart it resumes its own session. Driven through a
real subprocess: tests/agents/fake_acp_agent.py (FAKE_ACP_JOURNAL says what it was asked)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tunnel.agents import AcpSession
from tunnel.log import Item, Log, NewItem
from tunnel.terminal.render import render_item

from .conftest import Recording, running
from .test_acp import FAKE_AGENT

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


@pytest.fixture
def journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake agent keeps its sessions (and offers session/load) and journals its calls."""
    state = tmp_path / "agent-state"
    state.mkdir()
    monkeypatch.setenv("FAKE_ACP_STATE", str(state))
    path = tmp_path / "journal.jsonl"
    monkeypatch.setenv("FAKE_ACP_JOURNAL", str(path))
    return path


def calls(journal: Path, method: str) -> list[dict[str, Any]]:
    if not journal.exists():
        return []
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    return [line for line in lines if line["method"] == method]


def acp_session(log: Log, workspace: Path, conversation_id: str) -> AcpSession:
    return AcpSession(
        argv=[sys.executable, str(FAKE_AGENT)],
        log=log,
        workspace=workspace,
        conversation_id=conversation_id,
    )


async def fork(log: Log, source: str, upto: int, to: str) -> int:
    """What the host's fork does to the log (tunnel.host.conversations): the source's items up to
    `upto` copied to `to`, then the `session_fork` events. Returns the boundary's seq."""
    items = await log.query(source, before=upto + 1, limit=10_000)
    await log.append(
        to,
        [
            NewItem(
                type=i.type,
                data=i.data,
                created_by=i.created_by,
                status=i.status,
                response_id=i.response_id,
                created_at=i.created_at,
            )
            for i in items
        ],
    )
    event = {"what": "session_fork", "from": source, "upto": upto, "agent": "fake"}
    (boundary,) = await log.append(to, NewItem(type="session_event", data=event, created_by="ann"))
    back = {"what": "session_fork", "to": to, "upto": upto}
    await log.append(source, NewItem(type="session_event", data=back, created_by="ann"))
    return boundary.seq


async def own_start(rec: Recording, after: int, count: int = 1) -> Item:
    """The `count`-th `agent_started` of the conversation's own, after the copied part."""

    def starts() -> list[Item]:
        return [
            i
            for i in rec.of_type("session_event")
            if i.seq > after and i.data["what"] == "agent_started"
        ]

    await rec.wait_until(lambda: len(starts()) >= count)
    return starts()[count - 1]


async def source_conversation(log: Log, workspace: Path) -> tuple[str, int]:
    """The conversation `src` with two prompts answered: its ACP session id and last seq."""
    session = acp_session(log, workspace, "src")
    async with running(session, log) as rec:
        started = await rec.wait_item("session_event", what="agent_started")
        await session.prompt("one", by="alice")
        await rec.wait_item("message", text="echo: one")
        await session.prompt("two", by="bob")
        await rec.wait_item("message", text="echo: two")
        await rec.wait_idle()
    return str(started.data["session_id"]), rec.items[-1].seq


async def test_an_agent_that_offers_session_fork_forks_the_sources_session_and_resumes_its_own(
    log: Log, workspace: Path, journal: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ACP_FORK", "1")
    source_session, upto = await source_conversation(log, workspace)
    boundary = await fork(log, "src", upto, "dst")

    session = acp_session(log, workspace, "dst")
    async with running(session, log) as rec:
        started = await own_start(rec, boundary)
        assert started.data["forked"] == "session_fork"
        assert started.data["forked_session"] == source_session
        assert (started.data["forked_from"], started.data["forked_upto"]) == ("src", upto)
        own = started.data["session_id"]
        assert own != source_session
        assert started.data["resumed"] is False
        assert render_item(started.to_wire()).plain.endswith(
            "; it continues from the fork in its own fork of the agent's session"
        )
        # The agent's fork holds what the source's session did: both prompts.
        await session.prompt("remember", by="carol")
        await rec.wait_item("message", text="I remember 2 prompts")
        await rec.wait_idle()
    assert [c["sessionId"] for c in calls(journal, "session/fork")] == [source_session]
    assert calls(journal, "session/load") == []
    # No transcript: the agent knows already.
    (prompt,) = [c for c in calls(journal, "session/prompt") if c["sessionId"] == own]
    assert [b["type"] for b in prompt["blocks"]] == ["text"]

    # A restart resumes the fork's own session, never the source's.
    session = acp_session(log, workspace, "dst")
    async with running(session, log) as rec:
        again = await own_start(rec, boundary, count=2)
        assert (again.data["session_id"], again.data["resumed"]) == (own, True)
        assert "forked" not in again.data
        await session.prompt("remember", by="carol")
        await rec.wait_item("message", text="I remember 3 prompts")
    assert [c["sessionId"] for c in calls(journal, "session/load")] == [own]
    assert len(calls(journal, "session/fork")) == 1


async def test_without_session_fork_a_new_session_gets_the_transcript_with_its_first_prompt(
    log: Log, workspace: Path, journal: Path
) -> None:
    source_session, upto = await source_conversation(log, workspace)
    boundary = await fork(log, "src", upto, "dst")

    session = acp_session(log, workspace, "dst")
    async with running(session, log) as rec:
        started = await own_start(rec, boundary)
        assert started.data["forked"] == "transcript"
        assert started.data["fork_fallback"] == "the agent offers no session/fork"
        assert started.data["transcript"]["entries"] == 4
        assert started.data["transcript"]["left_out"] is False
        assert render_item(started.to_wire()).plain.endswith(
            "; a new session, given the conversation up to the fork with its first prompt"
        )
        own = started.data["session_id"]
        assert own != source_session
        await session.prompt("context", by="carol")
        await rec.wait_until(
            lambda: any(
                i.type == "message" and str(i.data["text"]).startswith("embedded agent-tunnel:")
                for i in rec.items
            )
        )
        await session.prompt("remember", by="carol")
        # A new session: the agent itself remembers only what it was sent in it.
        await rec.wait_item("message", text="I remember 1 prompts")
        await rec.wait_idle()
    # The source's session was never loaded: the fork's agent did not touch it.
    assert calls(journal, "session/load") == []
    first, second = [c for c in calls(journal, "session/prompt") if c["sessionId"] == own]
    assert first["blocks"][0] == {"type": "text", "text": "context"}
    transcript = first["blocks"][-1]["resource"]["text"]
    assert "alice: one\nagent: echo: one\nbob: two\nagent: echo: two" in transcript
    assert first["blocks"][-1]["resource"]["mimeType"] == "text/plain"
    # Once only.
    assert [b["type"] for b in second["blocks"]] == ["text"]

    session = acp_session(log, workspace, "dst")
    async with running(session, log) as rec:
        again = await own_start(rec, boundary, count=2)
        assert (again.data["session_id"], again.data["resumed"]) == (own, True)
        assert "transcript" not in again.data
    assert [c["sessionId"] for c in calls(journal, "session/load")] == [own]


async def test_a_fork_stopped_before_its_first_prompt_still_gives_the_transcript_after_a_restart(
    log: Log, workspace: Path, journal: Path
) -> None:
    _, upto = await source_conversation(log, workspace)
    boundary = await fork(log, "src", upto, "dst")
    session = acp_session(log, workspace, "dst")
    async with running(session, log) as rec:
        own = (await own_start(rec, boundary)).data["session_id"]

    # The fake agent, as Gemini CLI, keeps no session that was never prompted: its load fails
    # and a new session starts. Either way the transcript goes with the first prompt, and a
    # start before that prompt gives it again.
    for count in (2, 3):
        session = acp_session(log, workspace, "dst")
        async with running(session, log) as rec:
            again = await own_start(rec, boundary, count=count)
            assert [c["sessionId"] for c in calls(journal, "session/load")][-1] == own
            assert again.data["transcript"]["entries"] == 4
            own = again.data["session_id"]
            if count == 3:
                await session.prompt("remember", by="carol")
                await rec.wait_item("message", text="I remember 0 prompts")
    (prompt,) = [c for c in calls(journal, "session/prompt") if c["sessionId"] == own]
    assert "bob: two" in prompt["blocks"][-1]["resource"]["text"]


async def test_a_source_that_went_on_after_the_fork_point_is_not_forked_by_the_agent(
    log: Log, workspace: Path, journal: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its agent session holds a turn the fork does not: session/fork would carry it over.
    monkeypatch.setenv("FAKE_ACP_FORK", "1")
    _, last = await source_conversation(log, workspace)
    first_reply = next(
        i.seq for i in await log.query("src", limit=100) if i.data.get("text") == "echo: one"
    )
    assert first_reply < last
    boundary = await fork(log, "src", first_reply, "dst")
    session = acp_session(log, workspace, "dst")
    async with running(session, log) as rec:
        started = await own_start(rec, boundary)
        assert started.data["forked"] == "transcript"
        assert started.data["fork_fallback"] == (
            "the conversation forked went on after the fork point"
        )
        own = started.data["session_id"]
        await session.prompt("remember", by="carol")
        await rec.wait_item("message", text="I remember 0 prompts")
    assert calls(journal, "session/fork") == []
    (prompt,) = [c for c in calls(journal, "session/prompt") if c["sessionId"] == own]
    text = prompt["blocks"][-1]["resource"]["text"]
    assert "alice: one" in text
    assert "bob: two" not in text


async def test_the_forks_agent_starts_in_the_mode_and_model_the_source_last_chose(
    log: Log, workspace: Path, journal: Path
) -> None:
    session = acp_session(log, workspace, "src")
    async with running(session, log) as rec:
        await rec.wait_item("session_event", what="agent_started")
        await session.set_mode("plan", by="alice")
        await session.set_model("smart", by="alice")
        await session.prompt("one", by="alice")
        await rec.wait_item("message", text="echo: one")
        await rec.wait_idle()
    boundary = await fork(log, "src", rec.items[-1].seq, "dst")
    session = acp_session(log, workspace, "dst")
    async with running(session, log) as rec:
        await own_start(rec, boundary)
        await session.prompt("settings", by="carol")
        await rec.wait_item("message", text="mode plan model smart")
