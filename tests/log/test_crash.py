"""kill -9 in the middle of appends: reopening shows every acknowledged item, no gap, no corrupt
row, and appending continues right after the last stored seq."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from tunnel.log import Item, NewItem, SQLiteStore

# Four tasks append batches of 1..3 items as fast as they can and print the last seq of each
# append once it has returned, i.e. once it is acknowledged.
CHILD = """
import sys
import anyio
from tunnel.log import Log, NewItem, SQLiteStore

async def main() -> None:
    log = Log(SQLiteStore(sys.argv[1]))

    async def writer(w: int) -> None:
        k = 0
        while True:
            batch = [
                NewItem(type="message", data={"w": w, "k": k, "pad": "x" * (k * 37 % 3000)},
                        created_by=f"writer{w}")
                for _ in range(1 + k % 3)
            ]
            stored = await log.append("c", batch)
            print(stored[-1].seq, flush=True)
            k += 1

    async with anyio.create_task_group() as tg:
        for w in range(4):
            tg.start_soon(writer, w)

anyio.run(main)
"""


def run_and_kill(path: Path, acks_wanted: int, rng: random.Random) -> int:
    """Start the appender, SIGKILL it at a random moment after `acks_wanted` acknowledged
    appends, and return the highest acknowledged seq."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    highest = -1
    try:
        assert child.stdout is not None
        for count, line in enumerate(child.stdout, start=1):
            highest = max(highest, int(line))
            if count >= acks_wanted:
                break
        time.sleep(rng.random() * 0.02)  # land somewhere inside a later transaction
    finally:
        os.kill(child.pid, signal.SIGKILL)
        _, stderr = child.communicate(timeout=30)
    assert highest >= 0, stderr
    assert child.returncode == -signal.SIGKILL
    return highest


async def check(path: Path, acknowledged: int) -> int:
    store = await SQLiteStore.open(path)
    try:
        items: list[Item] = []
        while page := await store.query("c", after=items[-1].seq if items else None, limit=500):
            items += page
        count = len(items)
        assert [i.seq for i in items] == list(range(count))  # no gap
        assert count - 1 >= acknowledged  # nothing acknowledged was lost
        for item in items:  # every row whole
            assert set(item.data) == {"w", "k", "pad"}
            assert item.created_by == f"writer{item.data['w']}"
            assert item.data["pad"] == "x" * (item.data["k"] * 37 % 3000)
        info = await store.get_conversation("c")
        assert info is not None
        assert (info.last_seq, info.item_count) == (count - 1, count)
        (next_item,) = await store.append(
            "c", [NewItem(type="message", data={"w": 0, "k": 0, "pad": ""}, created_by="writer0")]
        )
        assert next_item.seq == count
        return count + 1
    finally:
        await store.aclose()


@pytest.mark.timeout(120)
def test_kill_9_during_appends_loses_nothing_acknowledged(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    rng = random.Random(1234)
    total = 0
    for _ in range(3):
        acknowledged = run_and_kill(path, acks_wanted=rng.randint(50, 300), rng=rng)
        assert acknowledged >= total
        total = anyio.run(check, path, acknowledged)
        with sqlite3.connect(path) as raw:
            assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert total > 150
