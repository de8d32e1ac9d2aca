"""Permission requests: answerable the moment anyone can see them; the decision says what."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
import pytest

from tunnel.agents.permissions import PermissionBroker, PermissionOption
from tunnel.agents.recorder import Recorder
from tunnel.log import Item, Log

pytestmark = pytest.mark.anyio

OPTIONS = (
    PermissionOption(option_id="always", name="Always Allow", kind="allow_always"),
    PermissionOption(option_id="once", name="Allow", kind="allow_once"),
)


class SlowRecorder(Recorder):
    """Stores the request, then lingers before its append returns (as a busy disk would)."""

    def __init__(self, log: Log) -> None:
        super().__init__(log, "c1")
        self.linger = anyio.Event()

    async def permission_request(self, data: Mapping[str, Any]) -> Item:
        item = await super().permission_request(data)
        await self.linger.wait()
        return item


async def test_a_request_seen_by_a_subscriber_can_be_answered_at_once(log: Log) -> None:
    recorder = SlowRecorder(log)
    broker = PermissionBroker(recorder)
    answered: list[str] = []

    async def answer_on_sight(*, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with log.subscribe("c1") as sub:
            task_status.started()
            async for entry in sub:
                if isinstance(entry, Item) and entry.type == "permission_request":
                    # The append has not returned to the broker yet.
                    await broker.answer(entry.data["request_id"], "once", by="alice")
                    answered.append(entry.data["request_id"])
                    recorder.linger.set()
                    return

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await tg.start(answer_on_sight)
            pending = await broker.open(title="Edit", tool_call_id="t1", options=OPTIONS)
            assert pending is not None
            decision = await broker.wait(pending)
    assert decision.option == OPTIONS[1]
    assert answered == [pending.request_id]
    items = await log.query("c1")
    assert [i.type for i in items] == ["permission_request", "permission_decision"]
    assert items[1].data == {
        "request_id": pending.request_id,
        "option_id": "once",
        "option_name": "Allow",
        "option_kind": "allow_once",
        "outcome": "selected",
    }
    assert items[1].created_by == "alice"


async def test_open_requests_include_one_still_being_stored(log: Log) -> None:
    recorder = SlowRecorder(log)
    broker = PermissionBroker(recorder)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: broker.open(title="Edit", tool_call_id=None, options=OPTIONS))
        with anyio.fail_after(5):
            while not broker.open_requests():
                await anyio.sleep(0.01)
        (data,) = broker.open_requests()
        assert [o["option_id"] for o in data["options"]] == ["always", "once"]
        assert broker.pending() == []  # no stored item yet
        recorder.linger.set()
