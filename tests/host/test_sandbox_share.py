"""`tunnel host --sandbox` as a real subprocess, driven through a real relay: what a drive link
can make the agent reach, with and without the sandbox.

The same probe (tests/host/sandbox_probe.sh, copied into the workspace) runs as the agent's own
tool: typed into `pty:bash`, run by an ACP agent itself (tests/agents/shell_acp_agent.py), and
run by the host for that agent through terminal/create. It tries to read a fake SSH key in the
home directory, the host key and share secrets (in a config directory the sandbox shows
read-only), the log database (in a writable allowance), /etc/shadow; to keep capabilities, make
a user namespace, gain a setuid program's user; to write into the home directory, a read-only
allowance and a directory outside everything; to connect to a loopback port the test opens.
Unconfined, every attempt the machine allows succeeds, which shows the boundary below is the
sandbox's; sandboxed, each one fails while the workspace stays readable and writable.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support import RelayProcess, read_line
from tunnel.agents.sandbox import bwrap_version
from tunnel.app.requests import Input, Prompt
from tunnel.process.exit_codes import EXIT_CONFIG

from .teammate import Teammate, attached

pytestmark = [pytest.mark.anyio, pytest.mark.sandbox, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("sandbox_probe.sh")
RESULT = re.compile(r"RESULT (\w+) (yes|no)")
IS_ROOT = os.geteuid() == 0
DENIED = (
    "ssh_key",
    "host_key",
    "push_key",
    "share_secrets",
    "log_db",
    "shadow",
    "caps",
    "userns",
    "setuid",
)
"""What a sandboxed agent must fail to do (where the machine lets an unconfined one)."""
WAIT = 30.0
"""Seconds any single wait in these tests may take."""


@dataclass
class Machine:
    """A fake user's files around a workspace, and a loopback port that accepts connections."""

    tmp: Path
    port: int

    @property
    def home(self) -> Path:
        return self.tmp / "home"

    @property
    def workspace(self) -> Path:
        return self.tmp / "workspace"

    @property
    def data(self) -> Path:
        """Shown writable (--sandbox-allow); holds the log database, which stays hidden."""
        return self.tmp / "data"

    @property
    def shared(self) -> Path:
        """Shown read-only (--sandbox-allow :ro)."""
        return self.tmp / "shared"

    @property
    def elsewhere(self) -> Path:
        return self.tmp / "elsewhere"

    @property
    def key_file(self) -> Path:
        # The default place: ~/.config/agent-tunnel (XDG_CONFIG_HOME is unset).
        return self.home / ".config" / "agent-tunnel" / "host_key"

    @property
    def log_db(self) -> Path:
        return self.data / "log.db"

    def make(self) -> None:
        for folder in (self.workspace, self.data, self.shared, self.elsewhere):
            folder.mkdir(parents=True)
        (self.home / ".ssh").mkdir(parents=True, mode=0o700)
        key = self.home / ".ssh" / "id_ed25519"
        key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nfake\n")
        key.chmod(0o600)
        (self.home / ".bashrc").write_text("# fake\n")
        (self.home / ".config" / "tool").mkdir(parents=True)
        (self.home / ".config" / "tool" / "settings").write_text("allowed\n")
        (self.workspace / "notes.txt").write_text("remember the milk\n")
        shutil.copy(PROBE, self.workspace / "probe.sh")
        if IS_ROOT:
            # A setuid program owned by nobody: whoever runs it would become nobody.
            suid = self.workspace / "suid-id"
            shutil.copy("/usr/bin/id", suid)
            os.chown(suid, 65534, 65534)
            suid.chmod(0o4755)

    def probe_command(self) -> str:
        secrets = self.key_file.with_name("share_secrets")
        args = (self.key_file, secrets, self.log_db, self.shared, self.elsewhere, self.port)
        return "bash probe.sh " + " ".join(str(a) for a in args)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "TUNNEL_"))}
        return dict(env, HOME=str(self.home), PYTHONUNBUFFERED="1")

    def setuid_works(self) -> bool:
        """Whether a setuid program changes the user here, unconfined (not on a nosuid mount)."""
        if not IS_ROOT:
            return False
        done = subprocess.run(
            [str(self.workspace / "suid-id"), "-u"], capture_output=True, text=True, check=True
        )
        return done.stdout.strip() == "65534"


