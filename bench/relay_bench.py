"""Our relay path against bare baselines, one teammate and one host, measured in the same run.

Run: .venv/bin/python bench/relay_bench.py [--pairs 5] [--size 4K --size 64K] [--mib 64] [--ends]
[--quick]

Up to five systems, each a relay process, a host process and a teammate in this process:
- ours: `tunnel relay` (options: harness.RELAY_LOAD_OPTIONS; the limits do not bite with one
  teammate), a `tunnel.host.Host` (bench/peers.py `host`) and `connect_teammate`, end-to-end
  encrypted as in production;
- ours-picows: the same with `tunnel relay --framing picows` (needs picows: the `fast` extra);
- ours-ends, ours-picows-ends (--ends): ours and ours-picows with the host and the teammate
  dialing the relay with picows (`tunnel host --framing picows`), not websockets;
- ws: a bare websockets relay that pairs the host socket with the teammate socket and forwards
  messages both ways (no mux, no crypto), a bare websockets host and client;
- picows: the same bare relay on picows (bench/peers.py `picows-relay`), the same bare host and
  client on websockets;
- tcp: a plain asyncio TCP relay copying bytes between two sockets, length-prefixed messages.
With --loop uvloop every relay process but the TCP one (ours too) runs on uvloop's event loop,
the hosts and the teammate on asyncio's; --loop both runs each relay on both loops, interleaved
(a system on uvloop is named NAME@uvloop); --no-picows leaves out the picows systems.

Measures, each run once per system per pair, the systems in turn (order reversed every other
pair): bulk host->teammate ("down") and teammate->host ("up") for each message size (MiB/s, and
CPU seconds per MiB of relay + host + teammate processes; --split shows each; the kernel counts
CPU of other processes in clock ticks, 10 ms, hence the large default volume), and the round
trip of a 100-byte message (p50 and p99 over --roundtrips), then the round trip again with each
system's relay, host and teammate held to one CPU (the ", one CPU" rows; on Linux with more than
one CPU, unless --no-one-cpu): across CPUs each hop is a wake-up of a process on another CPU,
which on a virtual machine costs tens of microseconds and depends on where the scheduler put
each process, so those rows measure the path's own latency. Prints the median and [min-max]
over the pairs, and the median of the per-pair ratios ours/ws and ours/tcp.

The round trips come after the bulk runs of their pass, so every relay, ours and the bare ones,
has moved bulk first: a bare asyncio relay that has not (glibc's mmap threshold still at its
start, each 256 KiB read buffer a mapping of its own) spends about a third more CPU per round
trip (docs/performance.md, "Round trips on one CPU"). The table's title says so.

Our host sets the C allocator's thresholds as `tunnel host` does (tunnel/process/allocator.py);
the teammates, the bare hosts and every relay keep glibc's defaults.

With BENCH_PROFILE=DIR in the environment, every process runs under cProfile (the teammate only
during our runs) and writes DIR/NAME.prof: slower, for finding where the time goes.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from harness import (
    PROFILE_DIR,
    Samples,
    can_pin,
    cpu_seconds,
    human_size,
    in_pairs,
    on_one_cpu,
    parse_size,
    peer,
    percentile,
    print_table,
    ratios,
    ready,
    run_bench,
    tunnel_relay,
    workdir,
)
from peers import DONE, Framed, control
from websockets.asyncio.client import connect

from tunnel.teammate.client import connect_teammate

RTT_SIZE = 100
"""Bytes of the round-trip message."""


@dataclass
class System:
    """One relay path, ready to measure: the teammate's send and receive, the processes to
    charge CPU to (this one, the teammate, is added by the measure)."""

    name: str
    send: Callable[[bytes], Awaitable[None]]
    receive: Callable[[], Awaitable[bytes]]
    pids: list[int]


@contextlib.asynccontextmanager
async def ours(
    wd: Path,
    framing: str,
    uvloop: bool,
    ends: str = "websockets",
    *,
    name: str = "",
    host_options: Sequence[str] = (),
    relay_options: Sequence[str] = (),
) -> AsyncIterator[System]:
    """Ours with the relay serving on `framing` and the host and the teammate dialing on `ends`
    (the host and the relay given `host_options` and `relay_options` too; `name` replaces the
    one made of the others)."""
    if not name:
        name = "ours" if framing == "websockets" else f"ours-{framing}"
        name += ("-ends" if ends != "websockets" else "") + UVLOOP * uvloop
    async with (
        tunnel_relay(
            wd, "--framing", framing, *relay_options, name=f"{name}-relay", uvloop=uvloop
        ) as (relay, url),
        peer(
            f"{name}-host",
            "host",
            wd,
            "--relay",
            url,
            "--workdir",
            str(wd / name),
            "--framing",
            ends,
            *host_options,
        ) as host,
    ):
        link = (await ready(host))["link"]
        async with connect_teammate(link, name="bench", framing=ends) as session:
            yield System(name, session.send, session.receive_plaintext, [relay.pid, host.pid])


@contextlib.asynccontextmanager
async def bare_ws(wd: Path, library: str, uvloop: bool) -> AsyncIterator[System]:
    role = "bare-relay" if library == "ws" else "picows-relay"
    loop = ["--uvloop"] if uvloop else []
    name = library + UVLOOP * uvloop
    async with peer(f"{name}-relay", role, wd, *loop) as relay:
        url = (await ready(relay))["url"]
        async with peer(f"{name}-host", "bare-host", wd, "--url", url) as host:
            await ready(host)
            async with connect(f"{url}/attach", compression=None, max_size=None) as websocket:

                async def receive() -> bytes:
                    message = await websocket.recv()
                    assert isinstance(message, bytes)
                    return message

                yield System(name, websocket.send, receive, [relay.pid, host.pid])


@contextlib.asynccontextmanager
async def bare_tcp(wd: Path) -> AsyncIterator[System]:
    async with peer("tcp-relay", "tcp-relay", wd) as relay:
        port = (await ready(relay))["port"]
        async with peer("tcp-host", "tcp-host", wd, "--port", str(port)) as host:
            await ready(host)
            async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                await stream.send(b"T")
                framed = Framed(stream)
                yield System("tcp", framed.send, framed.receive, [relay.pid, host.pid])


# -- the workloads --------------------------------------------------------------------------------


PARTS = ("relay", "host", "teammate")
"""Whose CPU a run charges, in the order of `System.pids` plus this process."""


@dataclass
class Run:
    seconds: float
    cpu: list[float]
    """CPU seconds of each of PARTS."""
    latencies: list[float] = field(default_factory=list)


TEAMMATE_PROFILE = cProfile.Profile() if PROFILE_DIR else None
"""With BENCH_PROFILE set: our teammate's side of every run, written to teammate.prof."""


