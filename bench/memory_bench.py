"""Relay memory per idle attached teammate, ours against a bare websockets server holding the same
number of idle clients, measured in the same run.

Run: .venv/bin/python bench/memory_bench.py [--n 500] [--pairs 5]

Each run starts fresh processes (RSS only grows, so a relay is measured once):
- ours: `tunnel relay` (per-IP, per-host and per-link limits off: harness.RELAY_LOAD_OPTIONS)
  and our host (bench/peers.py `host`); N `connect_teammate` sessions (bench/swarm.py), each
  attached with its channel open and one message echoed end to end, then idle;
- ours-picows: the same with `tunnel relay --framing picows`, when picows is installed;
- bare: the bare websockets relay of bench/peers.py; N bare clients, each greeted, then idle.

Per run: the relay's RSS once its host is registered (ours) or once it listens (bare), and again
SETTLE seconds after the last teammate attached; (after - before) / N. Our host's RSS per
teammate is shown too. Prints the median and [min-max] over the pairs (ours and bare alternate,
order reversed every other pair), and the median of the per-pair ratios.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import anyio
from harness import (
    CrowdOptions,
    Samples,
    Setup,
    attach_swarm,
    bare_broadcast,
    compared,
    crowd_options,
    in_pairs,
    our_session,
    print_table,
    run_bench,
    swarm,
    workdir,
)

SETTLE = 1.0
"""Seconds between the last attach and the second RSS reading (and before the first one)."""


@dataclass
class Run:
    relay_per_teammate: float
    host_per_teammate: float | None


async def measure(
    setup_cm: contextlib.AbstractAsyncContextManager[Setup], options: CrowdOptions, wd: Path
) -> Run:
    async with setup_cm as setup, swarm(f"swarm-{setup.kind}", wd) as crowd:
        await anyio.sleep(SETTLE)
        relay_before = setup.relay.rss()
        host_before = setup.host.rss() if setup.kind == "ours" and setup.host else None
        await attach_swarm(
            crowd,
            setup.kind,
            setup.target,
            options.n,
            concurrency=options.concurrency,
            mode="echo",
            within=900,
        )
        await anyio.sleep(SETTLE)
        relay_per = (setup.relay.rss() - relay_before) / options.n
        host_per = None
        if host_before is not None and setup.host is not None:
            host_per = (setup.host.rss() - host_before) / options.n
        return Run(relay_per, host_per)


async def bench(options: CrowdOptions) -> None:
    sides = ("ours", "ours-picows", "bare") if have_picows() else ("ours", "bare")
    relay = {side: Samples() for side in sides}
    host = Samples()
    with workdir("memory-bench-") as wd:
        for order in in_pairs(options.pairs, sides):
            for side in order:
                if side == "bare":
                    setup = bare_broadcast(wd)
                else:
                    framing = "picows" if side == "ours-picows" else "websockets"
                    setup = our_session(wd, "host", framing)
                run = await measure(setup, options, wd)
                relay[side].add(run.relay_per_teammate / 1024)
                if run.host_per_teammate is not None and side == "ours":
                    host.add(run.host_per_teammate / 1024)
    rows = [compared("relay KiB per teammate", relay["ours"], relay["bare"], ".1f", "<= 1.3")]
    if "ours-picows" in relay:
        row = compared("relay KiB per teammate", relay["ours-picows"], relay["bare"], ".1f", "")
        rows.append(["(ours-picows)", *row[1:]])
    rows.append(["host KiB per teammate", host.spread(".1f"), "-", "", ""])
    print_table(
        f"RSS per idle attached teammate, {options.n} teammates, {options.pairs} pairs: "
        "median [min-max]",
        ["measure", "ours", "bare", "ours/bare", "goal"],
        rows,
    )


def have_picows() -> bool:
    """Whether picows is installed (the `fast` extra): our relay is then measured on it too."""
    try:
        import picows  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> None:
    run_bench(bench, crowd_options(__doc__, n=500))


if __name__ == "__main__":
    main()
