"""The real stack as subprocesses: `tunnel relay` and `tunnel host`, on loopback only.

Each process gets its own config dir and log database under a temporary directory, and its
output is collected line by line so a test can wait for what it prints.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from playwright.sync_api import Browser, BrowserContext, Page

from tunnel.log import NewItem, SQLiteStore

ROOT = Path(__file__).resolve().parents[3]
LISTENING = re.compile(r"relay listening on (http://127\.0\.0\.1:(\d+))")
LINK = re.compile(r"(view|drive) link:\s+(\S+)")
CONVERSATION = re.compile(r"conversation(?: id)?:\s+(\S+)")


@dataclass
class Process:
    """A child process whose stdout and stderr lines are kept (bounded) as they arrive."""

    name: str
    popen: subprocess.Popen[str]
    lines: queue.Queue[str] = field(default_factory=lambda: queue.Queue(maxsize=10_000))
    seen: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)

    @classmethod
    def start(cls, name: str, args: list[str], env: dict[str, str]) -> Process:
        popen = subprocess.Popen(
            [sys.executable, "-m", "tunnel.cli", *args],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        process = cls(name=name, popen=popen)
        threading.Thread(target=process._pump_stdout, daemon=True).start()
        threading.Thread(target=process._pump_stderr, daemon=True).start()
        return process

    def _pump_stdout(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            if not self.lines.full():
                self.lines.put(line.rstrip("\n"))

    def _pump_stderr(self) -> None:
        assert self.popen.stderr is not None
        for line in self.popen.stderr:
            if len(self.stderr) < 10_000:
                self.stderr.append(line.rstrip("\n"))

    def wait_for(self, pattern: re.Pattern[str], timeout: float = 20.0) -> re.Match[str]:
        """The first stdout line (seen before or arriving within `timeout`) matching `pattern`."""
        for line in self.seen:
            if match := pattern.search(line):
                return match
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=min(left, 0.2))
            except queue.Empty:
                if self.popen.poll() is not None and self.lines.empty():
                    break
                continue
            self.seen.append(line)
            if match := pattern.search(line):
                return match
        raise AssertionError(
            f"{self.name} did not print {pattern.pattern!r}; stdout: {self.seen[-20:]}, "
            f"stderr: {self.stderr[-20:]}, exit: {self.popen.poll()}"
        )

    def stop(self, timeout: float = 10.0) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to say goodbye (a crash, a power cut)."""
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)


