"""Logging the agent in when it asks (docs/agents.md, "Logging in"): an agent that needs a login
the host cannot choose, at its start or in the middle of a session, is recorded as
`auth_required` with its methods; a driver's `authenticate` logs it in through the host, and the
outcome is recorded with who asked; a viewer's is refused. The fake ACP agent, over stdio."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tunnel.agents import SessionError
from tunnel.app.requests import Authenticate, Subscribe
from tunnel.host.presence import Presence
from tunnel.host.session import SessionChannelHandler
from tunnel.log import Log

from ..host.test_session_history import ScriptedChannel
from .conftest import running
from .test_acp_session import acp_session

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


async def test_a_start_that_needs_a_login_waits_for_a_driver_to_choose_one(
    log: Log, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ACP_AUTH", "1")
    monkeypatch.delenv("FAKE_ACP_KEY", raising=False)
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        asked = await rec.wait_item("session_event", what="auth_required")
        assert [m["id"] for m in asked.data["methods"]] == ["fake-key", "browser", "password"]
        assert asked.data["methods"][2]["description"] == "as a person types it"
        with pytest.raises(SessionError) as refused:
            await session.authenticate("root", by="alice")
        assert refused.value.code == "unknown_request"

        await session.authenticate("browser", by="alice")
        failed = await rec.wait_item("session_event", what="auth_failed")
        assert failed.created_by == "alice"
        assert failed.data["method_id"] == "browser"
        assert session.agent_pid is None

        await session.authenticate("password", by="bob")
        done = await rec.wait_item("session_event", what="authenticated")
        assert done.created_by == "bob"
        assert done.data["method_id"] == "password"
        started = await rec.wait_item("session_event", what="agent_started")
        assert started.data["auth_method"] == "password"
        await session.prompt("hi", by="alice")
        await rec.wait_item("message", text="echo: hi")


async def test_a_driver_logs_in_again_when_a_prompt_answers_auth_required(
    log: Log, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ACP_AUTH", "1")
    monkeypatch.setenv("FAKE_ACP_KEY", "k")
    session = acp_session(log, workspace)
    viewer, driver = ScriptedChannel("view"), ScriptedChannel("drive")
    async with running(session, log) as rec, anyio.create_task_group() as tg:
        for channel in (viewer, driver):
            handler = SessionChannelHandler(channel, session=session, log=log, presence=Presence())
            tg.start_soon(handler.run)
            await channel.request(Subscribe(after=None))
        await session.prompt("logout", by="alice")
        await session.prompt("hi", by="alice")
        asked = await rec.wait_item("session_event", what="auth_required")
        assert "password" in [m["id"] for m in asked.data["methods"]]

        await viewer.request(Authenticate(method_id="password"))
        await viewer.wait_for(lambda: bool(viewer.of("error")))
        assert viewer.of("error")[0]["code"] == "forbidden"

        await driver.request(Authenticate(method_id="password"))
        done = await rec.wait_item("session_event", what="authenticated")
        assert done.created_by == driver.name
        pid = session.agent_pid
        await session.prompt("again", by="alice")
        await rec.wait_item("message", text="echo: again")
        assert session.agent_pid == pid  # the same process, logged in again
        tg.cancel_scope.cancel()