async def measured(system: System, work: Callable[[], Awaitable[list[float]]]) -> Run:
    pids = [*system.pids, os.getpid()]
    profile = TEAMMATE_PROFILE if system.name.startswith("ours") else None
    cpu_before = [cpu_seconds(pid) for pid in pids]
    start = time.perf_counter()
    if profile is not None:
        profile.enable()
    latencies = await work()
    if profile is not None:
        profile.disable()
    seconds = time.perf_counter() - start
    cpu = [cpu_seconds(pid) - before for pid, before in zip(pids, cpu_before, strict=True)]
    return Run(seconds, cpu, latencies)


async def down(system: System, size: int, count: int) -> Run:
    async def work() -> list[float]:
        await system.send(control("send", n=count, size=size))
        for _ in range(count):
            await system.receive()
        return []

    return await measured(system, work)


async def up(system: System, size: int, count: int) -> Run:
    payload = bytes(size)

    async def work() -> list[float]:
        await system.send(control("sink", n=count))
        for _ in range(count):
            await system.send(payload)
        if await system.receive() != DONE:
            raise RuntimeError(f"{system.name}: the host did not confirm")
        return []

    return await measured(system, work)


async def roundtrips(system: System, count: int) -> Run:
    payload = bytes(RTT_SIZE)

    async def work() -> list[float]:
        await system.send(control("echo", n=count))
        latencies = []
        for _ in range(count):
            start = time.perf_counter()
            await system.send(payload)
            await system.receive()
            latencies.append(time.perf_counter() - start)
        return latencies

    return await measured(system, work)


# -- the run --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    pairs: int
    sizes: tuple[int, ...]
    mib: float
    roundtrips: int
    tcp: bool
    split: bool
    picows: bool
    ends: bool
    """Also ours with the host and the teammate on picows."""
    loops: tuple[bool, ...]
    """For each loop the relays run on: whether it is uvloop."""
    window: int | None = None
    """Our relays' `--window`, or None for the default."""
    one_cpu: bool = False
    """Also the round trips with each system's processes on one CPU."""

    @property
    def relay_options(self) -> tuple[str, ...]:
        return ("--window", str(self.window)) if self.window else ()

    @property
    def names(self) -> list[str]:
        """The systems, in the order of the table's columns."""
        names = []
        for uvloop in self.loops:
            ours = ["ours", "ours-ends"] if self.ends else ["ours"]
            if self.picows:
                ours += ["ours-picows", "ours-picows-ends"] if self.ends else ["ours-picows"]
            for name in [*ours, "ws", *(["picows"] if self.picows else [])]:
                names.append(name + UVLOOP * uvloop)
        return names + (["tcp"] if self.tcp else [])


