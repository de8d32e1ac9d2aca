"""What only events tell reaches a teammate who joins between two of them: right after its
snapshot, the agent's status (with the seq of the prompt the running turn answers, so stored
prompts after it are known to wait), and a terminal agent's size, which `ready` says too and
every resize says again. In memory, with the channel faked and the agent real."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tunnel.agents import DemoSession
from tunnel.agents.base import AgentSession
from tunnel.agents.pty_agent import PtySession
from tunnel.app.requests import Prompt, Resize, Subscribe
from tunnel.host.presence import Presence
from tunnel.host.session import SessionChannelHandler
from tunnel.log import Log, MemoryStore

from .test_session_history import ScriptedChannel

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@contextlib.asynccontextmanager
async def attached(
    channel: ScriptedChannel, session: AgentSession, log: Log, presence: Presence
) -> AsyncIterator[None]:
    handler = SessionChannelHandler(channel, session=session, log=log, presence=presence)
    async with anyio.create_task_group() as tg:
        tg.start_soon(handler.run)
        yield
        tg.cancel_scope.cancel()


def events_after_snapshot(channel: ScriptedChannel, kind: str) -> list[dict[str, Any]]:
    """The data of the `kind` events the channel got after its snapshot's last page."""
    done = next(
        (
            index
            for index, message in enumerate(channel.messages)
            if message["op"] == "snapshot" and not message["more"]
        ),
        None,
    )
    if done is None:
        return []
    return [
        message["event"]["data"]
        for message in channel.messages[done + 1 :]
        if message["op"] == "event" and message["event"]["kind"] == kind
    ]


def user_prompts(log_items: list[dict[str, Any]]) -> list[int]:
    return [
        item["seq"]
        for item in log_items
        if item["type"] == "message" and item["data"].get("role") == "user"
    ]


async def test_a_joiner_mid_turn_is_told_the_turn_runs_and_which_prompt_it_answers(
    tmp_path: Path,
) -> None:
    log = Log(MemoryStore())
    session = DemoSession(log=log, workspace=tmp_path, conversation_id="c1", delay=0)
    presence = Presence()
    driver = ScriptedChannel("drive")
    async with anyio.create_task_group() as tg:
        await tg.start(session.run)
        async with attached(driver, session, log, presence):
            await driver.request(Subscribe(after=None))
            await driver.request(Prompt(text="first"))
            # The demo's turn holds at its permission request: a second prompt waits behind it.
            with anyio.fail_after(20):
                while not session.pending_permissions():
                    await anyio.sleep(0.01)
            await driver.request(Prompt(text="second"))
            await driver.wait_for(lambda: len(user_prompts(driver_items(driver))) == 2)

            viewer = ScriptedChannel("view")
            async with attached(viewer, session, log, presence):
                await viewer.request(Subscribe(after=None))
                await viewer.wait_for(lambda: bool(events_after_snapshot(viewer, "status")))
                stored = [item for page in viewer.of("snapshot") for item in page["items"]]
        tg.cancel_scope.cancel()
    first, second = user_prompts(stored)
    assert events_after_snapshot(viewer, "status") == [
        {"state": "running", "queued": 1, "turn": first}
    ]
    assert second > first


def driver_items(channel: ScriptedChannel) -> list[dict[str, Any]]:
    items = [item for page in channel.of("snapshot") for item in page["items"]]
    return items + [message["item"] for message in channel.of("item")]


async def test_an_idle_chat_agent_is_said_idle_and_has_no_terminal_size(tmp_path: Path) -> None:
    log = Log(MemoryStore())
    session = DemoSession(log=log, workspace=tmp_path, conversation_id="c1", delay=0)
    viewer = ScriptedChannel("view")
    async with attached(viewer, session, log, Presence()):
        await viewer.request(Subscribe(after=None))
        await viewer.wait_for(lambda: bool(events_after_snapshot(viewer, "status")))
    assert events_after_snapshot(viewer, "status") == [{"state": "idle", "queued": 0}]
    assert "terminal" not in viewer.of("ready")[0]
    assert events_after_snapshot(viewer, "terminal_size") == []


async def test_a_terminal_agents_size_is_in_ready_after_the_snapshot_and_at_each_resize(
    tmp_path: Path,
) -> None:
    log = Log(MemoryStore())
    # Not run: its size is the session's, program or not.
    session = PtySession(
        argv=["sh"], log=log, workspace=tmp_path, conversation_id="c1", cols=100, rows=30
    )
    presence = Presence()
    viewer = ScriptedChannel("view")
    driver = ScriptedChannel("drive")
    async with attached(viewer, session, log, presence), attached(driver, session, log, presence):
        await viewer.request(Subscribe(after=None))
        await viewer.wait_for(lambda: bool(events_after_snapshot(viewer, "terminal_size")))
        assert viewer.of("ready")[0]["terminal"] == {"cols": 100, "rows": 30}
        # A terminal program has no turns: no status.
        assert events_after_snapshot(viewer, "status") == []

        await driver.request(Subscribe(after=None))
        await driver.request(Resize(cols=120, rows=40))
        await viewer.wait_for(lambda: len(events_after_snapshot(viewer, "terminal_size")) == 2)
        # The same size again changes nothing, so it tells nobody anything.
        await driver.request(Resize(cols=120, rows=40))
        await driver.request(Resize(cols=90, rows=20))
        await viewer.wait_for(lambda: len(events_after_snapshot(viewer, "terminal_size")) == 3)
    assert events_after_snapshot(viewer, "terminal_size") == [
        {"cols": 100, "rows": 30},
        {"cols": 120, "rows": 40},
        {"cols": 90, "rows": 20},
    ]
    assert driver.of("error") == []