@pytest.fixture
def machine(tmp_path: Path) -> Iterator[Machine]:
    with socket.create_server(("127.0.0.1", 0), backlog=16) as server:
        made = Machine(tmp=tmp_path, port=server.getsockname()[1])
        made.make()
        yield made


def sandbox_args(machine: Machine, *, net: str = "host") -> list[str]:
    # The test's Python (for the ACP agent) may live under /root or the home directory.
    return [
        "--sandbox",
        "--sandbox-allow",
        f"{machine.home / '.config'}:ro",
        "--sandbox-allow",
        str(machine.data),
        "--sandbox-allow",
        f"{machine.shared}:ro",
        "--sandbox-allow",
        f"{ROOT}:ro",
        "--sandbox-allow",
        f"{sys.base_prefix}:ro",
        "--sandbox-net",
        net,
    ]


def host_command(
    relay: RelayProcess, machine: Machine, *args: str, log_db: Path | None = None
) -> list[str]:
    """`tunnel host` for `machine`'s workspace and log, without a console."""
    return [
        *(sys.executable, "-m", "tunnel.cli", "host", "--relay", relay.url, "--no-interactive"),
        *("--workspace", str(machine.workspace)),
        *("--log-db", str(log_db if log_db is not None else machine.log_db)),
        *args,
    ]


@contextlib.asynccontextmanager
async def hosting(
    relay: RelayProcess, machine: Machine, agent: str, *args: str
) -> AsyncIterator[str]:
    """`tunnel host` sharing `agent` until the block ends; yields the drive link."""
    stderr = (machine.tmp / "host-stderr.log").open("wb")
    proc = subprocess.Popen(
        host_command(relay, machine, "--agent", agent, *args),
        cwd=ROOT,
        env=machine.env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=stderr,
    )
    stderr.close()
    try:
        link = await anyio.to_thread.run_sync(_drive_link, proc, machine)
        yield link
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        assert proc.stdout is not None
        proc.stdout.close()


def _drive_link(proc: subprocess.Popen[bytes], machine: Machine) -> str:
    for _ in range(10):
        try:
            line = read_line(proc, timeout=WAIT)
        except AssertionError:
            raise AssertionError((machine.tmp / "host-stderr.log").read_text()) from None
        if match := re.search(r"drive link: (\S+)", line):
            return match.group(1)
    raise AssertionError("no drive link printed")


async def ready(teammate: Teammate) -> dict[str, Any]:
    await teammate.wait_for(lambda t: t.ready is not None, within=WAIT)
    assert teammate.ready is not None
    return teammate.ready


def results(text: str) -> dict[str, bool]:
    return {name: said == "yes" for name, said in RESULT.findall(text)}


async def probe_terminal(alice: Teammate, machine: Machine) -> dict[str, bool]:
    """Type the probe into `pty:bash`; its answers from the terminal items."""

    def screen(t: Teammate) -> str:
        return "".join(i["data"]["text"] for i in t.items if i["type"] == "terminal")

    await alice.send(Input(data=(machine.probe_command() + "\n").encode()))
    await alice.wait_for(lambda t: "RESULT done" in screen(t), within=WAIT)
    return results(screen(alice))


async def probe_acp(alice: Teammate, machine: Machine, how: str) -> dict[str, bool]:
    """Prompt the ACP agent to run the probe (`run` itself, or `terminal` through the host)."""
    before = len(alice.items)

    def reply(t: Teammate) -> str:
        return "".join(
            i["data"]["text"]
            for i in t.items[before:]
            if i["type"] == "message" and i["data"].get("role") == "agent"
        )

    await alice.send(Prompt(text=f"{how}: {machine.probe_command()}"))
    try:
        await alice.wait_for(lambda t: "RESULT done" in reply(t), within=WAIT)
    except TimeoutError:
        raise AssertionError(f"no answer to the probe; got {alice.items[before:]}") from None
    return results(reply(alice))


def expected_unconfined(machine: Machine) -> dict[str, bool]:
    """What this machine lets an agent do without the sandbox."""
    return {
        "ssh_key": True,
        "host_key": True,
        "push_key": True,
        "share_secrets": True,
        "log_db": True,
        "shadow": IS_ROOT,
        "caps": IS_ROOT,
        "userns": True,
        "setuid": machine.setuid_works(),
    }


