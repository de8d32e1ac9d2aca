"""How soon a host is registered again once its relay listens again after a restart.

Run: .venv/bin/python bench/reconnect_bench.py
Starts `tunnel relay` as a subprocess and an in-process host with the production settings (its
backoff included), then RUNS times: kills the relay, keeps it down DOWN seconds (long enough
for a backoff that grew with every failure to reach many seconds), starts it again on the same
port, and measures from its "relay listening" line to the host being registered. Prints each
run and the min-max, in seconds.
"""

from __future__ import annotations

import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from tunnel.host import Host, HostSettings, echo_handler

RUNS = 5
"""Restarts measured."""

DOWN = 5.0
"""Seconds the relay stays down each time."""

POLL = 0.005
"""Seconds between looks at whether the host is registered (the resolution of the result)."""

LISTENING = re.compile(rb"relay listening on http://127\.0\.0\.1:(\d+)")
ROOT = Path(__file__).resolve().parents[1]


def start_relay(port: int) -> tuple[subprocess.Popen[bytes], int]:
    """Start the relay; return it and its port once it prints that it listens."""
    relay = subprocess.Popen(
        [sys.executable, "-m", "tunnel.cli", "relay", "--port", str(port)],
        cwd=ROOT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert relay.stdout is not None
    match = LISTENING.search(relay.stdout.readline())
    if match is None:
        relay.kill()
        raise SystemExit("the relay did not start")
    return relay, int(match.group(1))


def stop_relay(relay: subprocess.Popen[bytes]) -> None:
    relay.kill()
    relay.wait()
    if relay.stdout is not None:
        relay.stdout.close()


async def wait_until(host: Host, *, connected: bool) -> None:
    # `Host` has no event for this; polling every POLL seconds is the resolution of the result.
    with anyio.fail_after(60):
        while host.connected is not connected:  # noqa: ASYNC110
            await anyio.sleep(POLL)


async def bench(workdir: Path) -> list[float]:
    relay, port = start_relay(0)
    settings = HostSettings(relay_url=f"http://127.0.0.1:{port}", key_file=workdir / "host_key")
    host = Host(settings, echo_handler)
    times: list[float] = []
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(host.run)
            for run in range(1, RUNS + 1):
                stop_relay(relay)
                await wait_until(host, connected=False)
                await anyio.sleep(DOWN)
                # In a thread: the host's event loop keeps running while the relay starts.
                relay, _ = await anyio.to_thread.run_sync(start_relay, port)
                listening = time.perf_counter()
                await wait_until(host, connected=True)
                times.append(time.perf_counter() - listening)
                print(f"run {run}: registered {times[-1]:.2f} s after the relay listened again")
            tg.cancel_scope.cancel()
    finally:
        stop_relay(relay)
    return times


def main() -> None:
    # The host's own lines (link closed, online again) would interleave with the results.
    logging.getLogger("tunnel").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as workdir:
        times = anyio.run(bench, Path(workdir))
    print(
        f"relay listening again -> host registered, {len(times)} runs, relay down {DOWN:.0f} s: "
        f"min {min(times):.2f} s, median {statistics.median(times):.2f} s, "
        f"max {max(times):.2f} s"
    )


if __name__ == "__main__":
    main()
