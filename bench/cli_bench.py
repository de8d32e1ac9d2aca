"""Start-up cost of the `tunnel` command line, against Python's own start and `import typer`.

    .venv/bin/python bench/cli_bench.py [--runs 7]

Every figure is the wall time of a fresh process, measured `--runs` times with the baselines
interleaved in the same run (the order rotates each round), and printed as a median, min-max and
two ratios of medians: to `python -c pass` and to `python -c "import typer"` (the floor of any
typer program). Target: `tunnel --help` within 1.5x of `import typer`.

- `tunnel --help`, `tunnel --version`: until the process exits.
- `tunnel relay`: until it prints "relay listening on" (then it is stopped with SIGTERM).
- `tunnel attach`: until it prints "attached as", which it does once the host has answered, with
  a view link to a relay and a `tunnel host --agent demo` this script starts first on 127.0.0.1.
  (`tunnel host --echo` would send attach its own subscribe request back, never the host's
  `ready`, so attach would never say it is attached.)

Where the time goes: `python -X importtime -m tunnel --help`. A sub-command's own `--help` costs
more than `tunnel --help`: typer loads pydantic to parse a command's options.

Every process is bounded by a timeout and runs on loopback only.
"""

from __future__ import annotations

import argparse
import os
import selectors
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

PYTHON = sys.executable
ROOT = Path(__file__).resolve().parents[1]
TUNNEL = (PYTHON, "-m", "tunnel")
TIMEOUT = 30.0
"""Seconds any one process may take to reach its mark."""

ENV = dict(os.environ, PYTHONUNBUFFERED="1")


def run_to_exit(*argv: str) -> float:
    """Seconds from spawning `argv` to its exit (which must be 0)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=ENV,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # A wait with a timeout polls in steps of up to 50 ms, which would round every figure; a
    # plain wait returns at the exit, and the timer bounds it.
    watchdog = threading.Timer(TIMEOUT, proc.kill)
    watchdog.start()
    try:
        code = proc.wait()
    finally:
        watchdog.cancel()
    elapsed = time.perf_counter() - start
    if code != 0:
        raise RuntimeError(f"{argv!r} exited with {code}")
    return elapsed


def read_until(proc: subprocess.Popen[bytes], mark: str, timeout: float = TIMEOUT) -> str:
    """Read `proc`'s stdout until a line contains `mark`; return that line."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    buffer = b""
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while True:
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                text = line.decode(errors="replace")
                if mark in text:
                    return text
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {mark!r} from {proc.args!r} within {timeout}s")
            if selector.select(remaining):
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    raise RuntimeError(f"{proc.args!r} ended before printing {mark!r}")
                buffer += chunk


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it is still there after a few seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    if proc.stdout is not None:
        proc.stdout.close()


@contextmanager
def started(*argv: str) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=ENV,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield proc
    finally:
        stop(proc)


def run_to_mark(argv: tuple[str, ...], mark: str) -> float:
    """Seconds from spawning `argv` to its stdout line containing `mark`; then it is stopped."""
    start = time.perf_counter()
    with started(*argv) as proc:
        read_until(proc, mark)
        return time.perf_counter() - start


@contextmanager
def shared_session(workdir: Path) -> Iterator[str]:
    """A relay and a `tunnel host --agent demo` on loopback; yields the view link."""
    with started(*TUNNEL, "relay", "--port", "0", "--log-level", "warning") as relay:
        url = read_until(relay, "relay listening on").rsplit(" ", 1)[-1].strip()
        host_argv = (
            *TUNNEL,
            "host",
            "--relay",
            url,
            "--no-interactive",
            "--key-file",
            str(workdir / "host_key"),
            "--log-db",
            str(workdir / "log.db"),
            "--workspace",
            str(workdir),
        )
        with started(*host_argv) as host:
            link = read_until(host, "view link:").split("view link:", 1)[1].strip()
            # Once untimed: the relay does not confirm a host's registration, so wait for it.
            run_to_mark((*TUNNEL, "attach", "--no-reconnect", link), "attached as")
            yield link


def report(name: str, times: list[float], base: float, typer_base: float) -> None:
    median = statistics.median(times)
    print(
        f"{name:<28} {median * 1000:8.1f} ms  ({min(times) * 1000:6.1f}-{max(times) * 1000:6.1f})"
        f"  {median / base:6.2f}x pass  {median / typer_base:5.2f}x typer"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="rounds of every measure (>= 5)")
    args = parser.parse_args()
    runs = max(5, args.runs)
    with tempfile.TemporaryDirectory() as tmp, shared_session(Path(tmp)) as link:
        measures: dict[str, Callable[[], float]] = {
            "python -c pass": lambda: run_to_exit(PYTHON, "-c", "pass"),
            'python -c "import typer"': lambda: run_to_exit(PYTHON, "-c", "import typer"),
            "tunnel --help": lambda: run_to_exit(*TUNNEL, "--help"),
            "tunnel --version": lambda: run_to_exit(*TUNNEL, "--version"),
            "tunnel relay (listening)": lambda: run_to_mark(
                (*TUNNEL, "relay", "--port", "0"), "relay listening on"
            ),
            "tunnel attach (attached)": lambda: run_to_mark(
                (*TUNNEL, "attach", "--no-reconnect", link), "attached as"
            ),
        }
        names = list(measures)
        times: dict[str, list[float]] = {name: [] for name in names}
        for round_ in range(runs):
            # Rotate the order so no measure always runs right after the same one.
            shift = round_ % len(names)
            for name in names[shift:] + names[:shift]:
                times[name].append(measures[name]())
    print(f"{runs} runs each, interleaved; median (min-max) and ratios of medians")
    base = statistics.median(times[names[0]])
    typer_base = statistics.median(times[names[1]])
    for name in names:
        report(name, times[name], base, typer_base)


if __name__ == "__main__":
    main()
