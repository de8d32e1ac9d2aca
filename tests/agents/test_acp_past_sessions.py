"""An ACP agent's own past sessions: listed with `session/list` in the workspace, and resumed by
a conversation whose `conversation_started` names one (the host console's `/resume`), or its
start refused with the agent's words. Driven through tests/agents/fake_acp_agent.py."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from tunnel.agents import AcpSession, SessionError
from tunnel.agents.acp_agent import PastSession
from tunnel.log import Log, NewItem
from tunnel.process.groups import unwrapped

from .conftest import running
from .test_acp import FAKE_AGENT

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


def _session(log: Log, workspace: Path, conversation: str) -> AcpSession:
    return AcpSession(
        argv=[sys.executable, str(FAKE_AGENT)],
        log=log,
        workspace=workspace,
        conversation_id=conversation,
    )


async def _asked(log: Log, conversation: str, session_id: str) -> None:
    data = {"what": "conversation_started", "agent": "fake", "resume": session_id}
    await log.append(conversation, [NewItem(type="session_event", data=data, created_by="hannah")])


@pytest.fixture
def kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "agent-state"
    state.mkdir()
    monkeypatch.setenv("FAKE_ACP_STATE", str(state))
    monkeypatch.setenv("FAKE_ACP_RESUME", "1")
    return state


async def test_a_past_session_is_listed_then_resumed_by_the_conversation_that_asks(
    log: Log, workspace: Path, kept: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ACP_LIST", "1")
    first = _session(log, workspace, "c1")
    async with running(first, log) as rec:
        started = await rec.wait_item("session_event", what="agent_started")
        past = started.data["session_id"]
        await first.prompt("one", by="alice")
        await rec.wait_item("message", text="echo: one")
        await rec.wait_idle()
        assert await first.list_agent_sessions() == [
            PastSession(session_id=past, title="one", updated_at="2026-01-02T03:04:05Z")
        ]
    await _asked(log, "c2", past)
    second = _session(log, workspace, "c2")
    async with running(second, log) as rec:
        again = await rec.wait_item("session_event", what="agent_started")
        assert again.data["session_id"] == past
        assert (again.data["resumed"], again.data["resumed_with"]) == (True, "session/resume")
        await second.prompt("remember", by="bob")
        await rec.wait_item("message", text="I remember 1 prompts (resumed)")
    # A restart of that conversation resumes its own latest start: the same session.
    third = _session(log, workspace, "c2")
    async with running(third, log) as rec:
        latest = await rec.wait_item("session_event", what="agent_started", count=2)
        assert (latest.data["session_id"], latest.data["resumed"]) == (past, True)


async def test_an_agent_that_offers_no_session_list_says_so(
    log: Log, workspace: Path, kept: Path
) -> None:
    session = _session(log, workspace, "c1")
    async with running(session, log) as rec:
        await rec.wait_item("session_event", what="agent_started")
        with pytest.raises(SessionError, match=r"does not list its sessions") as caught:
            await session.list_agent_sessions()
        assert caught.value.code == "not_supported"


async def test_a_session_the_agent_does_not_resume_fails_the_start_with_its_words(
    log: Log, workspace: Path, kept: Path
) -> None:
    await _asked(log, "c1", "s-nope")
    session = _session(log, workspace, "c1")

    async def start() -> None:
        async with anyio.create_task_group() as tg:
            with anyio.fail_after(30):
                await tg.start(session.run)
            tg.cancel_scope.cancel()

    with pytest.raises(BaseException) as caught:  # noqa: PT011 - unwrapped below
        await start()
    problem = unwrapped(caught.value)
    assert isinstance(problem, ValueError)
    assert str(problem).startswith("it did not resume session s-nope: ")
    # No new session in its place, and nothing recorded of a start.
    events = await log.query("c1", types="session_event")
    assert [e.data["what"] for e in events] == ["conversation_started"]
