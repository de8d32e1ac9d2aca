"""Attaching: N teammates join one host, ours against N bare websockets clients connecting to a
bare server, measured in the same run.

Run: .venv/bin/python bench/attach_bench.py [--n 200] [--pairs 5] [--concurrency 50]
     (the full size: --n 1000)

- ours: `tunnel relay` (per-IP, per-host and per-link limits off: harness.RELAY_LOAD_OPTIONS),
  our host serving sessions as `tunnel host` does (bench/peers.py `session-host`), and N
  `connect_teammate` sessions in a swarm process (bench/swarm.py); a teammate is attached once
  it has the `ready` message, sent `subscribe` and received the end of the (empty) snapshot.
  Each join makes the host send `presence` to every attached channel: the swarm counts those
  messages and their bytes until none arrived for half a second.
- bare: the bare websockets relay of bench/peers.py; a client is attached once the relay's
  greeting arrived.

At most --concurrency teammates connect at once, on both sides (the server's listen backlog is
100). Per run: seconds from the first connect until the last teammate is attached; CPU seconds
of the relay and the host, and of the teammates' process, meanwhile (settling included);
presence messages and bytes received in all and per join. Teammates detach between runs.
Prints the median and [min-max] over the pairs, and the median of the per-pair ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import dataclass

import anyio
from harness import (
    Child,
    Samples,
    Setup,
    bare_broadcast,
    our_session,
    print_table,
    raise_fd_limit,
    ratios,
    run_bench,
    swarm,
    workdir,
)

DETACH_LIMIT = 60.0
"""Seconds our host has to see every teammate of a run gone before the next run."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    n: int
    pairs: int
    concurrency: int


@dataclass
class Side:
    setup: Setup
    crowd: Child

    def processes(self) -> list[Child]:
        return [self.setup.relay, *([self.setup.host] if self.setup.host else [])]


@dataclass
class Run:
    seconds: float
    cpu: float
    teammates_cpu: float
    presence: int
    presence_bytes: int


async def attach(side: Side, options: Options) -> Run:
    cpu_before = sum(proc.cpu_seconds() for proc in side.processes())
    teammates_before = side.crowd.cpu_seconds()
    answer = await side.crowd.request(
        within=900,
        cmd="attach",
        kind=side.setup.kind,
        target=side.setup.target,
        n=options.n,
        concurrency=options.concurrency,
    )
    if answer["failed"]:
        raise RuntimeError(
            f"{side.setup.kind}: {answer['failed']} of {options.n} failed: "
            f"{answer['first_failure']}"
        )
    settled = await side.crowd.request(within=900, cmd="settle")
    cpu = sum(proc.cpu_seconds() for proc in side.processes()) - cpu_before
    teammates_cpu = side.crowd.cpu_seconds() - teammates_before
    await side.crowd.request(within=300, cmd="detach")
    if side.setup.kind == "ours":
        assert side.setup.host is not None
        with anyio.fail_after(DETACH_LIMIT):
            # The host has no event to wait for from another process: ask it, a bounded number
            # of times.
            while (await side.setup.host.request(cmd="members"))["members"]:  # noqa: ASYNC110
                await anyio.sleep(0.1)
    return Run(
        seconds=answer["t_done"] - answer["t0"],
        cpu=cpu,
        teammates_cpu=teammates_cpu,
        presence=settled["presence"],
        presence_bytes=settled["presence_bytes"],
    )


async def bench(options: Options) -> None:
    measures = ("seconds", "cpu", "teammates_cpu", "presence", "presence_bytes")
    samples = {kind: {m: Samples() for m in measures} for kind in ("ours", "bare")}
    with workdir("attach-bench-") as wd:
        async with contextlib.AsyncExitStack() as stack:
            ours = Side(
                await stack.enter_async_context(our_session(wd)),
                await stack.enter_async_context(swarm("swarm-ours", wd)),
            )
            bare = Side(
                await stack.enter_async_context(bare_broadcast(wd, with_host=False)),
                await stack.enter_async_context(swarm("swarm-bare", wd)),
            )
            for pair in range(options.pairs):
                for side in (ours, bare) if pair % 2 == 0 else (bare, ours):
                    run = await attach(side, options)
                    for measure in measures:
                        samples[side.setup.kind][measure].add(getattr(run, measure))
                print(f"pair {pair + 1}/{options.pairs} done", file=sys.stderr, flush=True)
    ours_s, bare_s = samples["ours"], samples["bare"]
    n = options.n
    per_join = {
        kind: Samples([v / n for v in samples[kind]["presence"].values]) for kind in samples
    }
    rows = [
        [
            "all attached s",
            ours_s["seconds"].spread(".3f"),
            bare_s["seconds"].spread(".3f"),
            ratios(ours_s["seconds"], bare_s["seconds"]).spread(".2f"),
            "< 2",
        ],
        [
            "relay+host CPU s",
            ours_s["cpu"].spread(".2f"),
            bare_s["cpu"].spread(".2f"),
            ratios(ours_s["cpu"], bare_s["cpu"]).spread(".2f"),
            "",
        ],
        [
            "teammates CPU s",
            ours_s["teammates_cpu"].spread(".2f"),
            bare_s["teammates_cpu"].spread(".2f"),
            ratios(ours_s["teammates_cpu"], bare_s["teammates_cpu"]).spread(".2f"),
            "",
        ],
        [
            "presence msgs, all",
            ours_s["presence"].spread(".0f"),
            bare_s["presence"].spread(".0f"),
            "",
            "",
        ],
        [
            "presence msgs per join",
            per_join["ours"].spread(".1f"),
            per_join["bare"].spread(".1f"),
            "",
            f"O(N): about {n / 2:.0f} at N={n}",
        ],
        [
            "presence MiB, all",
            Samples([v / 2**20 for v in ours_s["presence_bytes"].values]).spread(".2f"),
            Samples([v / 2**20 for v in bare_s["presence_bytes"].values]).spread(".2f"),
            "",
            "",
        ],
        [
            "presence KiB per join",
            Samples([v / 1024 / n for v in ours_s["presence_bytes"].values]).spread(".1f"),
            Samples([v / 1024 / n for v in bare_s["presence_bytes"].values]).spread(".1f"),
            "",
            "",
        ],
    ]
    print_table(
        f"{n} teammates attach to one host, {options.pairs} pairs, at most "
        f"{options.concurrency} connecting at once: median [min-max]",
        ["measure", "ours", "bare", "ours/bare", "goal"],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200, help="teammates (default 200)")
    parser.add_argument("--pairs", type=int, default=5, help="A/B pairs (default 5)")
    parser.add_argument(
        "--concurrency", type=int, default=50, help="teammates connecting at once (default 50)"
    )
    args = parser.parse_args()
    options = Options(n=args.n, pairs=args.pairs, concurrency=args.concurrency)
    raise_fd_limit(4 * options.n + 1000)
    run_bench(bench, options)


if __name__ == "__main__":
    main()
