"""The host's conversation registry (tunnel/host/conversations.py) with stand-in parts and an
in-memory log: start, close, fork and the list, without agents or sockets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import TaskStatus

from tunnel.app.errors import AppError
from tunnel.host.conversations import (
    MAX_LISTED_CLOSED,
    Conversations,
    agent_label,
    split_agent,
)
from tunnel.host.presence import Presence
from tunnel.log import Log, MemoryStore, NewItem
from tunnel.log.sqlite import open_host_store

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


class _Session:
    def __init__(self) -> None:
        self.running = False
        self.permissions: list[dict[str, Any]] = []

    def status(self) -> dict[str, Any]:
        return {"state": "running" if self.running else "idle", "queued": 0}

    def open_permissions(self) -> list[dict[str, Any]]:
        return self.permissions

    def pending_elicitations(self) -> list[Any]:
        return []


class _Parts:
    def __init__(self) -> None:
        self.session: Any = _Session()
        self.presence = Presence()
        self.stopped = anyio.Event()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            await anyio.sleep_forever()
        finally:
            self.stopped.set()

    async def cast_through(self, seq: int) -> None:
        pass


def _registry(log: Log, built: dict[str, _Parts], max_open: int = 4) -> Conversations:
    def build(conversation_id: str, agent: str, group: int) -> _Parts:
        parts = built[conversation_id] = _Parts()
        return parts

    return Conversations(
        log=log,
        agents={"demo": "demo", "other": "demo"},
        build=build,
        host_name="hannah",
        max_open=max_open,
    )


async def test_a_busy_turn_does_not_send_the_list_for_each_item() -> None:
    built: dict[str, _Parts] = {}
    async with Log(MemoryStore()) as log, anyio.create_task_group() as tg:
        conversations = _registry(log, built)
        await tg.start(conversations.run, "main")
        session = built["main"].session
        await anyio.wait_all_tasks_blocked()  # its follower reads the log from here on
        session.running = True
        item = NewItem(type="message", data={"text": "x"}, created_by="agent")
        idle = conversations.version
        await log.append("main", [item])
        with anyio.fail_after(5):
            await conversations.wait_changed(idle)
        busy = conversations.version
        assert conversations.listing()["list"][0]["state"] == "working"
        for _ in range(50):
            await log.append("main", [item])
            await anyio.sleep(0)
        await anyio.wait_all_tasks_blocked()
        assert conversations.version == busy  # fifty items, nothing a reader sees changed
        session.permissions.append({"request_id": "p1"})
        await log.append("main", [item])
        with anyio.fail_after(5):
            await conversations.wait_changed(busy)
        entry = conversations.listing()["list"][0]
        assert (entry["state"], entry["pending"]) == ("waiting", 1)
        tg.cancel_scope.cancel()


async def test_start_close_and_the_bounds_of_open_and_closed_conversations() -> None:
    built: dict[str, _Parts] = {}
    async with Log(MemoryStore()) as log, anyio.create_task_group() as tg:
        conversations = _registry(log, built, max_open=2)
        await tg.start(conversations.run, "main")
        with pytest.raises(AppError) as unknown:
            await conversations.start("nobody", by="ann")
        assert unknown.value.code == "unknown_request"
        second = await conversations.start("other", by="ann")
        assert second.group == 1
        with pytest.raises(AppError) as full:
            await conversations.start("demo", by="ann")
        assert full.value.code == "agent_unavailable"
        await conversations.close(second.id, by="ann")
        with anyio.fail_after(5):
            await built[second.id].stopped.wait()
        with pytest.raises(AppError):
            await conversations.close(second.id, by="ann")
        # Starting and closing again and again keeps a bounded number in memory.
        for _ in range(MAX_LISTED_CLOSED + 5):
            started = await conversations.start("demo", by="ann")
            assert started.group == 1  # the closed one's group, free again
            await conversations.close(started.id, by="ann")
        listed = conversations.listing()["list"]
        assert len(listed) == 1 + MAX_LISTED_CLOSED
        assert listed[0]["id"] == "main"
        tg.cancel_scope.cancel()


async def test_a_restart_resumes_what_was_left_open_and_not_what_was_closed(
    tmp_path: Path,
) -> None:
    built: dict[str, _Parts] = {}
    async with (
        Log(await open_host_store(tmp_path / "log.db")) as log,
        anyio.create_task_group() as tg,
    ):
        conversations = _registry(log, built)
        await tg.start(conversations.run, "main")
        kept = await conversations.start("other", by="ann")
        gone = await conversations.start("demo", by="bo")
        await conversations.close(gone.id, by="bo")
        tg.cancel_scope.cancel()
    built.clear()
    async with (
        Log(await open_host_store(tmp_path / "log.db")) as log,
        anyio.create_task_group() as tg,
    ):
        conversations = _registry(log, built)
        await tg.start(conversations.run, "main")
        assert sorted(built) == sorted(["main", kept.id])
        resumed = conversations.get(kept.id)
        assert resumed is not None
        assert (resumed.agent, resumed.by) == ("other", "ann")
        tg.cancel_scope.cancel()


def test_agent_names_and_specs_are_told_apart() -> None:
    assert split_agent("claude=acp:claude-agent-acp") == ("claude", "acp:claude-agent-acp")
    assert split_agent("pty:env A=B sh") == (None, "pty:env A=B sh")
    assert split_agent("demo") == (None, "demo")
    with pytest.raises(ValueError, match="agent name"):
        split_agent("Bad=demo")
    assert agent_label("acp:npx -y @google/gemini-cli --acp") == "gemini-cli"
    assert agent_label("pty:bash") == "bash"
    assert agent_label("demo") == "demo"
