"""What the network benches share: child processes spoken to in JSON lines, the relay under test,
swarms of teammates, CPU and memory of a process, TCP bytes of a socket, the order of the A/B
pairs, statistics and the result table.

Every bench compares our relay path with a bare baseline measured in the same run, one after the
other in pairs (A then B, B then A, ...: `in_pairs`), so that a machine that gets busier or
quieter during the run moves both sides alike. A child process is stopped when the `async with`
that started it ends, also on Ctrl-C or a failure.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import json
import math
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

try:
    import psutil
except ImportError:  # optional: /proc is read instead
    psutil = None

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
PEERS = BENCH / "peers.py"
SWARM = BENCH / "swarm.py"

LISTENING = re.compile(r"relay listening on (http://127\.0\.0\.1:(\d+))")
MAX_LINE = 1 << 20
"""Longest line a child may print (a JSON reply)."""

STOP_GRACE = 5.0
"""Seconds a child has to exit after SIGTERM before it is killed."""

EOF_GRACE = 2.0
"""Seconds a bench peer has to exit once its stdin is closed, before it gets SIGTERM."""


def run_bench(main: Callable[..., Awaitable[None]], *args: Any) -> None:
    """`anyio.run(main, *args)`, stopped cleanly at SIGINT (Ctrl-C) or SIGTERM: `main` is
    cancelled, so every process it started is stopped, then this exits with 130 or 143."""
    stopped_by: list[int] = []
    byte_compile()

    async def run() -> None:
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for signum in signals:
                        stopped_by.append(signum)
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(watch)
            await main(*args)
            tg.cancel_scope.cancel()

    try:
        anyio.run(run)
    except Exception:
        # Ctrl-C reaches the children too: one may die before this process notices the signal.
        if not stopped_by:
            raise
    if stopped_by:
        print("interrupted: every process stopped", file=sys.stderr)
        raise SystemExit(128 + stopped_by[0])


def byte_compile() -> None:
    """Compile the package's bytecode, as installing it does. Where PYTHONDONTWRITEBYTECODE is
    set, every process would otherwise compile each module as it imports it, and what that leaves
    free on its heap moves what it measures: the relay's RSS per idle teammate read 1.9 KiB
    (about a tenth) lower without bytecode than with it (docs/performance.md, "Memory")."""
    compileall.compile_dir(ROOT / "tunnel", quiet=1)


def raise_fd_limit(needed: int) -> None:
    """Raise this process's open-file limit (inherited by its children) to at least `needed`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        return
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    if target < needed:
        print(f"warning: open-file limit is {target}, {needed} wanted", file=sys.stderr)


def files_for(teammates: int) -> int:
    """The open-file limit a bench of `teammates` teammates asks for (its children inherit it): a
    few sockets for each teammate, and room to spare."""
    return 4 * teammates + 1000


# -- processes ------------------------------------------------------------------------------------


@dataclass(eq=False)
class Child:
    """A child process that answers one JSON line on stdout for each JSON line on stdin."""

    name: str
    process: anyio.abc.Process
    lines: BufferedByteReceiveStream
    stderr_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    async def read_line(self, within: float) -> str:
        try:
            with anyio.fail_after(within):
                line = await self.lines.receive_until(b"\n", MAX_LINE)
        except (TimeoutError, anyio.EndOfStream, anyio.IncompleteRead) as exc:
            raise RuntimeError(
                f"{self.name}: no answer ({exc!r}); stderr:\n{self.tail()}"
            ) from None
        return line.decode()

    async def request(self, within: float = 120.0, **command: Any) -> dict[str, Any]:
        """Send `command` as one JSON line; return the child's JSON answer."""
        assert self.process.stdin is not None
        await self.process.stdin.send(json.dumps(command).encode() + b"\n")
        answer: dict[str, Any] = json.loads(await self.read_line(within))
        if "error" in answer:
            raise RuntimeError(f"{self.name}: {answer['error']}")
        return answer

    def tail(self, lines: int = 20) -> str:
        try:
            text = self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    def rss(self) -> int:
        return rss_bytes(self.pid)


