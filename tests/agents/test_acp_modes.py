"""Modes that ask: the table, the starting mode (`--agent-mode`), what a restarted agent is given
back (mode, model, config options), and an approval policy that needs requests asked. Driven
through a real subprocess: tests/agents/fake_acp_agent.py."""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

import anyio
import pytest

from tunnel.agents import AcpSession, SessionError
from tunnel.agents.acp_modes import (
    ASKING_TEXT,
    NOT_ASKING_TEXT,
    UNKNOWN_TEXT,
    approval,
    asking_mode,
    policy_needs_asking,
)
from tunnel.agents.workspace import Workspace
from tunnel.log import Log, NewItem
from tunnel.policy import Policy, Rule, parse_policy, preset
from tunnel.process.groups import unwrap_group

from .conftest import running
from .test_acp import FAKE_AGENT

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


def fake_session(
    log: Log, workspace: Path, *, start_mode: str | None = None, policy: Policy | None = None
) -> AcpSession:
    session = AcpSession(
        argv=[sys.executable, str(FAKE_AGENT)],
        log=log,
        workspace=workspace,
        conversation_id="c1",
        start_mode=start_mode,
    )
    if policy is not None:
        session.set_policy(policy, workspace=Workspace(workspace))
    return session


def test_each_agents_modes_are_classified_and_an_unknown_one_may_not_ask() -> None:
    for asking in ("default", "plan", "read-only"):
        assert approval({"current": asking}) == {"asks": True, "text": ASKING_TEXT}
    for free in ("acceptEdits", "auto", "bypassPermissions", "autoEdit", "yolo", "full-access"):
        assert approval({"current": free}) == {"asks": False, "text": NOT_ASKING_TEXT}
    assert approval({"current": "turbo"}) == {"asks": False, "text": UNKNOWN_TEXT}
    assert approval(None) is None
    assert asking_mode(["auto", "acceptEdits", "plan", "default"]) == "default"
    assert asking_mode(["auto", "read-only", "full-access"]) == "read-only"
    assert asking_mode(["auto", "yolo"]) is None


def test_a_policy_needs_asking_unless_it_allows_every_change_outright() -> None:
    for name in ("ask", "read-only", "trust-reads"):
        assert policy_needs_asking(preset(name))
    allow_all = Policy(source="test", rules=(Rule(index=1, line=1, verdict="allow"),))
    assert not policy_needs_asking(allow_all)
    only_src = parse_policy(
        '[[rule]]\nverdict = "allow"\npaths = ["src/**"]\n', source="paths.toml"
    )
    assert policy_needs_asking(only_src)


async def test_the_starting_mode_is_set_and_everyone_is_told_whether_it_asks(
    log: Log, workspace: Path
) -> None:
    session = fake_session(log, workspace, start_mode="acceptEdits")
    async with running(session, log) as rec:
        first = await rec.wait_item("session_event", what="settings")
        # One settings event, already in the starting mode.
        assert first.data["modes"]["current"] == "acceptEdits"
        assert first.data["approval"] == {"asks": False, "text": NOT_ASKING_TEXT}
        await session.prompt("settings", by="alice")
        await rec.wait_item("message", text="mode acceptEdits model fast")
        await session.set_mode("default", by="alice")
        switched = await rec.wait_item("session_event", what="settings", count=2)
        assert switched.data["approval"] == {"asks": True, "text": ASKING_TEXT}


async def test_an_unknown_starting_mode_stops_the_session_in_one_line_unrecorded(
    log: Log, workspace: Path
) -> None:
    session = fake_session(log, workspace, start_mode="turbo")
    said = "--agent-mode: the agent offers no mode 'turbo' (it offers default, plan, acceptEdits)"
    with pytest.raises(ValueError, match=re.escape(said)):
        async with unwrap_group(), running(session, log):
            pass
    # Nothing recorded: the next run would show the mistake again.
    assert await log.query("c1", limit=100) == []


async def test_a_restarted_agent_gets_the_mode_and_model_the_conversation_chose(
    log: Log, workspace: Path
) -> None:
    session = fake_session(log, workspace)
    async with running(session, log) as rec:
        await rec.wait_item("session_event", what="settings")
        await session.set_mode("plan", by="alice")
        await session.set_model("smart", by="bob")
        pid = session.agent_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        await rec.wait_item("session_event", what="agent_exited")

        # The crash: the next prompt starts a new agent (in "default", "fast"), given both back.
        await session.prompt("settings", by="alice")
        await rec.wait_item("message", text="mode plan model smart")
        # Nothing changed for the people: no settings event says otherwise.
        latest = [i for i in rec.of_type("session_event") if i.data["what"] == "settings"][-1]
        assert (latest.data["modes"]["current"], latest.data["models"]["current"]) == (
            "plan",
            "smart",
        )

    # A host restart (a new session on the same log, no --agent-mode) restores them too.
    session = fake_session(log, workspace)
    async with running(session, log) as rec:
        await session.prompt("settings", by="carol")
        await rec.wait_item("message", text="mode plan model smart", count=2)


