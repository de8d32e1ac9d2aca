"""The C allocator's thresholds at a host streaming large messages: our host as `tunnel host`
runs it (glibc's trim and mmap thresholds set at its start, tunnel/process/allocator.py) against
the same host with glibc's defaults, each fresh, measured in the same run.

Run: .venv/bin/python bench/allocator_bench.py [--pairs 5] [--size 64K] [--mib 256]

Per run: a fresh `tunnel relay`, our host (bench/peers.py `host`, with `--glibc-defaults` for
"defaults") and a `connect_teammate` in this process (which keeps glibc's defaults in both, so
only the host differs); 16 messages to warm up, then --mib MiB of --size messages host ->
teammate ("down", as a snapshot or a busy terminal streams to a joiner). Measures MiB/s, the
host's CPU ms per MiB, its minor page faults per MiB (pages the kernel had to map in afresh) and
its RSS at the end (what keeping freed memory costs). The two sides alternate, order reversed
every other pair; prints the median and [min-max] over the pairs and the median of the per-pair
ratios tuned/defaults.

glibc's own thresholds slide up with the largest block the process has freed, so how much a host
on the defaults faults depends on what it did before: a fresh process is where it shows.
"""

from __future__ import annotations

import argparse
import os

from harness import (
    human_size,
    in_pairs,
    minor_faults,
    parse_size,
    print_table,
    ratios,
    rss_bytes,
    run_bench,
    workdir,
)
from relay_bench import Results, down, ours

SIDES = ("tuned", "defaults")
WARM_UP = 16
"""Messages sent before measuring: the channel's keys and the first window."""


async def one_run(side: str, size: int, mib: float, results: Results) -> None:
    options = ("--glibc-defaults",) if side == "defaults" else ()
    with workdir("allocator-bench-") as wd:
        async with ours(wd, "websockets", False, name=side, host_options=options) as system:
            await down(system, size, WARM_UP)
            host = system.pids[1]
            faults = minor_faults(host)
            count = max(1, int(mib * 1024 * 1024 / size))
            run = await down(system, size, count)
            moved = count * size / (1024 * 1024)
            results.add("MiB/s", side, moved / run.seconds)
            results.add("host CPU ms/MiB", side, run.cpu[1] * 1e3 / moved)
            results.add("host minor faults/MiB", side, (minor_faults(host) - faults) / moved)
            results.add("host RSS MiB at the end", side, rss_bytes(host) / (1024 * 1024))


async def bench(pairs: int, size: int, mib: float) -> None:
    results = Results()
    for order in in_pairs(pairs, SIDES, timed=True):
        for side in order:
            await one_run(side, size, mib, results)
    rows = []
    for measure, by_side in results.samples.items():
        fmt = ".0f" if "faults" in measure else ".2f" if "ms" in measure else ".1f"
        tuned, defaults = by_side["tuned"], by_side["defaults"]
        ratio = ratios(tuned, defaults).spread(".2f")
        rows.append([measure, tuned.spread(fmt), defaults.spread(fmt), ratio])
    print_table(
        f"a fresh host streaming {human_size(size)} messages, {mib:g} MiB a run, {pairs} pairs:"
        " median [min-max]",
        ["measure", "tuned", "defaults", "tuned/defaults"],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=5, help="A/B pairs (default 5)")
    parser.add_argument("--size", type=parse_size, default=64 * 1024, help="default 64K")
    parser.add_argument("--mib", type=float, default=256, help="MiB per run (default 256)")
    args = parser.parse_args()
    if args.pairs < 1 or args.mib <= 0:
        parser.error("--pairs must be at least 1 and --mib above 0")
    if not os.path.exists("/proc/self/stat"):
        parser.error("needs Linux's /proc")
    run_bench(bench, args.pairs, args.size, args.mib)


if __name__ == "__main__":
    main()