@dataclass
class Results:
    """Samples[measure][system]."""

    samples: dict[str, dict[str, Samples]] = field(default_factory=dict)

    def add(self, measure: str, system: str, value: float) -> None:
        self.samples.setdefault(measure, {}).setdefault(system, Samples()).add(value)


async def one_pass(
    systems: Sequence[System], options: Options, results: Results | None, scale: float = 1.0
) -> None:
    """Every measure once on every system, in the order of `systems`."""
    mib = 1024 * 1024
    for size in options.sizes:
        count = max(1, int(options.mib * scale * mib / size))
        megabytes = count * size / mib
        for direction, measure in (("down", down), ("up", up)):
            for system in systems:
                run = await measure(system, size, count)
                if results is not None:
                    label = f"{direction} {human_size(size)}"
                    results.add(f"{label} MiB/s", system.name, megabytes / run.seconds)
                    results.add(f"{label} CPU s/MiB", system.name, sum(run.cpu) / megabytes)
                    if not options.split:  # else its "CPU s/MiB relay" row says it
                        relay_ms = run.cpu[0] * 1e3 / megabytes
                        results.add(f"{label} relay CPU ms/MiB", system.name, relay_ms)
                    if options.split:
                        for part, cpu in zip(PARTS, run.cpu, strict=True):
                            results.add(f"{label} CPU s/MiB {part}", system.name, cpu / megabytes)
    count = max(10, int(options.roundtrips * scale))
    await roundtrip_pass(systems, count, results, split=options.split, one_cpu=options.one_cpu)


async def roundtrip_pass(
    systems: Sequence[System],
    count: int,
    results: Results | None,
    *,
    split: bool = False,
    one_cpu: bool = False,
) -> None:
    """`count` round trips on every system in turn; their p50 and p99 into `results`, and with
    `split` the CPU each process spent per round trip. With `one_cpu`, then as many again on
    every system with its processes held to one CPU (`on_one_cpu`), as the "one CPU" rows."""
    for system in systems:
        run = await roundtrips(system, count)
        if results is not None:
            add_roundtrips(results, system.name, run, count, split=split)
    if one_cpu:
        for system in systems:
            with on_one_cpu(system.pids):
                run = await roundtrips(system, count)
            if results is not None:
                add_roundtrips(results, system.name, run, count, split=split, suffix=ONE_CPU)


ONE_CPU = ", one CPU"
"""What the measures of round trips made with each system's processes on one CPU end with."""


def add_roundtrips(
    results: Results, name: str, run: Run, count: int, *, split: bool = False, suffix: str = ""
) -> None:
    results.add(f"round trip p50 ms{suffix}", name, percentile(run.latencies, 0.5) * 1e3)
    results.add(f"round trip p99 ms{suffix}", name, percentile(run.latencies, 0.99) * 1e3)
    if split:
        for part, cpu in zip(PARTS, run.cpu, strict=True):
            results.add(f"round trip CPU us {part}{suffix}", name, cpu * 1e6 / count)


GOALS = {
    "down 64 KiB MiB/s": ">= 1.0",
    "up 64 KiB MiB/s": ">= 1.0",
    "down 4 KiB MiB/s": ">= 0.8",
    "up 4 KiB MiB/s": ">= 0.8",
    "CPU s/MiB": "<= 2",
    "round trip p50 ms": "<= 1.2",
    "round trip p99 ms": "<= 1.5",
}


def goal(measure: str) -> str:
    measure = measure.removesuffix(ONE_CPU)
    for key, text in GOALS.items():
        if measure == key or (key.startswith("CPU") and key in measure):
            return text
    return ""


RATIOS = (
    ("ours", "ws"),
    ("ours-ends", "ws"),
    ("ours-ends", "ours"),
    ("ours-picows", "ws"),
    ("ours-picows-ends", "ws"),
    ("ours-picows-ends", "ours-picows"),
    ("ours-picows", "ours"),
    ("picows", "ws"),
    ("ours", "tcp"),
    ("ours@uvloop", "ws@uvloop"),
    ("ours-picows@uvloop", "ws@uvloop"),
    ("ours-picows@uvloop", "ours@uvloop"),
    ("picows@uvloop", "ws@uvloop"),
    ("ours@uvloop", "ours"),
    ("ours-picows@uvloop", "ours-picows"),
    ("ws@uvloop", "ws"),
)
"""The ratios the table shows, those of systems in the run."""

UVLOOP = "@uvloop"
"""What a system's name ends with when its relay runs on uvloop."""


