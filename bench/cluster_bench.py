"""A teammate attached across two relay nodes against one attached on the host's own node,
measured in the same run.

Run: .venv/bin/python bench/cluster_bench.py [--pairs 5] [--size 4K --size 64K] [--mib 32]
     [--roundtrips 1000] [--fanout 300] [--items 100] [--fanout-only] [--quick]

One Redis (Debian's `redis-server`, in memory, on a free loopback port), two `tunnel relay
--cluster` nodes A and B (harness.RELAY_LOAD_OPTIONS), one host process on node A (bench/peers.py
`host`, end-to-end encrypted as in production) and two teammates in this process:
- same: attached at node A, the host's node: what a single relay does;
- cross: attached at node B, which carries its WebSocket to node A (docs/cluster.md).

Measures, each run once per teammate per pair (order reversed every other pair): bulk
host->teammate ("down") and teammate->host ("up") per message size (MiB/s), and the round trip
of a 100-byte message (p50 and p99). Prints the median and [min-max] over the pairs, and the
median of the per-pair ratios cross/same against the goals.

With --fanout N (default 300, 0 skips it), a third node C and two session hosts on node A
(bench/peers.py `session-host`, as `tunnel host` serves sessions): N teammates of one host all
attached at node A ("one node"), N teammates of the other spread over nodes A, B and C ("three
nodes"; two thirds forwarded), in bench/swarm.py processes. The hosts append --items items in
turn; measured: seconds from the first append until the last teammate has every item, and the
messages nodes B and C received over their node links from node A per cast of the host (their
`relay_cluster_hop_messages_total{direction="down"}`, against node A's `relay_casts_total`): a
cast crosses each node link once, for every teammate there that takes it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import anyio
from harness import (
    Child,
    Samples,
    attach_swarm,
    expect_items,
    human_size,
    in_pairs,
    parse_size,
    peer,
    print_table,
    raise_fd_limit,
    ratios,
    ready,
    swarm,
    tunnel_relay,
    workdir,
)
from relay_bench import Results, System, down, roundtrip_pass, up

from tunnel.teammate.client import connect_teammate

GOALS = {"MiB/s": ">= 0.7", "round trip p50 ms": "<= 1.5", "fan-out": "<= 1.2"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def redis_server(wd: Path) -> Iterator[str]:
    """`redis-server` in memory on a free loopback port; yields its URL."""
    port = _free_port()
    args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    args += ["--appendonly", "no", "--dir", tempfile.mkdtemp(dir=wd)]
    with (wd / "redis.log").open("wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)


@contextlib.asynccontextmanager
async def node(
    wd: Path, name: str, redis_url: str, port: int, public_url: str
) -> AsyncIterator[Child]:
    """One cluster node; the secret comes from TUNNEL_RELAY_CLUSTER_SECRET (set in `bench`)."""
    cluster = ["--cluster", redis_url, "--node-url", f"ws://127.0.0.1:{port}"]
    cluster += ["--public-url", public_url]
    async with tunnel_relay(wd, *cluster, name=name, port=port) as (relay, _):
        yield relay


async def one_pass(
    systems: Sequence[System],
    args: argparse.Namespace,
    results: Results | None,
    scale: float = 1.0,
) -> None:
    mib = 1024 * 1024
    for size in args.size:
        count = max(1, int(args.mib * scale * mib / size))
        for direction, measure in (("down", down), ("up", up)):
            for system in systems:
                run = await measure(system, size, count)
                if results is not None:
                    label = f"{direction} {human_size(size)} MiB/s"
                    results.add(label, system.name, count * size / mib / run.seconds)
    await roundtrip_pass(systems, max(10, int(args.roundtrips * scale)), results)


def goal(measure: str) -> str:
    return next((text for key, text in GOALS.items() if key in measure), "")


def row(label: str, same: Samples, cross: Samples, fmt: str) -> list[str]:
    """A table row: `label`, the spread of each side in `fmt`, the per-pair ratios cross/same
    (the same node, or one node for the fan-out, is the baseline), the goal."""
    ratio = ratios(cross, same).spread(".2f")
    return [label, same.spread(fmt), cross.spread(fmt), ratio, goal(label)]


async def fan_out(host: Child, crowds: list[Child], items: int, delivered: int, size: int) -> float:
    """Append `items` at `host`; seconds until every teammate of `crowds` has `delivered`."""
    appended = await host.request(cmd="append", count=items, size=size)
    last = 0.0
    for crowd in crowds:
        got = await expect_items(crowd, delivered)
        last = max(last, float(got["t_last"]))
    return last - float(appended["t0"])


HOP_MESSAGES = r'relay_cluster_hop_messages_total\{direction="down"\}'
CASTS = "relay_casts_total"


def sample(node_url: str, metric: str) -> float:
    """One sample of a node's metrics (`metric`: a regex of its name and labels), read over
    HTTP; 0 while it has none."""
    with urllib.request.urlopen(f"{node_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    found = re.search(rf"^{metric} (\S+)$", text, re.MULTILINE)
    return 0.0 if found is None else float(found.group(1))


async def counted(metric: str, *node_urls: str) -> float:
    return sum([await anyio.to_thread.run_sync(sample, url, metric) for url in node_urls])


async def fanout_bench(
    args: argparse.Namespace, wd: Path, url_a: str, url_b: str, url_c: str
) -> list[list[str]]:
    n = args.fanout
    (wd / "h1").mkdir()
    (wd / "h2").mkdir()
    async with (
        peer("host-1", "session-host", wd, "--relay", url_a, "--workdir", str(wd / "h1")) as h1,
        peer("host-2", "session-host", wd, "--relay", url_a, "--workdir", str(wd / "h2")) as h2,
        swarm("swarm-one", wd) as one,
        swarm("swarm-a", wd) as on_a,
        swarm("swarm-b", wd) as on_b,
        swarm("swarm-c", wd) as on_c,
    ):
        link1 = str((await ready(h1))["link"])
        link2 = str((await ready(h2))["link"])
        await attach_swarm(one, "ours", link1, n)
        third = n // 3
        await attach_swarm(on_a, "ours", link2, n - 2 * third)
        await attach_swarm(on_b, "ours", link2.replace(url_a, url_b, 1), third)
        await attach_swarm(on_c, "ours", link2.replace(url_a, url_c, 1), third)
        sides = {"one node": (h1, [one]), "three nodes": (h2, [on_a, on_b, on_c])}
        delivered = dict.fromkeys(sides, 0)
        seconds = {name: Samples() for name in sides}
        warm = max(1, args.items // 10)
        for name, (host, crowds) in sides.items():  # warm-up, not recorded
            delivered[name] += warm
            await fan_out(host, crowds, warm, delivered[name], 1024)
        hops = Samples()
        for names in in_pairs(args.pairs, list(sides), label="fan-out "):
            for name in names:
                host, crowds = sides[name]
                delivered[name] += args.items
                hops_before = await counted(HOP_MESSAGES, url_b, url_c)
                casts_before = await counted(CASTS, url_a)
                seconds[name].add(await fan_out(host, crowds, args.items, delivered[name], 1024))
                if name == "three nodes":
                    # Only this side's host casts meanwhile: node A counts both hosts' casts.
                    casts = await counted(CASTS, url_a) - casts_before
                    hop_messages = await counted(HOP_MESSAGES, url_b, url_c) - hops_before
                    hops.add(hop_messages / max(1.0, casts))
    label = f"fan-out {args.items} items to {n} s"
    forwarded = 2 * (n // 3)
    hop_row = [
        f"node link messages down per cast ({forwarded} teammates carried, 2 nodes)",
        "-",
        hops.spread(".1f"),
        "-",
        "",
    ]
    return [row(label, seconds["one node"], seconds["three nodes"], ".3f"), hop_row]


async def bench(args: argparse.Namespace) -> None:
    # The nodes read the shared secret from the environment, never from the command line.
    os.environ["TUNNEL_RELAY_CLUSTER_SECRET"] = "cluster bench secret, 32 bytes or more"
    raise_fd_limit(8 * args.fanout + 1000)
    with workdir("cluster-bench-") as wd, redis_server(wd) as redis_url:
        port_a, port_b, port_c = _free_port(), _free_port(), _free_port()
        url_a, url_b = f"http://127.0.0.1:{port_a}", f"http://127.0.0.1:{port_b}"
        url_c = f"http://127.0.0.1:{port_c}"
        async with (
            node(wd, "node-a", redis_url, port_a, url_a) as a,
            node(wd, "node-b", redis_url, port_b, url_a) as b,
            node(wd, "node-c", redis_url, port_c, url_a),
            peer("host", "host", wd, "--relay", url_a, "--workdir", str(wd)) as host,
        ):
            link = str((await ready(host))["link"])
            cross_link = link.replace(url_a, url_b, 1)
            async with (
                connect_teammate(link, name="same") as same,
                connect_teammate(cross_link, name="cross") as cross,
            ):
                # Node B's process is charged to the cross teammate only through wall time.
                systems = [
                    System("same", same.send, same.receive, [a.pid, host.pid]),
                    System("cross", cross.send, cross.receive, [a.pid, b.pid, host.pid]),
                ]
                results = Results()
                if not args.fanout_only:
                    await one_pass(systems, args, None, scale=0.1)  # warm-up, not recorded
                    for order in in_pairs(args.pairs, systems, timed=True):
                        await one_pass(order, args, results)
            fanout_rows = await fanout_bench(args, wd, url_a, url_b, url_c) if args.fanout else []
    rows = [
        row(measure, by_system["same"], by_system["cross"], ".3f" if "ms" in measure else ".1f")
        for measure, by_system in results.samples.items()
    ]
    rows += fanout_rows
    title = (
        f"fan-out to {args.fanout} teammates, three nodes against one, {args.pairs} pairs"
        if args.fanout_only
        else f"cross-node against same-node attach, {args.pairs} pairs, {args.mib:g} MiB per"
        f" bulk run, {args.roundtrips} round trips"
    )
    print_table(
        f"{title}: median [min-max]",
        ["measure", "same / one node", "cross / three nodes", "ratio", "goal"],
        rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, help="pairs measured (default 5; quick 3)")
    parser.add_argument("--size", action="append", type=parse_size, help="bulk message size")
    parser.add_argument("--mib", type=float, help="MiB per bulk run (default 32; quick 8)")
    parser.add_argument("--roundtrips", type=int, help="round trips per run (default 1000)")
    parser.add_argument(
        "--fanout", type=int, help="teammates of the fan-out (default 300, 0: skip)"
    )
    parser.add_argument("--items", type=int, default=100, help="items per fan-out run (100)")
    parser.add_argument(
        "--fanout-only", action="store_true", help="only the fan-out (no bulk, no round trips)"
    )
    parser.add_argument("--quick", action="store_true", help="smaller defaults (for iterating)")
    args = parser.parse_args()
    args.pairs = args.pairs or (3 if args.quick else 5)
    args.size = tuple(args.size or (4096, 65536))
    args.mib = args.mib or (8 if args.quick else 32)
    args.roundtrips = args.roundtrips or (300 if args.quick else 1000)
    args.fanout = 300 if args.fanout is None else args.fanout
    anyio.run(bench, args)


if __name__ == "__main__":
    main()
