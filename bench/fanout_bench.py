"""Fan-out: the host appends items and every attached teammate gets each, ours against a bare
websockets broadcast (on asyncio's event loop and, when uvloop is installed, on uvloop's),
measured in the same run.

Run: .venv/bin/python bench/fanout_bench.py [--n 50 --n 300] [--items 200] [--pairs 5]
     (uvloop comes with the bench extra: pip install -e '.[bench]')

For each N, two or three systems, each a relay process, a host process and N teammates in a
swarm process (bench/swarm.py, real WebSocket connections):
- ours: `tunnel relay` (per-IP, per-host and per-link limits off: harness.RELAY_LOAD_OPTIONS),
  our host serving sessions as `tunnel host` does (bench/peers.py `session-host`: a
  `SessionChannelHandler` per channel and the host's broadcast, the log in the SQLite file
  `tunnel host` writes, opened as it opens it), N `connect_teammate` sessions that subscribe;
  the host appends ITEMS `message` items of about SIZE bytes of text as the agent's output is
  recorded (a `Recorder`: queued and committed in groups, synced before it is cast),
  seals and signs each cast once (several items in one when they come together), and the relay
  copies each cast to every teammate;
- bare: a websockets relay; the bare host sends each SIZE-byte message once and the relay
  `websockets.broadcast`s it to the N bare clients; "bare-uvloop": the same three processes on
  uvloop's event loop.

Per run (the sides interleaved, their order reversed every other round): seconds from the first
append until the last teammate has every item; the casts the host sent for the burst (ours);
the host process's CPU seconds and TCP bytes sent to the relay (from `ss`), per item; the CPU
seconds of the relay and of the teammates' process, and the latter per item and teammate (what
one teammate on its own machine would spend). Prints the median and [min-max] over the rounds,
and the median [min-max] of the per-round ratios ours/bare.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from harness import (
    Child,
    Samples,
    Setup,
    add_concurrency_option,
    attach_swarm,
    bare_broadcast,
    expect_items,
    files_for,
    have_uvloop,
    in_pairs,
    our_session,
    print_table,
    raise_fd_limit,
    ratios,
    run_bench,
    swarm,
    uplink_bytes,
    workdir,
)


@dataclass
class Side:
    setup: Setup
    crowd: Child
    delivered: int = 0
    """Items each teammate should have received so far."""


@contextlib.asynccontextmanager
async def attached(
    setup: contextlib.AbstractAsyncContextManager[Setup], wd: Path, n: int, concurrency: int
) -> AsyncIterator[Side]:
    async with setup as ready_setup:
        kind = ready_setup.kind
        uvloop = kind == "bare-uvloop"
        async with swarm(f"swarm-{kind}", wd, uvloop=uvloop) as crowd:
            swarm_kind = "ours" if kind == "ours" else "bare"
            await attach_swarm(crowd, swarm_kind, ready_setup.target, n, concurrency=concurrency)
            yield Side(ready_setup, crowd)


@dataclass
class Run:
    seconds: float
    cpu_per_item: float
    bytes_per_item: float | None
    relay_cpu: float
    teammates_cpu: float
    casts: int | None
    """Casts the host sent for the burst (ours only)."""


async def fan_out(side: Side, items: int, size: int) -> Run:
    host = side.setup.host
    assert host is not None
    ours = side.setup.kind == "ours"
    casts_before = (await host.request(cmd="casts"))["casts"] if ours else 0
    cpu_before = host.cpu_seconds()
    others_before = side.setup.relay.cpu_seconds(), side.crowd.cpu_seconds()
    sent_before = uplink_bytes(host.pid, side.setup.relay_port)
    appended = await host.request(cmd="append", count=items, size=size)
    side.delivered += items
    got = await expect_items(side.crowd, side.delivered)
    cpu = host.cpu_seconds() - cpu_before
    relay_cpu = side.setup.relay.cpu_seconds() - others_before[0]
    teammates_cpu = side.crowd.cpu_seconds() - others_before[1]
    sent_after = uplink_bytes(host.pid, side.setup.relay_port)
    sent = None if sent_before is None or sent_after is None else sent_after - sent_before
    casts = (await host.request(cmd="casts"))["casts"] - casts_before if ours else None
    return Run(
        seconds=got["t_last"] - appended["t0"],
        cpu_per_item=cpu / items,
        bytes_per_item=None if sent is None else sent / items,
        relay_cpu=relay_cpu,
        teammates_cpu=teammates_cpu,
        casts=casts,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    ns: tuple[int, ...]
    items: int
    size: int
    pairs: int
    concurrency: int
    uvloop: bool


GOALS = {50: 1.5, 300: 1.3}
"""Time to deliver 200 items to N teammates, at most this many times a bare broadcast's."""