def isolated_env(home: Path) -> dict[str, str]:
    """The environment with config, data and cache dirs inside `home`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNNEL_")}
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / "config"),
        XDG_DATA_HOME=str(home / "data"),
        XDG_STATE_HOME=str(home / "state"),
        XDG_CACHE_HOME=str(home / "cache"),
        PYTHONUNBUFFERED="1",
    )
    return env


@dataclass
class Relay:
    process: Process
    url: str
    port: int

    @classmethod
    def start(cls, home: Path, port: int = 0) -> Relay:
        process = Process.start(
            "relay",
            ["relay", "--host", "127.0.0.1", "--port", str(port), "--log-level", "info"],
            isolated_env(home),
        )
        match = process.wait_for(LISTENING)
        return cls(process=process, url=match.group(1), port=int(match.group(2)))


@dataclass
class Host:
    process: Process
    view_link: str
    drive_link: str
    db: Path

    @classmethod
    def start(
        cls,
        home: Path,
        relay_url: str,
        agent: str = "demo",
        name: str = "hana",
        *,
        env: dict[str, str] | None = None,
        workspace: Path | None = None,
        timeout: float = 20.0,
        options: tuple[str, ...] = (),
    ) -> Host:
        """`tunnel host` with its key and log in `home`. `env` replaces the isolated environment
        (a real agent's, pointed at a fake model); a `workspace` given is shared as it is, else
        a demo one is made in `home`. `timeout`: how long to wait for the links. `options`:
        more of `tunnel host`'s options."""
        db = home / "log.sqlite3"
        if workspace is None:
            workspace = home / "workspace"
            workspace.mkdir(exist_ok=True)
            (workspace / "README.md").write_text("# demo\n\nline three\n")
        args = [
            "host",
            "--relay",
            relay_url,
            "--key-file",
            str(home / "host_key"),
            "--name",
            name,
            "--agent",
            agent,
            "--log-db",
            str(db),
            "--workspace",
            str(workspace),
            "--no-interactive",
            *options,
        ]
        process = Process.start("host", args, isolated_env(home) if env is None else env)
        # The view link is printed first, the drive link last.
        process.wait_for(re.compile(r"drive link:"), timeout)
        links = {m.group(1): m.group(2) for line in process.seen if (m := LINK.search(line))}
        return cls(process=process, view_link=links["view"], drive_link=links["drive"], db=db)

    def log_show(self, conversation_id: str, *, missing_ok: bool = False) -> str:
        """`tunnel log show` of the host's database; "" for a conversation with no items yet
        when `missing_ok` (the log creates a conversation with its first item)."""
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "tunnel.cli",
                "log",
                "show",
                conversation_id,
                "--db",
                str(self.db),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if missing_ok and result.returncode != 0 and "no conversation" in result.stderr:
            return ""
        assert result.returncode == 0, result.stderr
        return result.stdout

    def log_items(self, conversation_id: str) -> list[dict[str, Any]]:
        """Every item of the conversation as the host stored it (`tunnel log export`)."""
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "tunnel.cli",
                "log",
                "export",
                conversation_id,
                "--db",
                str(self.db),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        records = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
        # The export also carries the host's signatures of the chain, records of their own kind.
        return [record for record in records if record.get("kind") != "head_signature"]


@contextlib.contextmanager
def running_relay(home: Path) -> Iterator[Relay]:
    """`Relay.start` in `home` for the block; stopped after."""
    relay = Relay.start(home)
    try:
        yield relay
    finally:
        relay.process.stop()


def earlier_answers(count: int) -> list[NewItem]:
    """`count` agent messages, "earlier answer 0" onwards: a long conversation to fill a log."""
    return [
        NewItem(
            type="message",
            data={"role": "agent", "text": f"earlier answer {n}"},
            created_by="agent",
        )
        for n in range(count)
    ]


async def _append(db: Path, items: Sequence[NewItem]) -> None:
    store = await SQLiteStore.open(db)
    try:
        await store.append("main", list(items))
    finally:
        await store.aclose()


@contextlib.contextmanager
def running_host(
    home: Path, relay_url: str, agent: str = "demo", *, log: Sequence[NewItem] = ()
) -> Iterator[Host]:
    """`Host.start` in `home` (made if missing) for the block; stopped after.

    `log` is written to the host's conversation before the host opens its log; in a thread of
    its own, since the page's playwright runs an event loop in the test's thread."""
    home.mkdir(exist_ok=True)
    if log:
        with ThreadPoolExecutor(1) as pool:
            pool.submit(anyio.run, _append, home / "log.sqlite3", log).result()
    host = Host.start(home, relay_url, agent=agent)
    try:
        yield host
    finally:
        host.process.stop()


@contextlib.contextmanager
def scripted_stack(
    browser: Browser, tmp_path: Path, script: Path
) -> Iterator[tuple[Host, Callable[[], Page]]]:
    """`tunnel relay` and `tunnel host` running the scripted ACP agent `script` for the block,
    and a maker of fresh pages, each in a browser context of its own (all closed after)."""
    agent = "acp:" + shlex.join([sys.executable, str(script)])
    contexts: list[BrowserContext] = []

    def new_page() -> Page:
        context = browser.new_context(viewport={"width": 1200, "height": 860})
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(15_000)
        return page

    try:
        with (
            running_relay(tmp_path / "relay") as relay,
            running_host(tmp_path / "host", relay.url, agent=agent) as host,
        ):
            yield host, new_page
    finally:
        for context in contexts:
            context.close()
