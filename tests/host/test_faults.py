"""Faults never take a session down: real `tunnel host` processes whose log stops being
writable, or that are killed mid-turn, and the teammates attached to them through a real relay.

The storage fault is real: the kernel's file size limit (RLIMIT_FSIZE, set on the running host
with prlimit) makes every write of the host to its log fail, as a full disk does (EFBIG instead
of ENOSPC; SQLite says "disk I/O error" instead of "database or disk is full"), and lifting it is
space coming back. The kills are SIGKILL: nothing of the host's cleanup runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from tests.log.helpers import tunnel
from tests.support import RelayProcess
from tunnel.agents.recovery import INTERRUPTED, RESTART_EVENT
from tunnel.agents.writer import OUTAGE_EVENT
from tunnel.app.requests import PermissionAnswer, Prompt
from tunnel.log import Item, SQLiteStore

from .conftest import acp_spec, wait_online
from .host_process import HostProcess
from .teammate import Teammate, attached

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


def storage(teammate: Teammate, state: str) -> list[dict[str, Any]]:
    return [
        e["data"] for e in teammate.events if e["kind"] == "storage" and e["data"]["state"] == state
    ]


def user_prompts(teammate: Teammate) -> list[dict[str, Any]]:
    return [i for i in teammate.items if i["type"] == "message" and i["data"]["role"] == "user"]


async def stored(db: Path) -> list[Item]:
    store = SQLiteStore(db, readonly=True)
    try:
        return await store.query("main", limit=10_000)
    finally:
        store.close()


async def test_a_log_that_cannot_be_written_pauses_the_host_which_recovers_by_itself(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    db = tmp_path / "log.db"
    host = HostProcess(relay.url, tmp_path, workspace=workspace, log_db=db)
    await anyio.to_thread.run_sync(host.start)
    try:
        await wait_online(host.view_link)
        async with (
            attached(host.drive_link, "dave") as dave,
            attached(host.view_link, "vera") as vera,
        ):
            await dave.wait_for(lambda t: t.snapshot_done)
            await dave.send(Prompt(text="one"))
            await vera.wait_for(lambda t: t.item_of("permission_request") is not None)
            request = vera.item_of("permission_request")
            assert request is not None

            host.limit_file_size(0)  # from now on the kernel refuses every write to the log
            # Answered as the log fails: the decision is held, the tool runs, its items wait.
            await dave.send(
                PermissionAnswer(request_id=request["data"]["request_id"], option_id="allow_once")
            )
            await vera.wait_for(lambda t: bool(storage(t, "failing")))
            failing = storage(vera, "failing")[0]
            assert failing["reason"] == "disk I/O error"
            await dave.send(Prompt(text="two"))
            await dave.wait_for(lambda t: bool(t.errors))
            assert dave.errors[0]["code"] == "agent_unavailable"
            assert "the log cannot be written (disk I/O error)" in dave.errors[0]["message"]
            # A teammate who attaches during the outage is told at once.
            async with attached(host.view_link, "late") as late:
                await late.wait_for(lambda t: t.snapshot_done and bool(storage(t, "failing")))
            # It retries, with backoff, and stays up (it used to exit at the first append).
            await vera.wait_for(lambda t: len(storage(t, "failing")) >= 4)
            assert host.alive
            assert vera.item_of("tool_result") is None
            await anyio.to_thread.run_sync(host.wait_output, "the log cannot be written")

            host.limit_file_size(None)  # space is back
            await vera.wait_for(lambda t: bool(storage(t, "ok")) and t.item_of("tool_result"))
            await anyio.to_thread.run_sync(host.wait_output, "the log writes again")
            recovered = storage(vera, "ok")[0]
            assert recovered["held"] >= 2
            assert recovered["dropped"] == 0
            await dave.send(Prompt(text="three"))
            await vera.wait_for(
                lambda t: len([i for i in t.items if i["type"] == "permission_request"]) == 2
            )
            assert [p["data"]["text"] for p in user_prompts(vera)] == ["one", "three"]
            assert vera.seqs() == list(range(len(vera.items)))
    finally:
        assert await anyio.to_thread.run_sync(host.stop) == 0
    items = await stored(db)
    assert [i.seq for i in items] == list(range(len(items)))
    whats = [i.data.get("what") for i in items]
    outage = items[whats.index(OUTAGE_EVENT)]
    # Recorded before what was held, with what went wrong.
    assert items[outage.seq + 1].type == "permission_decision"
    assert items[outage.seq + 1].created_by == "dave"
    assert outage.data["reason"] == "disk I/O error"
    assert outage.data["held"] >= 2
    assert not any(i.data.get("text") == "two" for i in items)
    check = await anyio.to_thread.run_sync(lambda: tunnel("log", "check", "--db", str(db)))
    assert check.returncode == 0, check.stdout + check.stderr


async def test_a_host_killed_mid_turn_is_closed_by_the_next_and_allow_works_again(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    db = tmp_path / "log.db"
    host = HostProcess(relay.url, tmp_path, workspace=workspace, log_db=db)
    await anyio.to_thread.run_sync(host.start)
    try:
        await wait_online(host.view_link)
        async with attached(host.drive_link, "dave") as dave:
            await dave.wait_for(lambda t: t.snapshot_done)
            await dave.send(Prompt(text="first"))
            await dave.wait_for(lambda t: t.item_of("permission_request") is not None)
            await dave.send(Prompt(text="second"))
            await dave.send(Prompt(text="third"))
            await dave.wait_for(lambda t: len(user_prompts(t)) == 3)
            old = dave.item_of("permission_request")
            call = dave.item_of("tool_call")
            assert old is not None
            assert call is not None
            first, second, third = (p["seq"] for p in user_prompts(dave))
            host.kill()
    finally:
        host.kill()

    again = HostProcess(relay.url, tmp_path, workspace=workspace, log_db=db)
    await anyio.to_thread.run_sync(again.start)
    try:
        await wait_online(again.drive_link)
        async with attached(again.drive_link, "dave") as dave:
            await dave.wait_for(lambda t: t.item_of("session_event", what=RESTART_EVENT))
            summary = dave.item_of("session_event", what=RESTART_EVENT)
            assert summary is not None
            assert summary["created_by"] == "host"
            assert summary["data"]["interrupted_turn"] == first
            assert summary["data"]["dropped_prompts"] == [second, third]
            decision = dave.item_of("permission_decision")
            assert decision is not None
            assert decision["data"]["request_id"] == old["data"]["request_id"]
            assert decision["data"]["outcome"] == "cancelled"
            assert decision["data"]["reason"] == INTERRUPTED
            closed = dave.item_of("tool_call_update", status="failed")
            assert closed is not None
            assert closed["data"]["tool_call_id"] == call["data"]["tool_call_id"]

            await dave.send(Prompt(text="fourth"))
            await dave.wait_for(
                lambda t: len([i for i in t.items if i["type"] == "permission_request"]) == 2
            )
            again.type("/allow")  # at the host console: the new request, allowed once
            await dave.wait_for(lambda t: t.item_of("tool_result") is not None)
            chosen = [i for i in dave.items if i["type"] == "permission_decision"][-1]
            assert (chosen["data"]["outcome"], chosen["created_by"]) == ("selected", "hannah")
    finally:
        assert await anyio.to_thread.run_sync(again.stop) == 0


async def test_a_host_killed_mid_stream_keeps_the_text_stored_so_far(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    db = tmp_path / "log.db"
    host = HostProcess(relay.url, tmp_path, agent=acp_spec(), workspace=workspace, log_db=db)
    await anyio.to_thread.run_sync(host.start)
    agents: list[psutil.Process] = []
    try:
        await wait_online(host.view_link)
        async with attached(host.drive_link, "dave") as dave:
            await dave.wait_for(lambda t: t.snapshot_done)
            await dave.send(Prompt(text="wait"))  # the fake agent streams "." until cancelled
            # A part is stored once the stream has gone on for STREAM_PART_SECONDS.
            await dave.wait_for(
                lambda t: t.item_of("message", role="agent", continued=True) is not None,
                within=40,
            )
            agents = psutil.Process(host.pid).children(recursive=True)
            host.kill()
    finally:
        host.kill()
        for agent in agents:  # orphaned by the kill: its own session, not the host's group
            with contextlib.suppress(psutil.Error):
                os.kill(agent.pid, signal.SIGKILL)

    again = HostProcess(relay.url, tmp_path, agent=acp_spec(), workspace=workspace, log_db=db)
    await anyio.to_thread.run_sync(again.start)
    try:
        await wait_online(again.drive_link)
        async with attached(again.drive_link, "dave") as dave:
            await dave.wait_for(lambda t: t.item_of("session_event", what=RESTART_EVENT))
            summary = dave.item_of("session_event", what=RESTART_EVENT)
            assert summary is not None
            (prompt,) = user_prompts(dave)
            assert summary["data"]["interrupted_turn"] == prompt["seq"]
            assert summary["data"]["partial_text"] is True
            parts = [
                i
                for i in dave.items
                if i["type"] == "message" and i["data"].get("turn") == prompt["seq"]
            ]
            assert parts
            assert set("".join(p["data"]["text"] for p in parts)) == {"."}
    finally:
        assert await anyio.to_thread.run_sync(again.stop) == 0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs of its own: a disk that really fills up (ENOSPC). Mounting needs root with
    CAP_SYS_ADMIN; without it this test skips, and the RLIMIT_FSIZE test above still covers the
    failing log on every machine."""
    mountpoint = tmp_path / "disk"
    mountpoint.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mountpoint)]
    result = subprocess.run(mount, capture_output=True, text=True, timeout=30, check=False)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {result.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], timeout=30, check=False)