async def bench_n(n: int, options: Options, wd: Path) -> list[list[str]]:
    kinds = ["ours", "bare", *(["bare-uvloop"] if options.uvloop else [])]
    measures = ("seconds", "casts", "cpu", "wire", "relay_cpu", "teammates_cpu", "per_teammate")
    samples = {m: {kind: Samples() for kind in kinds} for m in measures}
    warm_up = options.items // 10 or 1
    async with contextlib.AsyncExitStack() as stack:
        sides = [
            await stack.enter_async_context(attached(our_session(wd), wd, n, options.concurrency)),
            await stack.enter_async_context(
                attached(bare_broadcast(wd), wd, n, options.concurrency)
            ),
        ]
        if options.uvloop:
            bare_uvloop = bare_broadcast(wd, uvloop=True)
            sides.append(
                await stack.enter_async_context(attached(bare_uvloop, wd, n, options.concurrency))
            )
        for side in sides:
            await fan_out(side, warm_up, options.size)  # not recorded
        for in_order in in_pairs(options.pairs, sides, label=f"N={n}: "):
            for side in in_order:
                run = await fan_out(side, options.items, options.size)
                kind = side.setup.kind
                samples["seconds"][kind].add(run.seconds)
                if run.casts is not None:
                    samples["casts"][kind].add(run.casts)
                samples["cpu"][kind].add(run.cpu_per_item * 1e3)
                if run.bytes_per_item is not None:
                    samples["wire"][kind].add(run.bytes_per_item)
                samples["relay_cpu"][kind].add(run.relay_cpu)
                samples["teammates_cpu"][kind].add(run.teammates_cpu)
                samples["per_teammate"][kind].add(run.teammates_cpu / (n * options.items) * 1e6)

    def row(label: str, measure: str, fmt: str, goal: str = "") -> list[str]:
        ours = samples[measure]["ours"]
        cells = [f"N={n}", label, ours.spread(fmt)]
        for base in kinds[1:]:
            cells.append(samples[measure][base].spread(fmt))
            cells.append(ratios(ours, samples[measure][base]).spread(".2f"))
        return [*cells, goal]

    goal = GOALS.get(n)
    return [
        row("all delivered s", "seconds", ".3f", f"ours/bare <= {goal}" if goal else ""),
        row("casts per burst", "casts", ".0f", "a few"),
        row("host CPU ms/item", "cpu", ".3f", "same for every N"),
        row("host uplink B/item", "wire", ".0f", "same for every N"),
        row("relay CPU s", "relay_cpu", ".2f"),
        row("teammates CPU s", "teammates_cpu", ".2f"),
        row("teammate CPU us/item", "per_teammate", ".1f"),
    ]


async def bench(options: Options) -> None:
    rows: list[list[str]] = []
    with workdir("fanout-bench-") as wd:
        for n in options.ns:
            rows.extend(await bench_n(n, options, wd))
    header = ["N", "measure", "ours", "bare", "ours/bare"]
    if options.uvloop:
        header += ["bare-uvloop", "ours/bare-uvloop"]
    print_table(
        f"fan-out of {options.items} items of ~{options.size} B, {options.pairs} rounds: "
        "median [min-max]",
        [*header, "goal"],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--n", action="append", type=int, help="teammates; repeatable (default 50 and 300)"
    )
    parser.add_argument("--items", type=int, default=200, help="items per run (default 200)")
    parser.add_argument("--size", type=int, default=1024, help="bytes per item (default 1024)")
    parser.add_argument("--pairs", type=int, default=5, help="rounds per N (default 5)")
    parser.add_argument(
        "--no-uvloop", action="store_true", help="leave out the bare baseline on uvloop"
    )
    add_concurrency_option(parser)
    args = parser.parse_args()
    options = Options(
        ns=tuple(args.n or (50, 300)),
        items=args.items,
        size=args.size,
        pairs=args.pairs,
        concurrency=args.concurrency,
        uvloop=have_uvloop() and not args.no_uvloop,
    )
    raise_fd_limit(files_for(max(options.ns)))
    run_bench(bench, options)


if __name__ == "__main__":
    main()