def assert_confined(found: dict[str, bool], machine: Machine, bwrap: str) -> None:
    denied = set(DENIED)
    if bwrap_version(bwrap) < (0, 8):
        denied.discard("userns")  # bwrap before 0.8 cannot forbid nested user namespaces
    assert {name: found[name] for name in denied} == dict.fromkeys(denied, False)
    # Inside the boundary everything works: the workspace, and what the host user allowed.
    assert found["workspace_read"]
    assert found["workspace_write"]
    assert found["allowed_config"]


def assert_nothing_outside_changed(machine: Machine) -> None:
    assert (machine.home / ".bashrc").read_text() == "# fake\n"
    assert not (machine.shared / "pwned").exists()
    assert not (machine.elsewhere / "pwned").exists()
    assert (machine.workspace / "made-inside.txt").read_text() == "made\n"


def assert_everything_outside_changed(machine: Machine) -> None:
    assert "pwned" in (machine.home / ".bashrc").read_text()
    assert (machine.shared / "pwned").exists()
    assert (machine.elsewhere / "pwned").exists()


def sandbox_info(machine: Machine, *, network: bool = True) -> dict[str, object]:
    writable = [os.path.realpath(machine.workspace), os.path.realpath(machine.data)]
    return {"enabled": True, "writable": writable, "network": network}


# ---- pty:bash ------------------------------------------------------------------------------------


async def test_an_unconfined_terminal_agent_reaches_everything_its_user_can(
    relay: RelayProcess, machine: Machine
) -> None:
    async with (
        hosting(relay, machine, "pty:bash") as link,
        attached(link, "mallory") as mallory,
    ):
        found = await probe_terminal(mallory, machine)
        assert (await ready(mallory))["sandbox"] == {
            "enabled": False,
            "writable": [],
            "network": True,
        }
    expected = expected_unconfined(machine)
    assert {name: found[name] for name in expected} == expected
    assert found["connect"]
    assert_everything_outside_changed(machine)


async def test_a_sandboxed_terminal_agent_reaches_only_the_workspace_and_what_was_allowed(
    relay: RelayProcess, machine: Machine, bwrap: str
) -> None:
    async with (
        hosting(relay, machine, "pty:bash", *sandbox_args(machine)) as link,
        attached(link, "mallory") as mallory,
    ):
        assert (await ready(mallory))["sandbox"] == sandbox_info(machine)
        found = await probe_terminal(mallory, machine)
        said = await attach_says(link, machine)
    assert_confined(found, machine, bwrap)
    assert found["connect"]  # the network is the host's by default
    assert_nothing_outside_changed(machine)
    writable = f"{os.path.realpath(machine.workspace)}, {os.path.realpath(machine.data)}"
    assert f"the agent runs in a sandbox: it can write only in {writable}; network on" in said


async def test_sandbox_net_none_cuts_the_agent_off_even_from_loopback(
    relay: RelayProcess, machine: Machine, bwrap: str
) -> None:
    async with (
        hosting(relay, machine, "pty:bash", *sandbox_args(machine, net="none")) as link,
        attached(link, "mallory") as mallory,
    ):
        assert (await ready(mallory))["sandbox"] == sandbox_info(machine, network=False)
        found = await probe_terminal(mallory, machine)
    assert not found["connect"]
    assert_confined(found, machine, bwrap)


