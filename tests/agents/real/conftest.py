"""Fixtures of the real-agent tests: the agents from npm, the fake model, a shared session.

The agents are installed by scripts/test from the pinned scripts/agents-lock/ into a cache
directory named after the lock file's hash, and found through TUNNEL_TEST_AGENTS_BIN (or that same
directory when the variable is unset, after one run of scripts/test). Each runs with a HOME of its
own, a dummy key and its base URL pointed at `ModelServer`; HTTPS_PROXY points there too, so
nothing an agent does reaches past loopback.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import anyio
import psutil
import pytest

from tests.host.teammate import Teammate, attached
from tests.support import ROOT, RelayProcess, stop_process, wait_or_kill

from .model_server import ModelServer

LOCK = ROOT / "scripts" / "agents-lock" / "package-lock.json"
TUNNEL = (sys.executable, "-m", "tunnel.cli")


def agents_bin() -> Path:
    """Where scripts/test installed the agents' executables; skips the test if it did not."""
    named = os.environ.get("TUNNEL_TEST_AGENTS_BIN")
    if named:
        path = Path(named)
    else:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        key = hashlib.sha256(LOCK.read_bytes()).hexdigest()[:16]
        path = cache / "agent-tunnel" / "agents" / key / "node_modules" / ".bin"
    programs = ("claude-agent-acp", "gemini", "codex-acp", "qwen")
    if not all((path / name).exists() for name in programs):
        problem = f"the real agents are not installed in {path}: run ./scripts/test"
        # A required suite (tests/conftest.py): under TUNNEL_REQUIRE_ALL=1 it fails, never skips.
        if os.environ.get("TUNNEL_REQUIRE_ALL") == "1":
            pytest.fail(problem, pytrace=False)
        pytest.skip(problem)
    return path


# -- the agents -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Agent:
    """How to run one real agent against the fake model, with nothing of the user's."""

    name: str
    program: str
    """The executable, in the agents' bin directory."""
    args: tuple[str, ...] = ()

    def spec(self, bin_dir: Path) -> str:
        """The `--agent` value of `tunnel host`."""
        return "acp:" + shlex.join([str(bin_dir / self.program), *self.args])

    def environment(self, model_url: str, home: Path, workspace: Path) -> dict[str, str]:
        """The agent's own variables (and files in `home`) pointing it at `model_url`."""
        raise NotImplementedError


@dataclass(frozen=True)
class Claude(Agent):
    """claude-agent-acp, the ACP adapter that runs Claude Code (the Agent SDK's native binary)."""

    default_mode: str | None = "default"
    """`permissions.defaultMode` in the user's Claude settings: the mode a session starts in;
    None: no settings, so the adapter's own default (`auto` in 0.101.0)."""

    def environment(self, model_url: str, home: Path, workspace: Path) -> dict[str, str]:
        # claude-agent-acp 0.101.0 starts a session in "auto" (Claude's own classifier approves tool
        # calls, nobody is asked) unless the user's settings name a mode: these tests are about
        # what the people sharing the agent are asked, as a user who chose "default" sees it.
        if self.default_mode is not None:
            claude_dir = home / ".claude"
            claude_dir.mkdir(parents=True, exist_ok=True)
            settings = {"permissions": {"defaultMode": self.default_mode}}
            (claude_dir / "settings.json").write_text(json.dumps(settings))
        return {
            "ANTHROPIC_BASE_URL": model_url,
            "ANTHROPIC_API_KEY": "dummy",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }


class Gemini(Agent):
    """Gemini CLI in ACP mode. GOOGLE_GEMINI_BASE_URL makes it use the "gateway" auth type."""

    def environment(self, model_url: str, home: Path, workspace: Path) -> dict[str, str]:
        gemini_dir = home / ".gemini"
        gemini_dir.mkdir(parents=True, exist_ok=True)
        settings = {
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
            # A fixed model: with the default ("auto") each turn first asks a small model to
            # classify the prompt.
            "model": {"name": "gemini-2.5-flash"},
        }
        (gemini_dir / "settings.json").write_text(json.dumps(settings))
        # In a folder the user has not trusted Gemini refuses "allow always"; a user trusts the
        # workspace once, at first use.
        trusted = {str(workspace): "TRUST_FOLDER"}
        (gemini_dir / "trustedFolders.json").write_text(json.dumps(trusted))
        return {"GEMINI_API_KEY": "dummy", "GOOGLE_GEMINI_BASE_URL": model_url}


