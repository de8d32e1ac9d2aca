"""What an agent reports of its own accord about its session: its config options
(`config_option_update`, recorded as a `settings` event by the agent and shown as settings are)
and its title (`session_info_update`, passed to the teammates present as data, never stored).
Driven through tests/agents/fake_acp_agent.py."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tunnel.log import Log
from tunnel.terminal.render import render_item

from .conftest import running
from .test_acp import acp_session

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_a_model_the_agent_switches_itself_is_recorded_once_as_its_own_and_shown(
    log: Log, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ACP_FLAVOR", "config")  # the model is a config option
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        first = await rec.wait_item("session_event", what="settings")
        assert first.data["models"]["current"] == "fast"
        await session.prompt("fallback", by="alice")
        await rec.wait_item("message", text="now smart")
        await session.prompt("settings", by="alice")
        await rec.wait_item("message", text="mode default model smart")
    settings = [i for i in rec.of_type("session_event") if i.data["what"] == "settings"]
    # The agent sent the same options twice: one record of the change, by the agent, with no
    # `change` (nobody asked for it).
    assert len(settings) == 2, [i.data for i in settings]
    switched = settings[1]
    assert switched.created_by == "agent"
    assert "change" not in switched.data
    assert switched.data["models"]["current"] == "smart"
    options = {o["id"]: o["current_value"] for o in switched.data["config_options"]}
    assert options == {"model": "smart", "thinking": False}
    # What attach and the host console print for it.
    shown = render_item(switched.to_wire()).plain
    assert "agent settings" in shown
    assert "model: smart (Smart model)" in shown


async def test_a_session_title_is_recorded_once_per_change_and_printed(
    log: Log, workspace: Path
) -> None:
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        await session.prompt("title Fix the login test", by="alice")
        await rec.wait_item("message", text="titled")
        await rec.wait_idle()
        # The same title again records nothing more.
        await session.prompt("title Fix the login test", by="alice")
        await rec.wait_idle()
    stored = await log.query("c1", limit=1000)
    titles = [i for i in stored if i.type == "session_event" and i.data["what"] == "title"]
    assert [(i.data["title"], i.created_by) for i in titles] == [("Fix the login test", "agent")]
    # It is not taken for an update kind the host does not know, nor sent as a usage event.
    assert not [i for i in stored if i.data.get("what") == "unsupported_update"]
    assert not [e for e in rec.events if e.data.get("update") == "session_info_update"]
    assert "the session is titled Fix the login test" in render_item(titles[0].to_wire()).plain


async def test_what_the_stable_schema_lacks_is_passed_on_live_or_ignored_never_stored(
    log: Log, workspace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A markdown `plan_update` and a `plan_removed` reach the teammates present as `usage`
    events, stored nowhere; `elicitation/complete` (URL mode, never offered) is ignored; no
    traceback, no unsupported-update note (docs/agents.md, the coverage table)."""
    caplog.set_level(logging.INFO)
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        await session.prompt("unstable", by="alice")
        await rec.wait_item("message", text="after unstable")
        await rec.wait_idle()
    passed_on = [e.data for e in rec.events if e.kind == "usage"]
    assert [d["update"] for d in passed_on] == ["plan_update", "plan_removed"]
    assert passed_on[0]["plan"]["content"] == "# Steps"
    assert passed_on[1]["plan_id"] == "p1"
    stored = await log.query("c1", limit=1000)
    assert not [i for i in stored if "# Steps" in str(i.data) or "plan_removed" in str(i.data)]
    assert not [i for i in stored if i.data.get("what") == "unsupported_update"]
    assert not [r for r in caplog.records if r.exc_info]
