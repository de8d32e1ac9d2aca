"""Attaching: N teammates join one host, ours against N bare websockets clients connecting to a
bare server, measured in the same run.

Run: .venv/bin/python bench/attach_bench.py [--n 200] [--pairs 5] [--concurrency 50]
     (the full size: --n 1000)

- ours: `tunnel relay` (per-IP, per-host and per-link limits off: harness.RELAY_LOAD_OPTIONS),
  our host serving sessions as `tunnel host` does (bench/peers.py `session-host`), and N
  `connect_teammate` sessions in a swarm process (bench/swarm.py); a teammate is attached once
  it has the `ready` message and the end of the (empty) snapshot its `open` asked for (the open
  carries the `subscribe`: docs/protocol.md, "Application messages").
  Each join makes the host cast a presence delta once, which the relay copies to every joined
  channel (the joiner's own first list comes in its `broadcast` message, which the client hands
  on as a `presence` message): the swarm counts those messages and their bytes until none
  arrived for half a second.
- bare: the bare websockets relay of bench/peers.py; a client is attached once the relay's
  greeting arrived. "bare-uvloop": the same relay and swarm on uvloop's event loop (when uvloop
  is installed: the `bench` extra).

At most --concurrency teammates connect at once, on both sides (the server's listen backlog is
100). Per run: seconds from the first connect until the last teammate is attached; CPU seconds
of the relay and the host, and of the teammates' process, meanwhile (settling included);
presence messages and bytes received in all and per join. Teammates detach between runs.
Prints the median and [min-max] over the pairs, and the median of the per-pair ratios.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import anyio
from harness import (
    Child,
    CrowdOptions,
    Samples,
    Setup,
    attach_swarm,
    bare_broadcast,
    crowd_options,
    have_uvloop,
    in_pairs,
    our_session,
    print_table,
    ratios,
    run_bench,
    swarm,
    workdir,
)

from tunnel.host.broadcast import PRESENCE_QUIET

SETTLE_QUIET = 2 * PRESENCE_QUIET
"""Seconds without a presence message after which the attach's presence is taken as told: the
host casts the last changes of a burst PRESENCE_QUIET after them, so waiting only that long could
end before that cast arrives and leave its messages and CPU out."""

DETACH_LIMIT = 60.0
"""Seconds our host has to see every teammate of a run gone before the next run."""


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


async def attach(side: Side, options: CrowdOptions) -> Run:
    cpu_before = sum(proc.cpu_seconds() for proc in side.processes())
    teammates_before = side.crowd.cpu_seconds()
    answer = await attach_swarm(
        side.crowd,
        side.setup.kind,
        side.setup.target,
        options.n,
        concurrency=options.concurrency,
        within=900,
    )
    settled = await side.crowd.request(within=900, cmd="settle", quiet=SETTLE_QUIET)
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


async def bench(options: CrowdOptions) -> None:
    measures = ("seconds", "cpu", "teammates_cpu", "presence", "presence_bytes")
    kinds = ["ours", "bare", *(["bare-uvloop"] if have_uvloop() else [])]
    samples = {kind: {m: Samples() for m in measures} for kind in kinds}
    with workdir("attach-bench-") as wd:
        async with contextlib.AsyncExitStack() as stack:
            sides = [
                Side(
                    await stack.enter_async_context(our_session(wd)),
                    await stack.enter_async_context(swarm("swarm-ours", wd)),
                ),
                Side(
                    await stack.enter_async_context(bare_broadcast(wd, with_host=False)),
                    await stack.enter_async_context(swarm("swarm-bare", wd)),
                ),
            ]
            if "bare-uvloop" in kinds:
                relay = bare_broadcast(wd, with_host=False, uvloop=True)
                sides.append(
                    Side(
                        await stack.enter_async_context(relay),
                        await stack.enter_async_context(
                            swarm("swarm-bare-uvloop", wd, uvloop=True)
                        ),
                    )
                )
            for in_order in in_pairs(options.pairs, sides):
                for side in in_order:
                    run = await attach(side, options)
                    for measure in measures:
                        samples[side.setup.kind][measure].add(getattr(run, measure))
    ours_s = samples["ours"]
    n = options.n

    def against(label: str, measure: str, fmt: str, goal: str = "") -> list[str]:
        cells = [label, ours_s[measure].spread(fmt)]
        for base in kinds[1:]:
            base_s = samples[base][measure]
            cells += [base_s.spread(fmt), ratios(ours_s[measure], base_s).spread(".2f")]
        return [*cells, goal]

    def presence(label: str, measure: str, per: float, fmt: str, goal: str = "") -> list[str]:
        """A row of `measure` divided by `per`, ours only: bare sends no presence."""
        ours = Samples([v / per for v in ours_s[measure].values])
        return [label, ours.spread(fmt), *([""] * (2 * len(kinds) - 2)), goal]

    # Each cast waits for joins numbering half the room (PRESENCE_SHARE), and names at most
    # LISTED_MEMBERS: a join costs O(1) presence messages and bytes, whatever N.
    about = "O(1): about 3"
    rows = [
        against("all attached s", "seconds", ".3f", "ours/bare < 2"),
        against("relay+host CPU s", "cpu", ".2f"),
        against("teammates CPU s", "teammates_cpu", ".2f"),
        presence("presence msgs, all", "presence", 1, ".0f"),
        presence("presence msgs per join", "presence", n, ".1f", about),
        presence("presence MiB, all", "presence_bytes", 2**20, ".2f"),
        presence("presence KiB per join", "presence_bytes", 1024 * n, ".1f"),
    ]
    header = ["measure", "ours"]
    for base in kinds[1:]:
        header += [base, f"ours/{base}"]
    print_table(
        f"{n} teammates attach to one host, {options.pairs} pairs, at most "
        f"{options.concurrency} connecting at once: median [min-max]",
        [*header, "goal"],
        rows,
    )


def main() -> None:
    run_bench(bench, crowd_options(__doc__, n=200))


if __name__ == "__main__":
    main()
