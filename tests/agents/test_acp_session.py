"""An ACP agent's session: its modes, models and config options switched by drivers, its commands,
update kinds the host does not know, text after a turn, resuming with session/load after a crash
or a restart, and logging in. Driven through a real subprocess: tests/agents/fake_acp_agent.py."""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path

import anyio
import pytest

from tunnel.agents import AcpSession, SessionError, create_session
from tunnel.log import Log

from .conftest import running
from .test_acp import FAKE_AGENT, SPEC

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


def acp_session(log: Log, workspace: Path, **kwargs: object) -> AcpSession:
    if kwargs:
        return AcpSession(
            argv=[sys.executable, str(FAKE_AGENT)],
            log=log,
            workspace=workspace,
            conversation_id="c1",
            **kwargs,  # type: ignore[arg-type]
        )
    session = create_session(SPEC, log, workspace=workspace, conversation_id="c1")
    assert isinstance(session, AcpSession)
    return session


async def test_the_agents_modes_and_models_are_recorded_and_drivers_switch_them(
    log: Log, workspace: Path
) -> None:
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        first = await rec.wait_item("session_event", what="settings")
        assert first.created_by == "agent"
        assert first.data["modes"] == {
            "current": "default",
            "available": [
                {"id": "default", "name": "Default", "description": "asks before edits"},
                {"id": "plan", "name": "Plan", "description": "plans only"},
                {"id": "acceptEdits", "name": "Accept edits", "description": "edits unasked"},
            ],
        }
        assert first.data["approval"] == {"asks": True, "text": "asks before edits and commands"}
        # Gemini CLI's unstable `models`, which the acp package's schema does not have.
        assert first.data["models"] == {
            "current": "fast",
            "available": [
                {"id": "fast", "name": "Fast model"},
                {"id": "smart", "name": "Smart model"},
            ],
        }
        assert session.settings()["modes"]["current"] == "default"

        await session.set_mode("plan", by="alice")
        await session.set_model("smart", by="bob")
        await session.prompt("settings", by="alice")
        await rec.wait_item("message", text="mode plan model smart")

        changes = [
            (
                i.created_by,
                i.data["change"],
                i.data["modes"]["current"],
                i.data["models"]["current"],
            )
            for i in rec.of_type("session_event")
            if i.data["what"] == "settings" and "change" in i.data
        ]
        # Recorded once each, by who asked (the agent's own mode report is not a second entry).
        assert changes == [
            ("alice", {"mode": "plan"}, "plan", "fast"),
            ("bob", {"model": "smart"}, "plan", "smart"),
        ]
        with pytest.raises(SessionError) as unknown:
            await session.set_mode("yolo", by="alice")
        assert unknown.value.code == "unknown_request"
        with pytest.raises(SessionError) as no_options:
            await session.set_config("thinking", True, by="alice")
        assert no_options.value.code == "unknown_request"