class Codex(Agent):
    """codex-acp, the ACP adapter of OpenAI's Codex, with a model provider of its own pointed at
    the fake model's Responses API (its config file in CODEX_HOME, as a user writes one)."""

    def environment(self, model_url: str, home: Path, workspace: Path) -> dict[str, str]:
        codex_home = home / ".codex"
        codex_home.mkdir(parents=True, exist_ok=True)
        (codex_home / "config.toml").write_text(
            'model = "gpt-5.4-mini"\n'
            'model_provider = "fake"\n'
            "[model_providers.fake]\n"
            'name = "Fake"\n'
            f'base_url = "{model_url}/v1"\n'
            'wire_api = "responses"\n'
            'env_key = "FAKE_MODEL_KEY"\n'
            f"[projects.{json.dumps(str(workspace))}]\n"
            'trust_level = "trusted"\n'
        )
        return {"CODEX_HOME": str(codex_home), "FAKE_MODEL_KEY": "dummy"}


class Qwen(Agent):
    """Qwen Code in ACP mode, with its OpenAI-compatible provider pointed at the fake model's Chat
    Completions API (OPENAI_BASE_URL), as a user with an API key of another provider runs it."""

    def environment(self, model_url: str, home: Path, workspace: Path) -> dict[str, str]:
        qwen_dir = home / ".qwen"
        qwen_dir.mkdir(parents=True, exist_ok=True)
        settings = {
            "security": {"auth": {"selectedType": "openai"}},
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        }
        (qwen_dir / "settings.json").write_text(json.dumps(settings))
        return {
            "OPENAI_API_KEY": "dummy",
            "OPENAI_BASE_URL": f"{model_url}/v1",
            "OPENAI_MODEL": "qwen3-coder-plus",
        }


CLAUDE = Claude(name="claude", program="claude-agent-acp")
CLAUDE_AS_INSTALLED = Claude(name="claude", program="claude-agent-acp", default_mode=None)
"""Claude with no settings of the user's: its sessions start in the adapter's own mode."""
GEMINI = Gemini(name="gemini", program="gemini", args=("--acp",))
CODEX = Codex(name="codex", program="codex-acp")
QWEN = Qwen(name="qwen", program="qwen", args=("--acp",))


def base_environment(model_url: str, home: Path) -> dict[str, str]:
    """What every agent and `tunnel host` get: no variable of the user's but PATH and locale
    (no real key, no TUNNEL_* setting), a HOME of their own, and the fake model as the proxy."""
    env = {name: os.environ[name] for name in ("PATH", "LANG", "LC_ALL") if name in os.environ}
    env.update(
        HOME=str(home),
        PYTHONUNBUFFERED="1",
        COLUMNS="500",
        HTTP_PROXY=model_url,
        HTTPS_PROXY=model_url,
        NO_PROXY="127.0.0.1,localhost",
    )
    return env


# -- processes --------------------------------------------------------------------------------


class Output:
    """A subprocess's stdout read line by line in a thread, so it never blocks on a full pipe."""

    def __init__(self, stream: IO[bytes] | None) -> None:
        assert stream is not None
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[bytes]) -> None:
        for raw in iter(stream.readline, b""):
            with self._changed:
                self.lines.append(raw.decode(errors="replace").rstrip("\n"))
                self._changed.notify_all()

    def _wait(self, pattern: str, start: int, within: float) -> tuple[int, re.Match[str]]:
        deadline = time.monotonic() + within
        with self._changed:
            index = start
            while True:
                while index < len(self.lines):
                    match = re.search(pattern, self.lines[index])
                    if match:
                        return index, match
                    index += 1
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    tail = "\n".join(self.lines[-30:])
                    raise AssertionError(
                        f"no line matching {pattern!r} in time; last lines:\n{tail}"
                    )
                self._changed.wait(remaining)

    async def wait_for(
        self, pattern: str, *, start: int = 0, within: float = 60.0
    ) -> re.Match[str]:
        """The first line from `start` on matching `pattern`; fails after `within` seconds."""
        _, match = await anyio.to_thread.run_sync(self._wait, pattern, start, within)
        return match

    def mark(self) -> int:
        """Where the next line will be: wait_for(..., start=mark()) sees only later lines."""
        with self._changed:
            return len(self.lines)


