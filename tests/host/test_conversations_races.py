"""Conversations started at once by several drivers (tunnel/host/conversations.py): what one
of them is refused leaves nothing behind that a restart would resume."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from anyio.abc import TaskStatus

from tests.host.test_conversations import _Parts, _registry
from tunnel.app.errors import AppError
from tunnel.host.conversations import Conversation, Conversations
from tunnel.host.presence import Presence
from tunnel.log import Log, MemoryStore, NewItem

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


async def test_two_forks_racing_for_the_last_place_leave_one_conversation() -> None:
    built: dict[str, _Parts] = {}
    async with Log(MemoryStore()) as log:
        item = NewItem(type="message", data={"text": "x"}, created_by="ann")
        for _ in range(5):
            await log.append("main", [item] * 200)  # pages to copy: each fork awaits
        conversations = _registry(log, built, max_open=2)
        forked: list[Conversation] = []
        refused: list[str] = []

        async def fork(by: str) -> None:
            try:
                forked.append(await conversations.fork("main", 999, by=by))
            except AppError as exc:
                refused.append(exc.code)

        async with anyio.create_task_group() as tg:
            await tg.start(conversations.run, "main")
            async with anyio.create_task_group() as racing:
                racing.start_soon(fork, "ann")
                racing.start_soon(fork, "bo")
            tg.cancel_scope.cancel()
        assert len(forked) == 1
        assert refused == ["agent_unavailable"]
        # Only the fork that runs has a log, and the source records only that one.
        ids = {info.conversation_id for info in await log.list_conversations()}
        assert ids == {"main", forked[0].id}
        recorded = await log.query("main", types="session_event")
        assert [i.data["to"] for i in recorded if i.data.get("what") == "session_fork"] == [
            forked[0].id
        ]

        # A restart resumes the fork that ran, and nothing else.
        async with anyio.create_task_group() as again:
            restarted = _registry(log, {}, max_open=4)
            await again.start(restarted.run, "main")
            assert {c.id for c in restarted.open_conversations()} == {"main", forked[0].id}
            again.cancel_scope.cancel()


class _Failing(_Parts):
    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        raise RuntimeError("the agent's program is gone")


async def test_a_conversation_whose_agent_cannot_start_is_not_resumed_by_a_restart() -> None:
    async with Log(MemoryStore()) as log:
        failing = {"broken": True}

        def build(conversation_id: str, agent: str, group: int) -> _Parts:
            return _Failing() if failing["broken"] and agent == "other" else _Parts()

        def registry() -> Conversations:
            return Conversations(
                log=log,
                agents={"demo": "demo", "other": "demo"},
                build=build,
                host_name="hannah",
                max_open=4,
            )

        conversations = registry()
        async with anyio.create_task_group() as tg:
            await tg.start(conversations.run, "main")
            with pytest.raises(AppError) as refused:
                await conversations.start("other", by="ann")
            assert refused.value.code == "agent_unavailable"
            tg.cancel_scope.cancel()
        # The driver was told it did not start: a restart (where it might) starts none.
        failing["broken"] = False
        async with anyio.create_task_group() as again:
            restarted = registry()
            await again.start(restarted.run, "main")
            assert [c.id for c in restarted.open_conversations()] == ["main"]
            again.cancel_scope.cancel()


class _SlowToStop:
    """An agent that takes its time to stop, as an ACP agent's process may (shielded)."""

    def __init__(self) -> None:
        self.stopping = anyio.Event()
        self.may_stop = anyio.Event()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                self.stopping.set()
                await self.may_stop.wait()


class _Quiet:
    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await anyio.sleep_forever()

    async def close(self) -> None:
        pass


class _Broadcast(_Quiet):
    def __init__(self) -> None:
        self.parted = False

    def part_all(self) -> None:
        self.parted = True


async def test_a_closed_conversations_channels_leave_its_group_before_its_agent_has_stopped() -> (
    None
):
    """Its group is free for the next conversation as soon as it is closed: its channels must
    be out of it then, not once its agent is done stopping."""
    from tunnel.host.share import _Parts as SharedParts

    session = _SlowToStop()
    broadcast = _Broadcast()
    parts: Any = SharedParts(
        session=session,  # type: ignore[arg-type]
        presence=Presence(),
        broadcast=broadcast,  # type: ignore[arg-type]
        signer=_Quiet(),  # type: ignore[arg-type]
    )
    async with anyio.create_task_group() as tg:
        scope = anyio.CancelScope()

        async def serve() -> None:
            with scope:
                await parts.run()

        tg.start_soon(serve)
        await anyio.wait_all_tasks_blocked()
        scope.cancel()
        try:
            with anyio.fail_after(5):
                await session.stopping.wait()
            await anyio.wait_all_tasks_blocked()
            parted_while_stopping = broadcast.parted
        finally:
            session.may_stop.set()
    assert parted_while_stopping
    assert broadcast.parted