async def test_config_options_carry_the_model_when_the_agent_offers_them(
    log: Log, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ACP_FLAVOR", "config")
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        first = await rec.wait_item("session_event", what="settings")
        assert [o["id"] for o in first.data["config_options"]] == ["model", "thinking"]
        # The model choice comes from the config option of category `model`.
        assert first.data["models"]["current"] == "fast"

        await session.set_model("smart", by="alice")
        await session.set_config("thinking", True, by="bob")
        await session.prompt("settings", by="alice")
        await rec.wait_item("message", text="mode default model smart")
        changes = [
            (i.created_by, i.data["change"])
            for i in rec.of_type("session_event")
            if i.data["what"] == "settings" and "change" in i.data
        ]
        # A model switched through the config option is still recorded as a model change.
        assert changes == [
            ("alice", {"model": "smart"}),
            ("bob", {"config": {"id": "thinking", "value": True}}),
        ]
        last = rec.of_type("session_event")[-1]
        options = {o["id"]: o["current_value"] for o in last.data["config_options"]}
        assert options == {"model": "smart", "thinking": True}
        with pytest.raises(SessionError) as wrong:
            await session.set_config("thinking", "yes", by="bob")
        assert wrong.value.code == "bad_request"


async def test_the_agents_commands_are_recorded_and_a_slash_prompt_reaches_it(
    log: Log, workspace: Path
) -> None:
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        commands = await rec.wait_item("session_event", what="commands")
        assert commands.data["commands"] == [
            {"name": "compact", "description": "Compact the context"},
            {"name": "review", "description": "Review a change", "hint": "what to review"},
        ]
        assert session.commands() == commands.data["commands"]
        await session.prompt("/compact", by="alice")
        await rec.wait_item("message", text="echo: /compact")


async def test_an_unknown_update_kind_is_one_item_and_no_traceback(
    log: Log, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        await session.prompt("weird", by="alice")
        await rec.wait_item("message", text="after weird")
        await session.prompt("weird", by="alice")
        await rec.wait_item("message", text="after weird", count=2)
        unsupported = [
            i for i in rec.of_type("session_event") if i.data["what"] == "unsupported_update"
        ]
        assert [i.data["kind"] for i in unsupported] == ["future_thing"]
    assert not [r for r in caplog.records if r.exc_info]
    ignored = [r for r in caplog.records if "vendor/notify/session/suggestion" in r.getMessage()]
    assert len(ignored) == 1  # said once, though sent twice


async def test_text_after_the_turn_is_stored_with_that_turn_at_once(
    log: Log, workspace: Path
) -> None:
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        await session.prompt("late", by="alice")
        prompt = await rec.wait_item("message", role="user")
        late = await rec.wait_item("message", text="late text")
        assert late.data["turn"] == prompt.seq
        # Nobody prompted since: it was stored without waiting for a next turn.
        assert [m.data["text"] for m in rec.of_type("message")] == ["late", "on time", "late text"]


@pytest.mark.parametrize("replay", ["during", "after"])
async def test_a_restarted_agent_resumes_its_session_without_recording_the_replay(
    any_log: Log, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replay: str
) -> None:
    # "after": the agent answers session/load first and replays after, bit by bit (Gemini CLI),
    # while the prompt that restarted it is about to be sent.
    log = any_log
    state = tmp_path / "agent-state"
    state.mkdir()
    monkeypatch.setenv("FAKE_ACP_STATE", str(state))
    monkeypatch.setenv("FAKE_ACP_REPLAY", replay)
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        started = await rec.wait_item("session_event", what="agent_started")
        assert started.data["resumed"] is False
        await session.prompt("one", by="alice")
        await session.prompt("two", by="alice")
        await rec.wait_item("message", text="echo: two")
        await rec.wait_idle()
        pid = session.agent_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        await rec.wait_item("session_event", what="agent_exited")
        before = len(rec.items)

        await session.prompt("remember", by="bob")
        again = await rec.wait_item("session_event", what="agent_started", count=2)
        assert again.data["resumed"] is True
        assert again.data["session_id"] == started.data["session_id"]
        await rec.wait_item("message", text="I remember 2 prompts")
        await rec.wait_idle()
        # The replay (old prompts, tool calls, replies) was not stored a second time.
        after = [(i.type, i.data.get("what")) for i in rec.items[before:]]
        assert ("tool_call", None) not in after
        assert [m.data["text"] for m in rec.items[before:] if m.type == "message"] == [
            "remember",
            "I remember 2 prompts",
        ]

    # A host restart (a new session object on the same log) resumes it as well.
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        resumed = await rec.wait_item("session_event", what="agent_started", count=3)
        assert resumed.data["resumed"] is True
        assert resumed.data["resumed_with"] == "session/load"
        await session.prompt("remember", by="carol")
        await rec.wait_item("message", text="I remember 3 prompts")
        await rec.wait_idle()
        # Each earlier message is in the conversation once, each tool call never.
        texts = [m.data["text"] for m in rec.of_type("message")]
        assert texts == [
            "one",
            "two",
            "echo: one",
            "echo: two",
            "remember",
            "I remember 2 prompts",
            "remember",
            "I remember 3 prompts",
        ]
        assert rec.of_type("tool_call") == []


async def test_an_agent_that_offers_session_resume_is_resumed_with_it(
    log: Log, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "agent-state"
    state.mkdir()
    monkeypatch.setenv("FAKE_ACP_STATE", str(state))
    monkeypatch.setenv("FAKE_ACP_RESUME", "1")
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        started = await rec.wait_item("session_event", what="agent_started")
        await session.prompt("one", by="alice")
        await rec.wait_item("message", text="echo: one")
        await rec.wait_idle()
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        again = await rec.wait_item("session_event", what="agent_started", count=2)
        assert again.data["session_id"] == started.data["session_id"]
        assert (again.data["resumed"], again.data["resumed_with"]) == (True, "session/resume")
        # Resumed, not loaded: the agent replayed nothing.
        await session.prompt("remember", by="bob")
        await rec.wait_item("message", text="I remember 1 prompts (resumed)")
        assert [m.data["text"] for m in rec.of_type("message")].count("echo: one") == 1


async def test_a_session_the_agent_cannot_load_starts_anew_and_says_so(
    log: Log, workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "agent-state"
    state.mkdir()
    monkeypatch.setenv("FAKE_ACP_STATE", str(state))
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        started = await rec.wait_item("session_event", what="agent_started")
        await session.prompt("one", by="alice")
        await rec.wait_item("message", text="echo: one")
        for stale in state.iterdir():
            stale.unlink()
        pid = session.agent_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        await rec.wait_item("session_event", what="agent_exited")
        await session.prompt("remember", by="bob")
        again = await rec.wait_item("session_event", what="agent_started", count=2)
        assert again.data["resumed"] is False
        assert again.data["session_id"] != started.data["session_id"]
        assert "Resource not found" in again.data["load_failed"]
        await rec.wait_item("message", text="I remember 0 prompts")


async def test_a_login_the_host_is_told_to_use_is_done_first(
    log: Log, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ACP_AUTH", "1")
    monkeypatch.setenv("FAKE_ACP_KEY", "k")
    session = acp_session(log, workspace, auth_method="fake-key")
    async with running(session, log) as rec:
        started = await rec.wait_item("session_event", what="agent_started")
        assert started.data["auth_method"] == "fake-key"
        await session.prompt("hi", by="alice")
        await rec.wait_item("message", text="echo: hi")


async def test_the_one_login_that_needs_nobody_is_chosen_by_itself(
    log: Log, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ACP_AUTH", "1")
    monkeypatch.setenv("FAKE_ACP_KEY", "k")
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        started = await rec.wait_item("session_event", what="agent_started")
        assert started.data["auth_method"] == "fake-key"


async def test_a_login_that_cannot_be_chosen_lists_the_methods(
    log: Log, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ACP_AUTH", "1")
    monkeypatch.delenv("FAKE_ACP_KEY", raising=False)
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        error = await rec.wait_item("error")
        message = error.data["message"]
        assert message.startswith("could not start the agent fake-agent: it needs a login;")
        assert "--agent-auth METHOD_ID" in message
        assert "fake-key (Fake key: FAKE_ACP_KEY set)" in message
        assert "browser (Browser login)" in message


async def test_a_failed_login_shows_the_agents_error_and_its_data(
    log: Log, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ACP_AUTH", "1")
    session = acp_session(log, workspace, auth_method="browser")
    async with running(session, log) as rec:
        error = await rec.wait_item("error")
        assert error.data["message"] == (
            "could not start the agent fake-agent: it refused the handshake: "
            'no browser here (code -32603): {"hint": "use fake-key"}'
        )
        with anyio.fail_after(1):
            assert session.agent_pid is None