@dataclass
class HostProcess:
    """`tunnel host --agent acp:...` as a subprocess, with its links."""

    proc: subprocess.Popen[bytes]
    output: Output
    stderr_path: Path
    view_link: str = ""
    drive_link: str = ""

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def kill_agent(self) -> None:
        """SIGKILL the agent and everything it started, as a crash would end it.

        The agent leads a process group of its own (docs/agents.md); the whole group goes,
        since Gemini CLI runs as a child of a launcher that shares its pipes.
        """
        children = psutil.Process(self.proc.pid).children()
        assert len(children) == 1, f"expected one agent process, got {children}"
        os.killpg(children[0].pid, signal.SIGKILL)

    def stop(self) -> int:
        return stop_process(self.proc, within=20)


@dataclass
class AttachProcess:
    """`tunnel attach` as a subprocess: type lines into it, read what it prints."""

    proc: subprocess.Popen[bytes]
    output: Output

    def type(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.type("/quit")
            wait_or_kill(self.proc)


@dataclass
class Session:
    """One shared real agent: the fake model, the relay, the host; attach teammates to it."""

    agent: Agent
    model: ModelServer
    relay: RelayProcess
    host: HostProcess
    workspace: Path
    home: Path
    """The agent's HOME: its settings and saved sessions."""
    env: dict[str, str]
    attaches: list[AttachProcess] = field(default_factory=list)

    def attach(self, name: str = "alice", *, link: str | None = None) -> AttachProcess:
        """Start `tunnel attach` with the drive link (or `link`)."""
        proc = subprocess.Popen(
            [*TUNNEL, "attach", "--name", name],
            cwd=ROOT,
            env=dict(self.env, TUNNEL_LINK=link or self.host.drive_link),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        attach = AttachProcess(proc=proc, output=Output(proc.stdout))
        self.attaches.append(attach)
        return attach

    def teammate(
        self, name: str = "vera", *, drive: bool = False
    ) -> contextlib.AbstractAsyncContextManager[Teammate]:
        """A Python teammate (tests/host/teammate.py) recording every item and event."""
        return attached(self.host.drive_link if drive else self.host.view_link, name)

    def _host_log(self) -> list[str]:
        return [line for line in self.host.stderr().splitlines() if " websockets." not in line]

    def diagnostics(self) -> str:
        attach_lines = [line for a in self.attaches for line in a.output.lines[-20:]]
        return (
            "host stdout (last lines):\n"
            + "\n".join(self.host.output.lines[-40:])
            + "\nhost stderr (last lines, websockets' left out):\n"
            + "\n".join(self._host_log()[-60:])
            + "\nattach output:\n"
            + "\n".join(attach_lines)
            + f"\nmodel requests: {[(r.key, r.round, r.path) for r in self.model.requests]}"
            + f"\nstray requests: {self.model.strays}"
        )


# -- what the tests look for -------------------------------------------------------------------


def agent_said(text: str) -> Callable[[Teammate], bool]:
    """A `Teammate.wait_for` predicate: an agent message containing `text` is stored."""
    return lambda t: any(
        i["type"] == "message" and i["data"].get("role") == "agent" and text in i["data"]["text"]
        for i in t.items
    )


def permission_requests(teammate: Teammate) -> list[dict[str, Any]]:
    return [i for i in teammate.items if i["type"] == "permission_request"]


def decisions(teammate: Teammate) -> list[dict[str, Any]]:
    """The data of the `permission_decision` items, in order."""
    return [i["data"] for i in teammate.items if i["type"] == "permission_decision"]


def settings_events(teammate: Teammate) -> list[dict[str, Any]]:
    """The data of the `settings` session events, in order."""
    return [
        i["data"]
        for i in teammate.items
        if i["type"] == "session_event" and i["data"].get("what") == "settings"
    ]


async def shown(attach: AttachProcess, start: int) -> None:
    """Wait until `tunnel attach` shows a permission request (printed after `start`): only then
    does `/allow` there know about it."""
    await attach.output.wait_for(r"request perm_\w+: /allow", start=start)


def ask(attach: AttachProcess, line: str) -> int:
    """Type `line` into `tunnel attach`; return where its output stood, for `shown`."""
    mark = attach.output.mark()
    attach.type(line)
    return mark


async def drive(session: Session, name: str = "alice") -> AttachProcess:
    """Start `tunnel attach` with the drive link; return once it says it is attached."""
    attach = session.attach(name)
    await attach.output.wait_for(rf"attached as {name} \(drive\)")
    return attach


async def asked(attach: AttachProcess, viewer: Teammate, line: str, *, count: int = 1) -> None:
    """Type `line` into `tunnel attach`; return once `viewer` holds `count` permission requests
    and attach shows the last, so that `/allow` or `/deny` there answers it."""
    mark = ask(attach, line)
    await viewer.wait_for(lambda t: len(permission_requests(t)) == count)
    await shown(attach, mark)


def agent_starts(teammate: Teammate) -> list[dict[str, Any]]:
    """The data of the `agent_started` session events, in order."""
    return [
        i["data"]
        for i in teammate.items
        if i["type"] == "session_event" and i["data"].get("what") == "agent_started"
    ]


@contextlib.asynccontextmanager
async def driven(
    sharing: contextlib.AbstractAsyncContextManager[Session],
) -> AsyncIterator[tuple[Session, Teammate, AttachProcess]]:
    """`async with driven(share(agent)) as (session, vera, alice):` the shared agent, a viewer
    "vera" recording what is stored and "alice" driving it through `tunnel attach`."""
    async with sharing as session, session.teammate("vera") as vera:
        yield session, vera, await drive(session)


@pytest.fixture
def model() -> Iterator[ModelServer]:
    server = ModelServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    (path / "notes.txt").write_text("remember the milk\n")
    return path


StartSession = Callable[..., contextlib.AbstractAsyncContextManager[Session]]
"""`share(agent, *host_args, key_file=..., log_db=...)`: the agent shared by `tunnel host` with
these extra options (the host's key and log default to files in the test's tmp_path)."""


@pytest.fixture
def share(
    model: ModelServer,
    relay: RelayProcess,
    workspace: Path,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> StartSession:
    """`async with share(CLAUDE) as session:` runs `tunnel host` with that agent until the block
    ends; on a failure the host's output and the model's requests are printed."""
    bin_dir = agents_bin()

    @contextlib.asynccontextmanager
    async def start(
        agent: Agent,
        *host_args: str,
        key_file: Path | None = None,
        log_db: Path | None = None,
    ) -> AsyncIterator[Session]:
        home = tmp_path / "home"
        home.mkdir(exist_ok=True)
        env = base_environment(model.url, home)
        env.update(agent.environment(model.url, home, workspace))
        stderr_path = tmp_path / "host-stderr.log"
        with stderr_path.open("wb") as stderr:
            proc = subprocess.Popen(
                [
                    *TUNNEL,
                    "host",
                    "--relay",
                    relay.url,
                    "--agent",
                    agent.spec(bin_dir),
                    "--workspace",
                    str(workspace),
                    "--log-db",
                    str(log_db or tmp_path / "log.db"),
                    "--key-file",
                    str(key_file or tmp_path / "host_key"),
                    "--no-interactive",
                    "--log-level",
                    "debug",
                    *host_args,
                ],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
        host = HostProcess(proc=proc, output=Output(proc.stdout), stderr_path=stderr_path)
        session = Session(
            agent=agent,
            model=model,
            relay=relay,
            host=host,
            workspace=workspace,
            home=home,
            env=env,
        )
        try:
            host.view_link = (await host.output.wait_for(r"view link:\s+(\S+)")).group(1)
            host.drive_link = (await host.output.wait_for(r"drive link:\s+(\S+)")).group(1)
            yield session
        except BaseException:
            print(session.diagnostics())
            raise
        else:
            for attach in session.attaches:
                attach.stop()
            code = host.stop()
            assert code == 0, f"tunnel host exited with {code}\n{session.diagnostics()}"
        finally:
            for attach in session.attaches:
                attach.stop()
            host.stop()

    return start
