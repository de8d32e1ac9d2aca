"""Conversation log benchmark: our SQLite store against plain `sqlite3` doing the same work.

    .venv/bin/python bench/log_bench.py [--items 100000] [--single 2000]

Every figure is measured twice in the same run, once through `tunnel.log` and once with the
standard library's `sqlite3` on the same schema and pragmas (WAL; FULL or NORMAL as labelled),
and printed as a ratio of times: ours / plain (1.0 = as fast, 2.0 = twice as long).

- single: one task appends one item at a time, each durable before the next.
- host's log: what `tunnel host` does with the agent's output: its store (`open_host_store`),
  one task records one item at a time through a session's writer (`LogWriter.enqueue`, its
  `run()` committing what queued up in one transaction), while a follower (as the broadcast)
  receives every item, which the log syncs to the disk before handing it out; timed until the
  follower has the last one. Against plain sqlite3 with one FULL commit per item, the
  durability each item had before it could leave.
- concurrent: 50 tasks append one item at a time; plain sqlite3 must commit them one by one,
  our store commits whatever is waiting in one transaction (group commit).
- batched: appends of 100 items; plain sqlite3 uses executemany + one commit per 100.
- catch-up: read 100,000 stored items in order, pages of 1000, data decoded from JSON (ours
  through a Subscription and through Store.query; plain with a SELECT per page + json.loads).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from tunnel.agents.writer import LogWriter
from tunnel.log import Log, NewItem, SQLiteStore
from tunnel.log.sqlite import open_host_store

# The items table and type index a minimal hand-written log needs (ours adds a head table).
SCHEMA = (
    """
    CREATE TABLE items (
        conversation_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL, status TEXT,
        response_id TEXT, created_at INTEGER NOT NULL, created_by TEXT NOT NULL,
        data TEXT NOT NULL, PRIMARY KEY (conversation_id, seq)
    )
    """,
    "CREATE INDEX items_by_type ON items (conversation_id, type, seq)",
)
INSERT = "INSERT INTO items VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
PAGE = 1000


def payload(n: int) -> dict[str, object]:
    return {"role": "agent", "text": f"item {n}: " + "lorem ipsum " * 8}


def new_items(count: int, start: int = 0) -> list[NewItem]:
    return [
        NewItem(type="message", data=payload(start + i), created_by="agent") for i in range(count)
    ]


def plain_connection(path: Path, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    for statement in SCHEMA:
        conn.execute(statement)
    return conn


def plain_row(seq: int) -> tuple[object, ...]:
    data = json.dumps(payload(seq), ensure_ascii=False, separators=(",", ":"))
    return ("c", seq, "message", None, None, time.time_ns() // 1000, "agent", data)


def plain_single(path: Path, count: int, synchronous: str) -> float:
    conn = plain_connection(path, synchronous)
    start = time.perf_counter()
    for seq in range(count):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(INSERT, plain_row(seq))
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed


def plain_batched(path: Path, count: int, batch: int) -> float:
    conn = plain_connection(path, "FULL")
    start = time.perf_counter()
    for first in range(0, count, batch):
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(INSERT, [plain_row(seq) for seq in range(first, first + batch)])
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed


def plain_catch_up(path: Path, count: int) -> float:
    conn = sqlite3.connect(path)
    start = time.perf_counter()
    after, seen = -1, 0
    while True:
        rows = conn.execute(
            "SELECT * FROM items WHERE conversation_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            ("c", after, PAGE),
        ).fetchall()
        if not rows:
            break
        decoded = [(*row[:7], json.loads(row[7])) for row in rows]
        seen += len(decoded)
        after = rows[-1][1]
    elapsed = time.perf_counter() - start
    conn.close()
    assert seen == count, seen
    return elapsed


async def timed(work: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await work()
    return time.perf_counter() - start


async def ours_single(path: Path, count: int, synchronous: str) -> float:
    async with Log(await SQLiteStore.open(path, synchronous=synchronous)) as log:

        async def run() -> None:
            for n in range(count):
                # Each as synced as the store's setting makes a commit, like plain sqlite3's.
                await log.append("c", new_items(1, n), durable=False)

        return await timed(run)


async def ours_host(path: Path, count: int) -> float:
    async with Log(await open_host_store(path)) as log:

        async def run() -> None:
            followed = anyio.Event()
            async with log.subscribe("c") as sub, anyio.create_task_group() as tg:

                async def follow() -> None:
                    seen = 0
                    while seen < count:
                        seen += len(await sub.receive_batch(200))
                    followed.set()

                tg.start_soon(follow)
                # As a session records its agent's output: queued, committed in groups.
                writer = LogWriter(log, "c")
                await tg.start(writer.run)
                for n in range(count):
                    (item,) = new_items(1, n)
                    await writer.enqueue(item)
                await followed.wait()
                tg.cancel_scope.cancel()

        elapsed = await timed(run)
        store = log.store
        assert isinstance(store, SQLiteStore)
        stats = store.statistics()
        print(
            f"  (host's log: {stats.transactions} commits, {stats.syncs} syncs for {count} items)",
            flush=True,
        )
        return elapsed


async def ours_concurrent(path: Path, tasks: int, each: int) -> float:
    async with Log(await SQLiteStore.open(path)) as log:

        async def writer(w: int) -> None:
            for n in range(each):
                await log.append("c", new_items(1, w * each + n))

        async def run() -> None:
            async with anyio.create_task_group() as tg:
                for w in range(tasks):
                    tg.start_soon(writer, w)

        return await timed(run)


async def ours_batched(path: Path, count: int, batch: int) -> float:
    async with Log(await SQLiteStore.open(path)) as log:

        async def run() -> None:
            for first in range(0, count, batch):
                await log.append("c", new_items(batch, first))

        return await timed(run)


async def ours_catch_up_subscription(path: Path, count: int) -> float:
    async with Log(await SQLiteStore.open(path), page_size=PAGE) as log:

        async def run() -> None:
            seen = 0
            async with log.subscribe("c", after=None) as sub:
                while seen < count:
                    seen += len(await sub.receive_batch(PAGE))

        return await timed(run)


async def ours_catch_up_query(path: Path, count: int) -> float:
    async with Log(await SQLiteStore.open(path)) as log:

        async def run() -> None:
            after, seen = -1, 0
            while page := await log.query("c", after=after, limit=PAGE):
                seen += len(page)
                after = page[-1].seq
            assert seen == count

        return await timed(run)


def report(name: str, ops: int, ours: float, plain: float) -> None:
    print(
        f"{name:<36} {ops / ours:>11,.0f}/s {ops / plain:>11,.0f}/s {ours / plain:>8.2f}",
        flush=True,
    )


def in_loop(work: Callable[..., Awaitable[float]], **kwargs: Any) -> Callable[[Path], float]:
    """`work(path, **kwargs)` run in a fresh event loop."""
    return lambda path: anyio.run(partial(work, path, **kwargs))


def best_of(
    repeat: int, ours: Callable[[Path], float], plain: Callable[[Path], float]
) -> tuple[float, float]:
    """Run ours and plain alternately `repeat` times on fresh files; the fastest of each.

    Alternating and keeping the best filters out the noise of a shared machine (other
    processes' disk and CPU load), which would otherwise land on one side only.
    """
    ours_times: list[float] = []
    plain_times: list[float] = []
    for _ in range(repeat):
        workdir = Path(tempfile.mkdtemp(prefix="log-bench-"))
        try:
            ours_times.append(ours(workdir / "ours.db"))
            plain_times.append(plain(workdir / "plain.db"))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    return min(ours_times), min(plain_times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=100_000, help="items for batched and catch-up")
    parser.add_argument("--single", type=int, default=1000, help="items for single appends")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the best counts")
    args = parser.parse_args()
    started = time.perf_counter()
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}")
    print(
        f"sqlite {sqlite3.sqlite_version}, python {sys.version.split()[0]}, best of {args.repeat}"
    )
    print(f"{'':<36} {'ours':>13} {'plain sqlite3':>13} {'ours/plain':>10}")
    n, repeat = args.single, args.repeat
    for sync in ("FULL", "NORMAL"):
        ours, plain = best_of(
            repeat,
            in_loop(ours_single, count=n, synchronous=sync),
            partial(plain_single, count=n, synchronous=sync),
        )
        report(f"single appends, synchronous={sync}", n, ours, plain)
    ours, plain = best_of(
        repeat,
        in_loop(ours_host, count=n),
        partial(plain_single, count=n, synchronous="FULL"),
    )
    report("host's log: agent output, synced", n, ours, plain)
    tasks, each = 50, max(1, n // 50)
    ours, plain = best_of(
        repeat,
        in_loop(ours_concurrent, tasks=tasks, each=each),
        partial(plain_single, count=tasks * each, synchronous="FULL"),
    )
    report(f"{tasks} concurrent appenders, FULL", tasks * each, ours, plain)

    count = args.items - args.items % 100
    timings: dict[str, list[float]] = {
        "append": [],
        "plain": [],
        "sub": [],
        "query": [],
        "read": [],
    }
    for _ in range(repeat):
        workdir = Path(tempfile.mkdtemp(prefix="log-bench-"))
        try:
            ours_db, plain_db = workdir / "ours.db", workdir / "plain.db"
            timings["append"].append(anyio.run(ours_batched, ours_db, count, 100))
            timings["plain"].append(plain_batched(plain_db, count, 100))
            timings["sub"].append(anyio.run(ours_catch_up_subscription, ours_db, count))
            timings["read"].append(plain_catch_up(plain_db, count))
            timings["query"].append(anyio.run(ours_catch_up_query, ours_db, count))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    best = {key: min(values) for key, values in timings.items()}
    report("batched appends (100/append), FULL", count, best["append"], best["plain"])
    report(f"catch-up {count:,} via Subscription", count, best["sub"], best["read"])
    report(f"catch-up {count:,} via query pages", count, best["query"], best["read"])
    print(f"total {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