async def test_under_a_policy_that_asks_the_agent_starts_asking_and_cannot_stop(
    log: Log, workspace: Path
) -> None:
    # The conversation had left "acceptEdits": the policy brings it back to a mode that asks.
    session = fake_session(log, workspace, start_mode="acceptEdits")
    async with running(session, log) as rec:
        await rec.wait_item("session_event", what="settings")
    session = fake_session(log, workspace, policy=preset("ask"))
    async with running(session, log) as rec:
        await session.prompt("settings", by="alice")
        await rec.wait_item("message", text="mode default model fast")
        assert session.settings()["approval"]["asks"] is True
        with pytest.raises(SessionError) as refused:
            await session.set_mode("acceptEdits", by="alice")
        assert refused.value.code == "forbidden"
        assert refused.value.message == (
            "the mode acceptEdits does not ask before edits and commands, and the approval"
            " policy preset:ask needs them asked"
        )
        await session.set_mode("plan", by="alice")  # a mode that asks is fine
        with anyio.fail_after(5):
            await rec.wait_until(lambda: session.settings()["modes"]["current"] == "plan")


async def test_under_a_policy_that_asks_a_mode_the_agent_picks_itself_is_switched_back(
    log: Log, workspace: Path
) -> None:
    session = fake_session(log, workspace, policy=preset("trust-reads"))
    async with running(session, log) as rec:
        await session.prompt("become acceptEdits", by="alice")
        await rec.wait_item("message", text="became acceptEdits")
        back = await rec.wait_item("session_event", what="settings", change={"mode": "default"})
        assert back.created_by == "host"
        assert back.data["approval"] == {"asks": True, "text": ASKING_TEXT}
        said = await rec.wait_item("error")
        assert said.data["message"] == (
            "the agent switched itself to the mode acceptEdits, which does not ask before edits"
            " and commands, and the approval policy preset:trust-reads needs them asked: the host"
            " switched it back to default"
        )
        await session.prompt("settings", by="alice")
        await rec.wait_item("message", text="mode default model fast")


async def test_under_a_policy_that_asks_the_mode_as_a_config_option_is_held_to_asking(
    log: Log, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ACP_FLAVOR", "config-mode")  # the mode is a config option
    session = fake_session(log, workspace, policy=preset("ask"))
    async with running(session, log) as rec:
        await rec.wait_item("session_event", what="settings")
        with pytest.raises(SessionError) as refused:
            await session.set_config("mode", "acceptEdits", by="alice")
        assert refused.value.code == "forbidden"
        with pytest.raises(SessionError):
            await session.set_mode("acceptEdits", by="alice")
        await session.set_config("mode", "plan", by="alice")  # a mode that asks is fine
        assert session.settings()["modes"]["current"] == "plan"
        # A model switch that moves the agent out of a mode that asks is undone.
        await session.set_model("smart", by="alice")
        back = await rec.wait_item("session_event", what="settings", change={"mode": "default"})
        assert back.created_by == "host"
        assert back.data["approval"]["asks"] is True
        await session.prompt("settings", by="alice")
        await rec.wait_item("message", text="mode default model smart")


async def test_a_restarted_agent_gets_its_config_options_back(
    log: Log, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ACP_FLAVOR", "config")  # the model is a config option too
    session = fake_session(log, workspace)
    async with running(session, log) as rec:
        await rec.wait_item("session_event", what="settings")
        await session.set_config("thinking", True, by="alice")
        await session.set_model("smart", by="alice")
        pid = session.agent_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        await rec.wait_item("session_event", what="agent_exited")
        await session.prompt("settings", by="alice")
        await rec.wait_item("message", text="mode default model smart")
        # The new agent answered the host's set_config_option with thinking on.
        options = {o["id"]: o["current_value"] for o in session.settings()["config_options"]}
        assert options == {"model": "smart", "thinking": True}


async def test_only_the_same_agents_choices_are_given_back(log: Log, workspace: Path) -> None:
    def event(what: str, **data: object) -> NewItem:
        return NewItem(type="session_event", data={"what": what, **data}, created_by="host")

    chosen = {"modes": {"current": "autoEdit", "available": [{"id": "autoEdit"}]}}
    await log.append(
        "c1",
        [
            event("agent_started", agent_id="gemini-cli"),
            event("settings", **chosen),
            event("agent_exited", code=0),
            event("agent_started", agent_id="fake-agent"),  # this start's own
        ],
    )
    session = fake_session(log, workspace)
    # Gemini CLI's mode means nothing to another agent.
    assert await session._last_settings("fake-agent") is None
    assert await session._last_settings("gemini-cli") == {"what": "settings", **chosen}