def fill(disk: Path) -> Path:
    """Write a file until the disk is full; returns it (removing it gives the space back)."""
    filler = disk / "filler"
    chunk = b"\0" * 65536
    with filler.open("wb") as file:
        for _ in range(2 * 4 * 16):  # twice what a 4 MiB disk holds
            try:
                file.write(chunk)
                file.flush()
            except OSError:  # ENOSPC: full
                return filler
    raise AssertionError("the small disk never filled up")


async def test_a_full_disk_pauses_the_host_and_freeing_space_resumes_it(
    relay: RelayProcess, tmp_path: Path, workspace: Path, small_disk: Path
) -> None:
    db = small_disk / "log.db"
    host = HostProcess(relay.url, tmp_path, workspace=workspace, log_db=db)
    await anyio.to_thread.run_sync(host.start)
    try:
        await wait_online(host.view_link)
        async with attached(host.drive_link, "dave") as dave:
            await dave.wait_for(lambda t: t.snapshot_done)
            await dave.send(Prompt(text="one"))
            await dave.wait_for(lambda t: t.item_of("permission_request") is not None)
            request = dave.item_of("permission_request")
            assert request is not None

            filler = await anyio.to_thread.run_sync(fill, small_disk)
            await dave.send(
                PermissionAnswer(request_id=request["data"]["request_id"], option_id="allow_once")
            )
            await dave.wait_for(lambda t: bool(storage(t, "failing")))
            assert storage(dave, "failing")[0]["reason"] == "database or disk is full"
            assert host.alive
            assert dave.item_of("tool_result") is None

            filler.unlink()  # space is back
            await dave.wait_for(lambda t: bool(storage(t, "ok")) and t.item_of("tool_result"))
            assert storage(dave, "ok")[0]["dropped"] == 0
            assert dave.seqs() == list(range(len(dave.items)))
    finally:
        assert await anyio.to_thread.run_sync(host.stop) == 0
    items = await stored(db)
    assert [i.seq for i in items] == list(range(len(items)))
    outage = next(i for i in items if i.data.get("what") == OUTAGE_EVENT)
    assert outage.data["reason"] == "database or disk is full"
    assert any(i.type == "tool_result" for i in items)