def report(results: Results, options: Options) -> None:
    names = options.names
    shown = [(a, b) for a, b in RATIOS if a in names and b in names]
    header = ["measure", *names, *(f"{a}/{b}" for a, b in shown), "goal ours/ws"]
    rows = []
    for measure, by_system in results.samples.items():
        fmt = ".4f" if "CPU s" in measure else ".3f" if "ms" in measure else ".1f"
        fmt = ".2f" if "CPU ms" in measure else fmt
        row = [measure, *(by_system[name].spread(fmt) for name in names)]
        row += [ratios(by_system[a], by_system[b]).spread(".2f") for a, b in shown]
        row.append(goal(measure))
        rows.append(row)
    loop = " and ".join("uvloop" if uvloop else "asyncio" for uvloop in options.loops)
    if options.window:
        loop += f", our relays' window {human_size(options.window)}"
    print_table(
        f"relay path, relays on {loop}, {options.pairs} pairs, {options.mib:g} MiB per bulk run, "
        f"{options.roundtrips} round trips of {RTT_SIZE} B after the bulk runs: median [min-max]",
        header,
        rows,
    )


async def bench(options: Options) -> None:
    with workdir("relay-bench-") as wd:
        async with contextlib.AsyncExitStack() as stack:
            enter = stack.enter_async_context
            started = []
            our = functools.partial(ours, wd, relay_options=options.relay_options)
            for uvloop in options.loops:
                started.append(await enter(our("websockets", uvloop)))
                if options.ends:
                    started.append(await enter(our("websockets", uvloop, "picows")))
                if options.picows:
                    started.append(await enter(our("picows", uvloop)))
                    if options.ends:
                        started.append(await enter(our("picows", uvloop, "picows")))
                started.append(await enter(bare_ws(wd, "ws", uvloop)))
                if options.picows:
                    started.append(await enter(bare_ws(wd, "picows", uvloop)))
            if options.tcp:
                started.append(await enter(bare_tcp(wd)))
            systems = {system.name: system for system in started}
            ordered = [systems[name] for name in options.names]
            await one_pass(ordered, options, None, scale=0.1)  # warm-up, not recorded
            results = Results()
            for order in in_pairs(options.pairs, ordered, timed=True):
                await one_pass(order, options, results)
            report(results, options)
    if TEAMMATE_PROFILE is not None and PROFILE_DIR:
        TEAMMATE_PROFILE.dump_stats(Path(PROFILE_DIR) / "teammate.prof")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, help="A/B pairs measured (default 5; quick 3)")
    parser.add_argument(
        "--size",
        action="append",
        type=parse_size,
        help="bulk message size, e.g. 4K; repeatable (default 4K and 64K)",
    )
    parser.add_argument("--mib", type=float, help="MiB moved per bulk run (default 64; quick 16)")
    parser.add_argument(
        "--roundtrips", type=int, help="round trips per run (default 1000; quick 300)"
    )
    parser.add_argument("--no-tcp", action="store_true", help="skip the plain TCP floor")
    parser.add_argument(
        "--split", action="store_true", help="also show CPU per MiB of relay, host, teammate"
    )
    parser.add_argument(
        "--quick", action="store_true", help="smaller defaults, about 15 s (for iterating)"
    )
    parser.add_argument("--no-picows", action="store_true", help="skip the picows systems")
    parser.add_argument(
        "--ends",
        action="store_true",
        help="also ours with the host and the teammate dialing with picows (ours-ends,"
        " ours-picows-ends)",
    )
    parser.add_argument(
        "--window",
        type=parse_size,
        help="our relays' channel window (`tunnel relay --window`), e.g. 4M; default: theirs",
    )
    parser.add_argument(
        "--no-one-cpu",
        action="store_true",
        help="skip the round trips with each system's processes held to one CPU",
    )
    parser.add_argument(
        "--loop",
        choices=("asyncio", "uvloop", "both"),
        default="asyncio",
        help="the event loop of the relays (default asyncio; both: each relay on each)",
    )
    args = parser.parse_args()

    def given(value: float | None, default: float, quick: float) -> float:
        if value is not None:
            return value
        return quick if args.quick else default

    options = Options(
        pairs=int(given(args.pairs, 5, 3)),
        sizes=tuple(args.size or (4096, 65536)),
        mib=given(args.mib, 64, 16),
        roundtrips=int(given(args.roundtrips, 1000, 300)),
        tcp=not args.no_tcp,
        split=args.split,
        picows=not args.no_picows,
        ends=args.ends,
        window=args.window,
        one_cpu=can_pin() and not args.no_one_cpu,
        loops={"asyncio": (False,), "uvloop": (True,), "both": (False, True)}[args.loop],
    )
    if options.pairs < 1:
        parser.error("--pairs must be at least 1")
    run_bench(bench, options)


if __name__ == "__main__":
    main()
