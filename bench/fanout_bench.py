"""Fan-out: the host appends items and every attached teammate gets each, ours against a bare
websockets broadcast, measured in the same run.

Run: .venv/bin/python bench/fanout_bench.py [--n 50 --n 100] [--items 200] [--pairs 5]
     (the full sizes: --n 50 --n 500)

For each N, two systems, each a relay process, a host process and N teammates in a swarm
process (bench/swarm.py, real WebSocket connections):
- ours: `tunnel relay` (per-IP, per-host and per-link limits off: harness.RELAY_LOAD_OPTIONS),
  our host serving sessions as `tunnel host` does (bench/peers.py `session-host`: a
  `SessionChannelHandler` per channel and the host's broadcast, the log in memory), N
  `connect_teammate` sessions that subscribe; the host appends ITEMS `message` items of about
  SIZE bytes of text to its log, seals and signs each once (several in one cast when they come
  together), and the relay copies each cast to every teammate;
- bare: a websockets relay; the bare host sends each SIZE-byte message once and the relay
  `websockets.broadcast`s it to the N bare clients.

Per run (pairs interleaved, order reversed every other pair): seconds from the first append
until the last teammate has every item; the host process's CPU seconds and TCP bytes sent to
the relay (from `ss`), per item; the CPU seconds of the relay and of the teammates' process,
and the latter per item and teammate (what one teammate on its own machine would spend).
Prints the median and [min-max] over the pairs, and the median of the per-pair ratios.
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
    compared,
    expect_items,
    files_for,
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
    async with setup as ready_setup, swarm(f"swarm-{ready_setup.kind}", wd) as crowd:
        await attach_swarm(crowd, ready_setup.kind, ready_setup.target, n, concurrency=concurrency)
        yield Side(ready_setup, crowd)


@dataclass
class Run:
    seconds: float
    cpu_per_item: float
    bytes_per_item: float | None
    relay_cpu: float
    teammates_cpu: float


async def fan_out(side: Side, items: int, size: int) -> Run:
    host = side.setup.host
    assert host is not None
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
    return Run(
        seconds=got["t_last"] - appended["t0"],
        cpu_per_item=cpu / items,
        bytes_per_item=None if sent is None else sent / items,
        relay_cpu=relay_cpu,
        teammates_cpu=teammates_cpu,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    ns: tuple[int, ...]
    items: int
    size: int
    pairs: int
    concurrency: int


async def bench_n(n: int, options: Options, wd: Path) -> list[list[str]]:
    seconds = {"ours": Samples(), "bare": Samples()}
    cpu = {"ours": Samples(), "bare": Samples()}
    wire = {"ours": Samples(), "bare": Samples()}
    relay_cpu = {"ours": Samples(), "bare": Samples()}
    teammates_cpu = {"ours": Samples(), "bare": Samples()}
    per_teammate = {"ours": Samples(), "bare": Samples()}
    async with (
        attached(our_session(wd), wd, n, options.concurrency) as ours,
        attached(bare_broadcast(wd), wd, n, options.concurrency) as bare,
    ):
        await fan_out(ours, options.items // 10 or 1, options.size)  # warm-up, not recorded
        await fan_out(bare, options.items // 10 or 1, options.size)
        for sides in in_pairs(options.pairs, (ours, bare), label=f"N={n}: "):
            for side in sides:
                run = await fan_out(side, options.items, options.size)
                kind = side.setup.kind
                seconds[kind].add(run.seconds)
                cpu[kind].add(run.cpu_per_item * 1e3)
                if run.bytes_per_item is not None:
                    wire[kind].add(run.bytes_per_item)
                relay_cpu[kind].add(run.relay_cpu)
                teammates_cpu[kind].add(run.teammates_cpu)
                per_teammate[kind].add(run.teammates_cpu / (n * options.items) * 1e6)

    def row(label: str, samples: dict[str, Samples], fmt: str, *more: str) -> list[str]:
        return [f"N={n}", *compared(label, samples["ours"], samples["bare"], fmt, *more)]

    speed = ratios(seconds["bare"], seconds["ours"]).spread(".2f")
    return [
        row("all delivered s", seconds, ".3f", speed, "speed >= 0.5"),
        row("host CPU ms/item", cpu, ".3f", "", "same for every N"),
        row("host uplink B/item", wire, ".0f", "", "same for every N"),
        row("relay CPU s", relay_cpu, ".2f", "", ""),
        row("teammates CPU s", teammates_cpu, ".2f", "", ""),
        row("teammate CPU us/item", per_teammate, ".1f", "", ""),
    ]


async def bench(options: Options) -> None:
    rows: list[list[str]] = []
    with workdir("fanout-bench-") as wd:
        for n in options.ns:
            rows.extend(await bench_n(n, options, wd))
    print_table(
        f"fan-out of {options.items} items of ~{options.size} B, {options.pairs} pairs: "
        "median [min-max]",
        ["N", "measure", "ours", "bare", "ours/bare", "speed bare/ours", "goal"],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--n", action="append", type=int, help="teammates; repeatable (default 50 and 100)"
    )
    parser.add_argument("--items", type=int, default=200, help="items per run (default 200)")
    parser.add_argument("--size", type=int, default=1024, help="bytes per item (default 1024)")
    parser.add_argument("--pairs", type=int, default=5, help="A/B pairs per N (default 5)")
    add_concurrency_option(parser)
    args = parser.parse_args()
    options = Options(
        ns=tuple(args.n or (50, 100)),
        items=args.items,
        size=args.size,
        pairs=args.pairs,
        concurrency=args.concurrency,
    )
    raise_fd_limit(files_for(max(options.ns)))
    run_bench(bench, options)


if __name__ == "__main__":
    main()
