"""Late joiners replaying a long log take turns (one `ReplayBudget` per host): a teammate who
follows the conversation live keeps receiving it while they replay, and the host's memory stays
bounded. Real processes: a relay, `tunnel host` with a log filled beforehand, and teammates.

The assertions count and order; they never time. The timings and memory are printed."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from tests.support import RelayProcess
from tunnel.app.follower import FollowerEvent, Item, SnapshotPage
from tunnel.app.requests import PermissionAnswer, Prompt, Subscribe, encode_request
from tunnel.log import NewItem, SQLiteStore
from tunnel.teammate.client import TeammateSession, connect_teammate

from .conftest import wait_online
from .host_process import HostProcess

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(240)]

ITEMS = 6_000
TEXT = 12_000  # characters an item: a 72 MB conversation
JOINERS = 10
MEMORY_BOUND = 48 * 1024 * 1024
"""Generous: with the budget the host grew by about 25 MiB here; before it, ten concurrent
replays of this log grew it by about 70 MiB."""


def fill(db: Path) -> None:
    store = SQLiteStore(db, synchronous="NORMAL")
    try:
        body = "lorem ipsum dolor sit amet " * (TEXT // 27)
        for start in range(0, ITEMS, 1000):
            batch = [
                NewItem(
                    type="message",
                    data={"role": "agent", "text": f"{start + i}: {body}"},
                    created_by="agent",
                )
                for i in range(1000)
            ]
            anyio.run(_append, store, batch)
    finally:
        store.close()


async def _append(store: SQLiteStore, batch: list[NewItem]) -> None:
    await store.append("main", batch)


async def follow(
    link: str, name: str, after: int | None, on_message: Callable[[FollowerEvent], bool]
) -> None:
    """Attach, subscribe after `after`, and hand every message to `on_message` until it says
    it has seen enough."""
    async with connect_teammate(link, name=name) as session:
        await session.subscribe(after)
        while not on_message(await session.receive()):
            pass


class Peak:
    """The host's largest RSS, sampled in a thread."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.base = self.process.memory_info().rss
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            with contextlib.suppress(psutil.Error):
                self.peak = max(self.peak, self.process.memory_info().rss)

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def test_late_joiners_replaying_a_long_log_leave_the_live_tail_going(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    db = tmp_path / "log.db"
    await anyio.to_thread.run_sync(fill, db)
    host = HostProcess(relay.url, tmp_path, workspace=workspace, log_db=db, interactive=False)
    await anyio.to_thread.run_sync(host.start)
    try:
        await wait_online(host.view_link)
        order: list[tuple[str, Any]] = []
        first_pages = 0
        all_started = anyio.Event()
        turn_over = anyio.Event()
        started = time.monotonic()

        def joiner(index: int) -> Callable[[FollowerEvent], bool]:
            expected = 0

            def on_message(message: FollowerEvent) -> bool:
                nonlocal expected, first_pages
                if not isinstance(message, SnapshotPage):
                    return False
                if expected == 0:
                    first_pages += 1
                    if first_pages == JOINERS:
                        all_started.set()
                seqs = [item["seq"] for item in message.items]
                # Every item once, in order, no gap.
                assert seqs == list(range(expected, expected + len(seqs)))
                expected += len(seqs)
                if message.more:
                    return False
                order.append(("replayed", index, expected, time.monotonic() - started))
                return True

            return on_message

        driver: TeammateSession | None = None

        def live(message: FollowerEvent) -> bool:
            if not isinstance(message, Item):
                return False
            item = message.item
            order.append(("live", item["type"], item["seq"], time.monotonic() - started))
            if item["type"] == "permission_request" and driver is not None:
                answer = PermissionAnswer(
                    request_id=item["data"]["request_id"], option_id="allow_once"
                )
                tg.start_soon(driver.send, encode_request(answer))
            if item["type"] == "tool_result":
                turn_over.set()
                return True
            return False

        with Peak(host.pid) as memory:
            async with (
                connect_teammate(host.drive_link, name="dave") as driver,
                anyio.create_task_group() as tg,
            ):
                # The live teammate is level with the log already: it replays nothing.
                tg.start_soon(follow, host.view_link, "vera", ITEMS - 1, live)
                # after=-1 asks for the whole log: the most a joiner can make the host replay.
                for index in range(JOINERS):
                    tg.start_soon(follow, host.view_link, f"late{index}", -1, joiner(index))
                with anyio.fail_after(60):
                    await all_started.wait()
                await driver.send(encode_request(Subscribe(after=ITEMS - 1)))
                await driver.send(encode_request(Prompt(text="hello")))
                with anyio.fail_after(150):
                    await turn_over.wait()
        growth = memory.peak - memory.base
        print(f"\nhost RSS {memory.base / 2**20:.0f} MiB, peak +{growth / 2**20:.0f} MiB")
        for entry in order:
            print(entry)
        live_items = [entry for entry in order if entry[0] == "live"]
        replays = [entry for entry in order if entry[0] == "replayed"]
        assert len(replays) == JOINERS
        assert all(entry[2] >= ITEMS for entry in replays)
        # The whole turn, permission and tool run included, reached the live teammate while
        # the late joiners were still replaying the log.
        assert {entry[1] for entry in live_items} >= {"permission_request", "tool_result"}
        assert order.index(live_items[-1]) < order.index(replays[-1])
        assert growth < MEMORY_BOUND
    finally:
        await anyio.to_thread.run_sync(host.stop)
