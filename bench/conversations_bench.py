"""Ten conversations on one host: N teammates split across ten conversations of one host, against
the same N teammates on a host of one conversation, measured in the same run. The goal: ten
conversations cost each teammate what one does.

Run: .venv/bin/python bench/conversations_bench.py [--n 50 --n 300] [--conversations 10]
     [--items 200] [--rounds 5] [--concurrency 50] [--stagger]
     .venv/bin/python bench/conversations_bench.py --quick   (a smoke run: 20 teammates, 2 rounds)

Two systems, each its own `tunnel relay` (harness.RELAY_LOAD_OPTIONS) and its own host,
`tunnel host` itself (bench/peers.py `share-host`: `run_share`, the log in the SQLite file it
writes, one demo agent declared per conversation), and a swarm process of N teammates
(bench/swarm.py, each a `connect_teammate` session over its own WebSocket, its `open`
naming the conversation it follows):
- ten: a host running ten conversations (the first as the host starts, nine more as a driver's
  `new_conversation` starts them); teammate i follows conversation i mod 10;
- one: a host running one conversation; every teammate follows it.

Each round, on each side (the order reversed every other round; a first round unrecorded):
1. attach: the N teammates attach, at most --concurrency connecting at once, each to its
   conversation; seconds from the first connect until the last has its snapshot; then the
   presence settles (no presence message for 0.5 s);
2. fan-out: the host appends --items items of about --size bytes to every conversation at once
   (ten bursts at once on the ten side), as each one's agent output is; seconds from the first
   append until the last teammate (and the median one) has its --items items, and until the
   host has appended them all; the casts each conversation's broadcast sent for its burst.
   With --stagger the conversations burst one after the other instead, each once the last
   one's teammates have all its items: the times are then the median over the bursts, each to
   the teammates of one conversation; with --list-interval SECONDS (an experiment: `tunnel
   host` waits 0.25 s) each host sends a channel the `conversations` list at most that often;
3. the teammates detach, and the host sees every one gone.
For both steps: CPU seconds of the host, the relay and the teammates' process, and the bytes the
relay sent to the teammates (TCP bytes from `ss`, WebSocket framing included) per teammate; the
`conversations` messages each teammate got. A teammate counts every item whose text names
another conversation and every cast of another epoch (another conversation's broadcast): the
relay routes casts by broadcast group, so any is an error, and the bench exits 1.

Prints the median and [min-max] over the rounds of each side, and of the per-round ratios
ten/one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from harness import (
    Child,
    Samples,
    files_for,
    in_pairs,
    peer,
    print_table,
    raise_fd_limit,
    ratios,
    ready,
    run_bench,
    swarm,
    tunnel_relay,
    workdir,
)

try:
    import psutil
except ImportError:  # the bytes rows then say "-"
    psutil = None

DETACH_LIMIT = 60.0
"""Seconds a host has to see every teammate of a round gone before the next round."""

KINDS = ("ten", "one")

_SOCKET = re.compile(r"^\S+\s+\S+\s+\S+:(\d+)\s+\S+:(\d+)")
_BYTES_SENT = re.compile(r"\bbytes_sent:(\d+)")


@dataclass
class Side:
    """A relay, its host running `conversations`, and a swarm of teammates."""

    kind: str
    relay: Child
    relay_port: int
    host: Child
    crowd: Child
    link: str
    conversations: list[str]

    def host_port(self) -> int | None:
        """The host's local port on its connection to the relay (None if psutil cannot say)."""
        if psutil is None:
            return None
        for connection in psutil.Process(self.host.pid).net_connections(kind="tcp"):
            if connection.raddr and connection.raddr.port == self.relay_port:
                return int(connection.laddr.port)
        return None

    def cpu(self) -> tuple[float, float, float]:
        """CPU seconds so far of the host, the relay and the teammates."""
        return self.host.cpu_seconds(), self.relay.cpu_seconds(), self.crowd.cpu_seconds()

    def teammate_bytes(self) -> int | None:
        """Bytes the relay has sent on its connections other than the host's: to the teammates
        attached now (None if ss or psutil cannot say)."""
        host_port = self.host_port()
        if host_port is None or shutil.which("ss") is None:
            return None
        listing = subprocess.run(
            ["ss", "-tinH", "state", "established", "src", f"127.0.0.1:{self.relay_port}"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        total = 0
        peer_port: int | None = None
        for line in listing.splitlines():
            address = _SOCKET.match(line)
            if address is not None:
                peer_port = int(address.group(2))
                continue
            sent = _BYTES_SENT.search(line)
            if sent is not None and peer_port is not None and peer_port != host_port:
                total += int(sent.group(1))
            peer_port = None
        return total


@contextlib.asynccontextmanager
async def side(
    kind: str, conversations: int, wd: Path, list_interval: float | None
) -> AsyncIterator[Side]:
    host_dir = wd / f"host-{kind}"
    host_dir.mkdir()
    async with (
        tunnel_relay(wd, name=f"relay-{kind}") as (relay, url),
        peer(
            f"host-{kind}",
            "share-host",
            wd,
            "--relay",
            url,
            "--workdir",
            str(host_dir),
            "--conversations",
            str(conversations),
            *(["--list-interval", str(list_interval)] if list_interval is not None else []),
        ) as host,
        swarm(f"swarm-{kind}", wd) as crowd,
    ):
        hello = await ready(host, within=120)
        if len(hello["conversations"]) != conversations:
            raise RuntimeError(f"host-{kind}: {len(hello['conversations'])} conversations")
        port = int(url.rsplit(":", 1)[1])
        yield Side(kind, relay, port, host, crowd, hello["link"], hello["conversations"])


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    ns: tuple[int, ...]
    conversations: int
    items: int
    size: int
    rounds: int
    concurrency: int
    stagger: bool
    list_interval: float | None


@dataclass
class Round:
    """What one round measured on one side."""

    values: dict[str, float] = field(default_factory=dict)
    foreign: int = 0
    breaks: int = 0
    cuts: int = 0

    def count(self, errors: dict[str, int]) -> None:
        """Add this round's foreign items and casts, breaks and cuts to `errors`."""
        errors["foreign"] += self.foreign
        errors["breaks"] += self.breaks
        errors["cuts"] += self.cuts


def _delta(after: int | None, before: int | None) -> float | None:
    return None if after is None or before is None else float(after - before)


async def burst(
    side: Side, items: int, size: int, conversations: list[str] | None = None
) -> tuple[float, float, float]:
    """Append `items` items to each of `conversations` (None: all) at once; seconds until its
    last and its median teammate has them all, and until the host appended them."""
    appended = await side.host.request(
        within=900, cmd="append", count=items, size=size, conversations=conversations
    )
    got = await side.crowd.request(
        within=900, cmd="expect", items=items, conversations=conversations
    )
    if got["complete"] != got["of"]:
        raise RuntimeError(f"{side.crowd.name}: {got['of'] - got['complete']} teammates short")
    t0 = appended["t0"]
    return got["t_last"] - t0, got["t_median"] - t0, appended["t1"] - t0


async def one_round(side: Side, n: int, options: Options) -> Round:
    items, size, concurrency = options.items, options.size, options.concurrency
    result = Round()
    values = result.values
    # Attach.
    cpu_before = side.cpu()
    answer = await side.crowd.request(
        within=900,
        cmd="attach",
        kind="ours",
        target=side.link,
        n=n,
        concurrency=concurrency,
        mode="session",
        conversations=side.conversations,
    )
    if answer["failed"]:
        raise RuntimeError(
            f"{side.crowd.name}: {answer['failed']} of {n} teammates failed: "
            f"{answer['first_failure']}"
        )
    await side.crowd.request(within=900, cmd="settle")
    cpu_attached = side.cpu()
    bytes_attached = side.teammate_bytes()
    values["attach_s"] = answer["t_done"] - answer["t0"]
    values["attach_host"] = cpu_attached[0] - cpu_before[0]
    values["attach_relay"] = cpu_attached[1] - cpu_before[1]
    values["attach_teammate_ms"] = (cpu_attached[2] - cpu_before[2]) / n * 1e3
    if bytes_attached is not None:
        values["attach_kib"] = bytes_attached / n / 1024
    lists_attached = (await side.crowd.request(cmd="tally"))["lists"]

    # Fan-out.
    await side.crowd.request(cmd="mark")
    casts_before = (await side.host.request(cmd="casts"))["casts"]
    cpu_before = side.cpu()
    if options.stagger:
        # One conversation after the other, each once the last one's teammates have it all.
        times = [await burst(side, items, size, [c]) for c in side.conversations]
    else:
        times = [await burst(side, items, size)]
    cpu_after = side.cpu()
    bytes_after = side.teammate_bytes()
    casts_after = (await side.host.request(cmd="casts"))["casts"]
    host_items = items * len(side.conversations)
    delivered = items * n
    values["fan_s"] = statistics.median(t[0] for t in times)
    values["fan_median_s"] = statistics.median(t[1] for t in times)
    values["fan_appended_s"] = statistics.median(t[2] for t in times)
    values["casts"] = sum(casts_after[c] - casts_before[c] for c in casts_after) / len(casts_after)
    values["fan_host_ms_item"] = (cpu_after[0] - cpu_before[0]) / host_items * 1e3
    values["fan_relay_us_delivered"] = (cpu_after[1] - cpu_before[1]) / delivered * 1e6
    values["fan_teammate_us_item"] = (cpu_after[2] - cpu_before[2]) / delivered * 1e6
    fan_bytes = _delta(bytes_after, bytes_attached)
    if fan_bytes is not None:
        values["fan_kib"] = fan_bytes / n / 1024
    tally = await side.crowd.request(cmd="tally")
    values["lists"] = (tally["lists"] - lists_attached) / n
    result.foreign, result.breaks, result.cuts = tally["foreign"], tally["breaks"], tally["cuts"]

    # Detach, and wait until the host has seen every teammate go.
    await side.crowd.request(within=300, cmd="detach")
    with anyio.fail_after(DETACH_LIMIT):
        # The host has no event to wait for from another process: ask it, a bounded number
        # of times.
        while (await side.host.request(cmd="members"))["members"]:  # noqa: ASYNC110
            await anyio.sleep(0.1)
    return result


ROWS: tuple[tuple[str, str, str], ...] = (
    ("attach: all attached, s", "attach_s", ".3f"),
    ("attach: teammate CPU, ms each", "attach_teammate_ms", ".2f"),
    ("attach: KiB to each teammate", "attach_kib", ".1f"),
    ("attach: host CPU, s", "attach_host", ".2f"),
    ("attach: relay CPU, s", "attach_relay", ".2f"),
    ("fan-out: all delivered, s", "fan_s", ".3f"),
    ("fan-out: median teammate done, s", "fan_median_s", ".3f"),
    ("fan-out: host appended all, s", "fan_appended_s", ".3f"),
    ("fan-out: teammate CPU, us per item", "fan_teammate_us_item", ".1f"),
    ("fan-out: KiB to each teammate", "fan_kib", ".1f"),
    ("fan-out: conversations msgs each", "lists", ".1f"),
    ("fan-out: casts per conversation", "casts", ".1f"),
    ("fan-out: host CPU, ms per item appended", "fan_host_ms_item", ".3f"),
    ("fan-out: relay CPU, us per item delivered", "fan_relay_us_delivered", ".2f"),
)

ERROR_ROWS = (
    ("items or casts of another conversation (error)", "foreign"),
    ("other broadcast breaks", "breaks"),
    ("relay cuts", "cuts"),
)
"""Counted in all rounds of a side, the unrecorded first one too."""


async def bench_n(n: int, options: Options, wd: Path) -> tuple[list[list[str]], int]:
    samples = {kind: {key: Samples() for _, key, _ in ROWS} for kind in KINDS}
    # Counted in every round, the unrecorded one too: any foreign one is an error.
    errors = {kind: {"foreign": 0, "breaks": 0, "cuts": 0} for kind in KINDS}
    counts = {"ten": options.conversations, "one": 1}
    async with contextlib.AsyncExitStack() as stack:
        sides = [
            await stack.enter_async_context(side(k, counts[k], wd / f"n{n}", options.list_interval))
            for k in KINDS
        ]
        for each in sides:
            # Not recorded: the first connections, and a log whose tail the next joiners'
            # snapshots hold in full, as in every round after.
            result = await one_round(each, n, options)
            result.count(errors[each.kind])
        for in_order in in_pairs(options.rounds, sides, label=f"N={n}: ", timed=True):
            for each in in_order:
                result = await one_round(each, n, options)
                for key, value in result.values.items():
                    samples[each.kind][key].add(value)
                result.count(errors[each.kind])
    rows = []
    for label, key, fmt in ROWS:
        ten, one = samples["ten"][key], samples["one"][key]
        rows.append(
            [f"N={n}", label, ten.spread(fmt), one.spread(fmt), ratios(ten, one).spread(".2f")]
        )
    for label, key in ERROR_ROWS:
        counted = [str(errors[kind][key]) for kind in KINDS]
        rows.append([f"N={n}", label, *counted, ""])
    return rows, sum(errors[kind]["foreign"] for kind in KINDS)


def load() -> str:
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


async def bench(options: Options) -> int:
    rows: list[list[str]] = []
    foreign = 0
    before = load()
    with workdir("conversations-bench-") as wd:
        for n in options.ns:
            (wd / f"n{n}").mkdir()
            n_rows, n_foreign = await bench_n(n, options, wd)
            rows.extend(n_rows)
            foreign += n_foreign
    print_table(
        f"{options.conversations} conversations against 1 on one host, {options.items} items of "
        f"~{options.size} B per conversation"
        f"{', one conversation after the other' if options.stagger else ''}"
        f"{f', lists every {options.list_interval} s' if options.list_interval else ''}, "
        f"{options.rounds} rounds: median [min-max] "
        f"(load average {before} at the start)",
        ["N", "measure", f"{options.conversations} conversations", "1 conversation", "ratio"],
        rows,
    )
    if foreign:
        print(
            f"error: {foreign} items or casts of one conversation reached another's teammates",
            file=sys.stderr,
        )
        return 1
    return 0


def parse_options(argv: Sequence[str] | None = None) -> Options:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--n", action="append", type=int, help="teammates in all; repeatable (default 50 and 300)"
    )
    parser.add_argument(
        "--conversations", type=int, default=10, help="conversations of the host (default 10)"
    )
    parser.add_argument("--items", type=int, help="items per conversation (default 200)")
    parser.add_argument("--size", type=int, default=1024, help="bytes per item (default 1024)")
    parser.add_argument("--rounds", type=int, help="rounds per N (default 5)")
    parser.add_argument("--concurrency", type=int, help="teammates connecting at once (default 50)")
    parser.add_argument(
        "--stagger",
        action="store_true",
        help="the conversations burst one after the other, not at once",
    )
    parser.add_argument(
        "--list-interval",
        type=float,
        help="an experiment: seconds between two `conversations` lists to a channel, at least, "
        "on both sides (tunnel host: 0.25)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 20 teammates, 20 items, 2 rounds"
    )
    args = parser.parse_args(argv)
    quick = args.quick
    options = Options(
        ns=tuple(args.n or ((20,) if quick else (50, 300))),
        conversations=args.conversations,
        items=args.items or (20 if quick else 200),
        size=args.size,
        rounds=args.rounds or (2 if quick else 5),
        concurrency=args.concurrency or (20 if quick else 50),
        stagger=args.stagger,
        list_interval=args.list_interval,
    )
    if not 1 <= options.conversations <= 64:
        parser.error("--conversations is 1 to 64")
    if min(options.ns) < options.conversations:
        parser.error("--n must be at least --conversations: a teammate or more on each")
    return options


def main() -> None:
    options = parse_options()
    raise_fd_limit(files_for(max(options.ns)))
    codes: list[int] = []

    async def run() -> None:
        codes.append(await bench(options))

    run_bench(run)
    raise SystemExit(codes[0] if codes else 1)


if __name__ == "__main__":
    main()