PROFILE_DIR = os.environ.get("BENCH_PROFILE")
"""If set, every child runs under cProfile and writes `NAME.prof` there when it stops."""


@contextlib.asynccontextmanager
async def child(
    name: str, argv: Sequence[str], workdir: Path, *, stops_at_eof: bool | None = None
) -> AsyncIterator[Child]:
    """Run `argv` (Python arguments) as a child for the duration of the block. A child that
    `stops_at_eof` (default: if it is bench/peers.py or bench/swarm.py) is first asked to stop by
    closing its stdin."""
    if stops_at_eof is None:
        stops_at_eof = bool(argv) and argv[0] in (str(PEERS), str(SWARM))
    stderr_path = workdir / f"{name}.stderr"
    if PROFILE_DIR:
        output = Path(PROFILE_DIR) / f"{name}.prof"
        argv = ["-m", "cProfile", "-o", str(output), *argv]
    with stderr_path.open("wb") as stderr:
        process = await anyio.open_process(
            [sys.executable, *argv],
            cwd=ROOT,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
    assert process.stdout is not None
    try:
        yield Child(name, process, BufferedByteReceiveStream(process.stdout), stderr_path)
    finally:
        with anyio.CancelScope(shield=True):
            await stop(process, eof_grace=EOF_GRACE if stops_at_eof else 0.0)


async def stop(process: anyio.abc.Process, *, eof_grace: float = 0.0) -> None:
    """Close its stdin and give it `eof_grace` seconds to exit, then SIGTERM it, then SIGKILL
    after STOP_GRACE seconds."""
    if process.stdin is not None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await process.stdin.aclose()
    if eof_grace > 0:
        # A signal in the middle of its own orderly exit would cut it short (and lose a profile).
        with anyio.move_on_after(eof_grace):
            await process.wait()
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        with anyio.move_on_after(STOP_GRACE):
            await process.wait()
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
    await process.aclose()


def peer(
    name: str, role: str, workdir: Path, *args: str
) -> contextlib.AbstractAsyncContextManager[Child]:
    """A process of bench/peers.py in `role`."""
    return child(name, [str(PEERS), role, *args], workdir)


RELAY_LOAD_OPTIONS = (
    "--max-connections-per-ip",
    "0",
    "--max-teammates-per-host",
    "0",
    "--max-channels-per-link",
    "0",
    "--log-level",
    "warning",
)
"""`tunnel relay` options for the benches: every teammate comes from 127.0.0.1 and attaches to
one host, so the per-IP, per-host and per-link limits are turned off; nothing else changes."""


ON_UVLOOP = (
    "import asyncio, uvloop; asyncio.set_event_loop_policy(uvloop.EventLoopPolicy());"
    " from tunnel.cli import main; main()"
)
"""`python -c` this, then the command's arguments: `tunnel` on uvloop's event loop (anyio's
asyncio backend makes its loop through the policy)."""


@contextlib.asynccontextmanager
async def tunnel_relay(
    workdir: Path, *extra: str, name: str = "relay", port: int = 0, uvloop: bool = False
) -> AsyncIterator[tuple[Child, str]]:
    """`tunnel relay` on loopback `port` (0: a free one) with RELAY_LOAD_OPTIONS and `extra`
    (on uvloop's event loop if `uvloop`); yields it and its URL once it listens."""
    command = ["-m", "tunnel.cli"] if not uvloop else ["-c", ON_UVLOOP]
    argv = [*command, "relay", "--port", str(port), *RELAY_LOAD_OPTIONS, *extra]
    async with child(name, argv, workdir) as relay:
        match = LISTENING.search(await relay.read_line(30))
        if match is None:
            raise RuntimeError(f"{name} did not start; stderr:\n{relay.tail()}")
        yield relay, match.group(1)


async def ready(proc: Child, within: float = 60.0) -> dict[str, Any]:
    """The first JSON line a peer prints once it is ready (its address, link, ...)."""
    answer: dict[str, Any] = json.loads(await proc.read_line(within))
    if "error" in answer:
        raise RuntimeError(f"{proc.name}: {answer['error']}")
    return answer


@contextlib.contextmanager
def workdir(prefix: str) -> Any:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# -- resources ------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds `pid` has used so far, all its threads. The kernel counts
    another process's CPU in clock ticks (10 ms): measure runs long enough for that."""
    if pid == os.getpid():
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    if psutil is not None:
        times = psutil.Process(pid).cpu_times()
        return float(times.user + times.system)
    fields = _stat_fields(pid)
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def can_pin() -> bool:
    """Whether processes can be held to one CPU here (Linux) and there is more than one."""
    return hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > 1


def _threads(pid: int) -> list[int]:
    """The ids of `pid`'s threads (its own first): affinity is a thread's, not a process's."""
    others = sorted(int(tid) for tid in os.listdir(f"/proc/{pid}/task") if int(tid) != pid)
    return [pid, *others]


@contextlib.contextmanager
def on_one_cpu(pids: Sequence[int]) -> Iterator[int]:
    """Hold every thread of `pids` and of this process to one CPU (the lowest this process may
    use) for the block; yields it. Each thread gets its own CPUs back after, also if the block
    raised; a thread started meanwhile keeps the one CPU. A measure of latency between
    processes then counts what they do, not where the scheduler put each of them: on a virtual
    machine a wake-up on another CPU costs tens of microseconds, and which CPU each process
    lands on changes from run to run."""
    threads = [tid for pid in (os.getpid(), *pids) for tid in _threads(pid)]
    before = {tid: os.sched_getaffinity(tid) for tid in threads}
    cpu = min(before[os.getpid()])
    try:
        for tid in threads:
            os.sched_setaffinity(tid, {cpu})
        yield cpu
    finally:
        failed: OSError | None = None
        for tid, cpus in before.items():
            try:
                os.sched_setaffinity(tid, cpus)
            except ProcessLookupError:
                pass  # the thread ended
            except OSError as exc:  # the others still get theirs back
                failed = failed or exc
        if failed is not None:
            raise failed


def minor_faults(pid: int) -> int:
    """The minor page faults `pid` has taken so far: pages the kernel had to map in."""
    return int(_stat_fields(pid)[7])


def _stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the command name (which may hold spaces): the state first."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def rss_bytes(pid: int) -> int:
    """Resident set size of `pid`, in bytes."""
    if psutil is not None:
        return int(psutil.Process(pid).memory_info().rss)
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


_BYTES_SENT = re.compile(r"\bbytes_sent:(\d+)")


def tcp_bytes_sent(local_port: int, remote_port: int) -> int | None:
    """Bytes the kernel has sent on the loopback TCP socket `local_port` -> `remote_port`, from
    `ss -ti` (None if ss is missing or does not say): wire bytes, WebSocket framing included."""
    if shutil.which("ss") is None:
        return None
    result = subprocess.run(
        [
            "ss",
            "-tinH",
            "state",
            "established",
            "src",
            f"127.0.0.1:{local_port}",
            "dst",
            f"127.0.0.1:{remote_port}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    match = _BYTES_SENT.search(result.stdout)
    return int(match.group(1)) if match else None


# -- statistics and the table ---------------------------------------------------------------------


def percentile(values: Sequence[float], fraction: float) -> float:
    """The value at `fraction` (0..1) of the sorted values, nearest rank."""
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Samples:
    """One measure of one side, a value per pair."""

    values: list[float] = field(default_factory=list)

    def add(self, value: float) -> None:
        self.values.append(value)

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else math.nan

    def spread(self, fmt: str) -> str:
        if not self.values:
            return "-"
        low, high = min(self.values), max(self.values)
        return f"{format(self.median, fmt)} [{format(low, fmt)}-{format(high, fmt)}]"


def ratios(ours: Samples, base: Samples) -> Samples:
    """Per-pair ratios ours/base (pairs ran back to back, so each ratio compares like with like);
    none if a base value is 0 (below what could be measured)."""
    if not all(base.values):
        return Samples()
    return Samples([a / b for a, b in zip(ours.values, base.values, strict=False)])


def compared(label: str, ours: Samples, base: Samples, fmt: str, *more: str) -> list[str]:
    """A table row: `label`, the spread of each side in `fmt`, the per-pair ratios ours/base,
    then the cells `more` (a goal, ...)."""
    return [label, ours.spread(fmt), base.spread(fmt), ratios(ours, base).spread(".2f"), *more]


T = TypeVar("T")


def in_pairs(
    count: int, sides: Sequence[T], *, label: str = "", timed: bool = False
) -> Iterator[Sequence[T]]:
    """The sides of each of `count` pairs in the order to run them: as given in an even pair,
    reversed in an odd one, so that neither always goes first. Says on stderr when a pair is
    done, after `label` (and, if `timed`, in how many seconds)."""
    for pair in range(count):
        started = time.perf_counter()
        yield sides if pair % 2 == 0 else sides[::-1]
        took = f" in {time.perf_counter() - started:.1f} s" if timed else ""
        print(f"{label}pair {pair + 1}/{count} done{took}", file=sys.stderr, flush=True)


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """A plain text table, columns padded to their widest cell."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    print(f"\n{title}")
    # Other work on the machine moves every number: say how busy it was.
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"({os.cpu_count()} cores, load average {load} at the end)")

    def line(cells: Sequence[str]) -> str:
        return "  ".join(str(cell).ljust(width) for cell, width in zip(cells, widths, strict=True))

    print(line(header))
    print("  ".join("-" * width for width in widths))
    for row in rows:
        print(line(row))


def print_timed(rows: Sequence[tuple[str, Callable[[], float]]], rounds: int, digits: int) -> None:
    """For an in-process micro-bench: run each row's timer once to warm up, then `rounds`
    times, and print its median and [min-max] in microseconds with `digits` decimals."""
    for name, timed in rows:
        timed()
        samples = [timed() * 1e6 for _ in range(rounds)]
        low, median, high = min(samples), statistics.median(samples), max(samples)
        print(f"{name:<28} {median:6.{digits}f} [{low:.{digits}f}-{high:.{digits}f}]")


def parse_size(text: str) -> int:
    """`4096`, `4K`, `4KiB`, `64k` -> bytes."""
    match = re.fullmatch(r"\s*(\d+)\s*([kKmM]?)(?:i?[bB])?\s*", text)
    if match is None:
        raise ValueError(f"not a size: {text!r}")
    scale = {"": 1, "k": 1024, "m": 1024 * 1024}[match.group(2).lower()]
    return int(match.group(1)) * scale


def human_size(size: int) -> str:
    if size % (1024 * 1024) == 0:
        return f"{size // (1024 * 1024)} MiB"
    if size % 1024 == 0:
        return f"{size // 1024} KiB"
    return f"{size} B"


# -- the systems the fan-out, attach and memory benches compare -----------------------------------


@dataclass
class Setup:
    """A relay with its host, ready for teammates: `target` is what a swarm attaches to (our
    share link, or the bare relay's ws:// URL), `kind` the swarm's kind for it."""

    kind: str
    target: str
    relay: Child
    relay_port: int
    host: Child | None


@contextlib.asynccontextmanager
async def our_session(
    wd: Path, host_role: str = "session-host", framing: str = "websockets"
) -> AsyncIterator[Setup]:
    """`tunnel relay` (on `framing`) and our host (bench/peers.py `session-host`, or `host`)."""
    async with (
        tunnel_relay(wd, "--framing", framing) as (relay, url),
        peer("host", host_role, wd, "--relay", url, "--workdir", str(wd)) as host,
    ):
        link = (await ready(host))["link"]
        yield Setup("ours", link, relay, int(url.rsplit(":", 1)[1]), host)


def have_uvloop() -> bool:
    """Whether uvloop is installed (the `bench` extra): the bare baselines then run on it too."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.asynccontextmanager
async def bare_broadcast(
    wd: Path, *, with_host: bool = True, uvloop: bool = False
) -> AsyncIterator[Setup]:
    """The bare websockets relay (greeting each teammate), and its bare host; with `uvloop`,
    both on uvloop's event loop (their `kind` is then "bare-uvloop", their swarm's "bare")."""
    kind, loop = ("bare-uvloop", ["--uvloop"]) if uvloop else ("bare", [])
    async with peer(f"ws-relay-{kind}", "bare-relay", wd, "--greet", *loop) as relay:
        url = (await ready(relay))["url"]
        port = int(url.rsplit(":", 1)[1])
        if not with_host:
            yield Setup(kind, url, relay, port, None)
            return
        async with peer(f"ws-host-{kind}", "bare-host", wd, "--url", url, *loop) as host:
            await ready(host)
            yield Setup(kind, url, relay, port, host)


@contextlib.asynccontextmanager
async def swarm(name: str, wd: Path, *, uvloop: bool = False) -> AsyncIterator[Child]:
    """A bench/swarm.py process: many teammates in one process (on uvloop's loop if asked)."""
    async with child(name, [str(SWARM), *(["--uvloop"] if uvloop else [])], wd) as proc:
        await ready(proc)
        yield proc


async def attach_swarm(
    crowd: Child,
    kind: str,
    target: str,
    n: int,
    *,
    concurrency: int = 50,
    mode: str = "session",
    within: float = 600.0,
) -> dict[str, Any]:
    """Have the swarm `crowd` attach `n` teammates to `target` (bench/swarm.py `attach`); its
    answer, once every one is ready. Raises RuntimeError if any failed."""
    answer = await crowd.request(
        within=within,
        cmd="attach",
        kind=kind,
        target=target,
        n=n,
        concurrency=concurrency,
        mode=mode,
    )
    if answer["failed"]:
        raise RuntimeError(
            f"{crowd.name}: {answer['failed']} of {n} teammates failed: {answer['first_failure']}"
        )
    return answer


async def expect_items(crowd: Child, items: int, within: float = 600.0) -> dict[str, Any]:
    """Wait until every teammate of the swarm `crowd` has `items` items in all (bench/swarm.py
    `expect`); its answer. Raises RuntimeError if some fell short."""
    got = await crowd.request(within=within, cmd="expect", items=items)
    if got["complete"] != got["of"]:
        raise RuntimeError(f"{crowd.name}: {got['of'] - got['complete']} teammates short")
    return got


@dataclass(frozen=True, slots=True, kw_only=True)
class CrowdOptions:
    """A bench of one host and `n` teammates: A/B `pairs`, at most `concurrency` connecting."""

    n: int
    pairs: int
    concurrency: int


def add_concurrency_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--concurrency", type=int, default=50, help="teammates connecting at once (default 50)"
    )


def crowd_options(doc: str, n: int) -> CrowdOptions:
    """--n (default `n`), --pairs and --concurrency from the command line of the bench `doc`
    describes; raises the open-file limit for that many teammates."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=n, help=f"teammates (default {n})")
    parser.add_argument("--pairs", type=int, default=5, help="A/B pairs (default 5)")
    add_concurrency_option(parser)
    args = parser.parse_args()
    options = CrowdOptions(n=args.n, pairs=args.pairs, concurrency=args.concurrency)
    raise_fd_limit(files_for(options.n))
    return options


def uplink_bytes(pid: int, remote_port: int) -> int | None:
    """Bytes process `pid` has sent on its TCP connection to 127.0.0.1:`remote_port` (None if
    psutil or ss cannot tell)."""
    if psutil is None:
        return None
    for connection in psutil.Process(pid).net_connections(kind="tcp"):
        if connection.raddr and connection.raddr.port == remote_port:
            return tcp_bytes_sent(connection.laddr.port, remote_port)
    return None