async def attach_says(link: str, machine: Machine) -> str:
    """What `tunnel attach` prints up to the line about the sandbox."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tunnel.cli", "attach", "--name", "tess", link],
        cwd=ROOT,
        env=dict(machine.env(), COLUMNS="500"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )

    def until_sandbox() -> str:
        lines = []
        for _ in range(20):
            lines.append(read_line(proc, timeout=WAIT))
            if "sandbox" in lines[-1]:
                break
        return "".join(lines)

    try:
        return await anyio.to_thread.run_sync(until_sandbox)
    finally:
        proc.kill()
        proc.wait(10)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


# ---- an ACP agent -------------------------------------------------------------------------------


SHELL_ACP_AGENT = ROOT / "tests" / "agents" / "shell_acp_agent.py"


def acp_agent() -> str:
    return f"acp:{sys.executable} {SHELL_ACP_AGENT}"


async def test_an_unconfined_acp_agent_and_the_commands_it_has_the_host_run_reach_everything(
    relay: RelayProcess, machine: Machine
) -> None:
    async with (
        hosting(relay, machine, acp_agent()) as link,
        attached(link, "mallory") as mallory,
    ):
        own = await probe_acp(mallory, machine, "run")
        through_host = await probe_acp(mallory, machine, "terminal")
    expected = expected_unconfined(machine)
    for found in (own, through_host):
        assert {name: found[name] for name in expected} == expected
    assert_everything_outside_changed(machine)


async def test_a_sandboxed_acp_agent_and_the_commands_it_has_the_host_run_stay_inside(
    relay: RelayProcess, machine: Machine, bwrap: str
) -> None:
    async with (
        hosting(relay, machine, acp_agent(), *sandbox_args(machine)) as link,
        attached(link, "mallory") as mallory,
    ):
        assert (await ready(mallory))["sandbox"] == sandbox_info(machine)
        own = await probe_acp(mallory, machine, "run")
        through_host = await probe_acp(mallory, machine, "terminal")
    for found in (own, through_host):
        assert_confined(found, machine, bwrap)
    assert_nothing_outside_changed(machine)


# ---- refusals before any link --------------------------------------------------------------------


def host_fails(
    relay: RelayProcess,
    machine: Machine,
    *args: str,
    env: dict[str, str],
    log_db: Path | None = None,
) -> str:
    """Run `tunnel host` expecting exit 2 before any link; return its one line of stderr."""
    log_db = log_db if log_db is not None else machine.log_db
    result = subprocess.run(
        host_command(relay, machine, *args, log_db=log_db),
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert result.returncode == EXIT_CONFIG, result.stderr
    assert "link" not in result.stdout
    assert not log_db.exists()  # nothing written, nothing registered
    [line] = result.stderr.splitlines()
    return line


async def test_without_bubblewrap_the_host_stops_and_says_how_to_install_it(
    relay: RelayProcess, machine: Machine
) -> None:
    bin_dir = machine.tmp / "bin"  # a PATH with bash but no bwrap
    bin_dir.mkdir()
    (bin_dir / "bash").symlink_to(shutil.which("bash") or "/bin/bash")
    env = dict(machine.env(), PATH=str(bin_dir))
    line = host_fails(relay, machine, "--agent", "pty:bash", "--sandbox", env=env)
    assert line == (
        "tunnel host: --sandbox needs bubblewrap (bwrap), which is not installed:"
        " sudo apt-get install bubblewrap (Fedora: sudo dnf install bubblewrap)"
    )


async def test_without_user_namespaces_the_host_stops_and_says_how_to_enable_them(
    relay: RelayProcess, machine: Machine, bwrap: str
) -> None:
    if bwrap_version(bwrap) < (0, 8):
        pytest.fail("this test needs bubblewrap 0.8 or later (--disable-userns)")
    # The host itself runs where no user namespace may be made: bwrap inside cannot start.
    outer = [bwrap, "--dev-bind", "/", "/", "--unshare-user", "--disable-userns", "--"]
    result = subprocess.run(
        [*outer, *host_command(relay, machine, "--agent", "pty:bash", "--sandbox")],
        cwd=ROOT,
        env=machine.env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert result.returncode == EXIT_CONFIG, result.stderr
    assert "link" not in result.stdout
    [line] = result.stderr.splitlines()
    assert line.startswith(
        "tunnel host: --sandbox: bubblewrap cannot make the sandbox here (bwrap:"
    )
    assert "enable them" in line
    assert not machine.log_db.exists()


async def test_a_sandbox_for_the_demo_agent_is_refused(
    relay: RelayProcess, machine: Machine
) -> None:
    line = host_fails(relay, machine, "--sandbox", env=machine.env())
    assert line == (
        "tunnel host: --sandbox needs an acp: or pty: agent; the demo agent runs no program"
    )


async def test_a_log_inside_the_workspace_is_refused_with_the_sandbox(
    relay: RelayProcess, machine: Machine
) -> None:
    inside = machine.workspace / "log.db"
    line = host_fails(
        relay, machine, "--agent", "pty:bash", "--sandbox", env=machine.env(), log_db=inside
    )
    assert f"the host's own file {os.path.realpath(inside)} is inside the workspace" in line
