"""Sixteen view links repeating `subscribe after:-1`, through a real relay process, against the
host `tunnel host` runs (the SQLite log): what the host sends them stays within each channel's
catch-up budget, and a teammate joining meanwhile still gets its snapshot (docs/application.md,
"Catch-up"; docs/security.md, "What a view link can take")."""

from __future__ import annotations

import contextlib
import os
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from rich.console import Console

from tests.host.conftest import wait_online
from tests.support import RelayProcess, host_settings
from tunnel.app.follower import SnapshotPage
from tunnel.host.share import Shared, ShareSettings, run_share
from tunnel.log import NewItem
from tunnel.log.sqlite import SQLiteStore
from tunnel.teammate.client import TeammateSession, connect_teammate

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

FLOODERS = 16
BURST = 256 * 1024
RATE = 32 * 1024
FLOOD_SECONDS = 3.0
LOG_ITEMS = 200
TEXT = "x" * 2000  # 200 items of about 2 KB: a log of about 400 KB, two snapshot pages


def down_bytes(relay: RelayProcess) -> float:
    """Bytes the relay forwarded from the host to teammates, from its /metrics (loopback)."""
    with urllib.request.urlopen(f"{relay.url}/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith('relay_forwarded_bytes_total{direction="down"} '):
                return float(line.split()[1])
    raise AssertionError("no relay_forwarded_bytes_total")


@contextlib.asynccontextmanager
async def sharing_a_long_log(relay: RelayProcess, tmp_path: Path) -> AsyncIterator[Shared]:
    db = tmp_path / "log.db"
    store = await SQLiteStore.open(db)
    try:
        items = [
            NewItem(type="message", data={"role": "agent", "text": TEXT}, created_by="agent")
            for _ in range(LOG_ITEMS)
        ]
        await store.append("main", items)
    finally:
        await store.aclose()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    settings = ShareSettings(
        host=host_settings(relay.url, tmp_path),
        agent="demo",
        workspace=workspace,
        log_db=db,
        interactive=False,
        demo_delay=0,
        replay_burst=BURST,
        replay_rate=RATE,
    )

    async def share(*, task_status: anyio.abc.TaskStatus[Shared]) -> None:
        with open(os.devnull, "w") as sink:
            await run_share(settings, console=Console(file=sink), task_status=task_status)

    async with anyio.create_task_group() as tg:
        shared: Shared = await tg.start(share)
        await wait_online(shared.host.view_link)
        yield shared
        tg.cancel_scope.cancel()


async def flood(session: TeammateSession, until: float, pages: list[int]) -> None:
    """Ask for the whole log, wait for its first page, then ask again as soon as the last ask
    was answered (or 0.3 s passed), reading whatever comes, until `until`; count the snapshot
    pages that came in `pages`. The first ask is waited for: a new subscribe cancels the
    replay in progress, so on a loaded machine a flooder asking every 0.3 s while sixteen others
    read their pages could cancel its own replay every time and never get a page."""
    answered = anyio.Event()
    first_page = anyio.Event()
    async with anyio.create_task_group() as tg:

        async def drain() -> None:
            nonlocal answered
            while True:
                event = await session.receive()
                if isinstance(event, SnapshotPage):
                    pages.append(1)
                    first_page.set()
                    if not event.more:
                        answered.set()
                        answered = anyio.Event()

        tg.start_soon(drain)
        await session.subscribe(after=-1)
        with anyio.fail_after(60):
            await first_page.wait()
        for _ in range(500):  # bounded: at most one ask every few milliseconds
            if time.monotonic() >= until:
                break
            await session.subscribe(after=-1)
            with anyio.move_on_after(0.3):
                await answered.wait()
        tg.cancel_scope.cancel()


async def test_flooding_viewers_stay_within_their_budget_and_a_joiner_gets_its_snapshot(
    relay: RelayProcess, tmp_path: Path
) -> None:
    async with sharing_a_long_log(relay, tmp_path) as shared, contextlib.AsyncExitStack() as stack:
        link = shared.host.view_link
        flooders = [
            await stack.enter_async_context(connect_teammate(link, name=f"flood-{n}"))
            for n in range(FLOODERS)
        ]
        before = down_bytes(relay)
        started = time.monotonic()
        until = started + FLOOD_SECONDS
        async with anyio.create_task_group() as tg:
            pages: list[list[int]] = [[] for _ in flooders]
            for session, counted in zip(flooders, pages, strict=True):
                tg.start_soon(flood, session, until, counted)
            # Meanwhile a fresh join: its snapshot (the end of the log) arrives.
            async with connect_teammate(link, name="fresh") as fresh:
                await fresh.subscribe()
                with anyio.fail_after(30):
                    while not isinstance(page := await fresh.receive(), SnapshotPage) or (
                        page.more
                    ):
                        pass
                assert page.items
        elapsed = time.monotonic() - started
        sent = down_bytes(relay) - before

    # Each channel: its burst, then its rate for as long as the flood lasted (a slower run only
    # loosens the bound); room for what is not replay (ready, presence, frame and AEAD overhead,
    # the fresh join's snapshot page).
    budget = (FLOODERS + 1) * (BURST + RATE * elapsed) * 1.25 + 256 * 1024
    # Unbounded, the same flood asks for the whole log about 150 times per flooder.
    assert sent <= budget, f"{sent:.0f} bytes down in {elapsed:.1f} s, over {budget:.0f}"
    # Served, not refused: every flooder got snapshot pages within its burst.
    assert all(counted for counted in pages)
    assert sent > FLOODERS * LOG_ITEMS * len(TEXT) / 4
