"""What a sandboxed agent reaches of the machine besides its own paths: the UNIX sockets its
services listen on, what the user's supplementary groups open, and the sandbox's own command line
(docs/security.md, "What a drive link can do on the host's machine").

The test serves UNIX sockets where a real machine's services keep theirs (/run, /var/tmp,
/dev/shm, /tmp, and, when it may write there, /var/lib, which the read-only system shows): one
anyone may connect to (0666) and one only a supplementary group of the test's may (0660). A
sandboxed `pty:bash` and a sandboxed ACP agent (tests/agents/shell_acp_agent.py: its own shell
tool, and a command it has the host run through terminal/create) try each, with the host's network
and with `--sandbox-net none`: none is reached, while a socket in the workspace and one named by
`--sandbox-allow` are.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tunnel.agents import create_session
from tunnel.agents.sandbox import (
    Allowance,
    Sandbox,
    SandboxSettings,
    bwrap_argv,
    prepare_sandbox,
)
from tunnel.log import Item, Log

from .conftest import Recording, running

ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("reach_probe.py")
SHELL_ACP_AGENT = Path(__file__).with_name("shell_acp_agent.py")
REACH = re.compile(r"REACH (\w+) (yes|no \w+)")
IS_ROOT = os.geteuid() == 0
GROUP = 47_011
"""The supplementary group a test run as root gives itself: no one else's."""
OTHER_USER = 47_012
"""Owns the group's socket when the test runs as root, so that only the group opens it."""
PLACES = {"run": "/run", "var_tmp": "/var/tmp", "dev_shm": "/dev/shm", "var_lib": "/var/lib"}
"""Where a real machine's services keep sockets, besides /tmp; each is used if the test may
write there (/run and /var/lib as root only)."""
NETWORKS = pytest.mark.parametrize("network", [True, False], ids=["net-host", "net-none"])


@dataclass
class Services:
    """UNIX sockets the test listens on, by name: which the sandbox must hide, which it shows."""

    sockets: dict[str, Path] = field(default_factory=dict)
    hidden: set[str] = field(default_factory=set)
    shown: set[str] = field(default_factory=set)

    def probe_args(self) -> str:
        return " ".join(shlex.quote(f"{name}={path}") for name, path in self.sockets.items())

    def expected(self) -> dict[str, bool]:
        return {name: name in self.shown for name in self.sockets}


@pytest.fixture
def supplementary_group() -> Iterator[int | None]:
    """A supplementary group of the test's process: as root, `GROUP`, given for the test only;
    otherwise one the user has, or None if the user has none (nothing for a group to open)."""
    if not IS_ROOT:
        yield next((g for g in os.getgroups() if g != os.getgid()), None)
        return
    before = os.getgroups()
    os.setgroups([*before, GROUP])
    try:
        yield GROUP
    finally:
        os.setgroups(before)


@pytest.fixture
def services(
    tmp_path: Path, workspace: Path, supplementary_group: int | None
) -> Iterator[Services]:
    folders = [tmp_path / "sockets"]
    folders[0].mkdir()
    names = ["tmp"]
    for name, top in PLACES.items():
        if os.path.isdir(top) and os.access(top, os.W_OK):
            folders.append(Path(tempfile.mkdtemp(prefix="tunnel-test-", dir=top)))
            names.append(name)
    made = Services()
    servers: list[socket.socket] = []

    def serve(name: str, path: Path, mode: int, group: int | None = None) -> None:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        servers.append(server)
        server.bind(str(path))
        if group is not None:
            os.chown(path, OTHER_USER if IS_ROOT else -1, group)
        path.chmod(mode)
        # Never accepted: a connection completes in the backlog, and every test makes few.
        server.listen(64)
        made.sockets[name] = path

    try:
        for name, folder in zip(names, folders, strict=True):
            serve(f"{name}_open", folder / "open", 0o666)
            made.hidden.add(f"{name}_open")
            if supplementary_group is not None:
                # As root, owned by someone else: only the group opens it. (A user's own socket
                # is the user's to open anyway.)
                serve(f"{name}_group", folder / "group", 0o660, supplementary_group)
                made.hidden.add(f"{name}_group")
        serve("workspace", workspace / "service.sock", 0o666)
        # Named by --sandbox-allow, in a private directory: shown, that one socket alone.
        private = next(folders[names.index(n)] for n in ("run", "var_tmp", "tmp") if n in names)
        serve("allowed", private / "allowed", 0o666)
        made.shown |= {"workspace", "allowed"}
        shutil.copy(PROBE, workspace / "reach_probe.py")
        yield made
    finally:
        for server in servers:
            server.close()
        for folder in folders[1:]:
            shutil.rmtree(folder, ignore_errors=True)


def probe_command(services: Services) -> str:
    return f"{shlex.quote(sys.executable)} -I -S reach_probe.py {services.probe_args()}"


def answers(text: str) -> dict[str, bool]:
    return {name: said == "yes" for name, said in REACH.findall(text.replace("\r", ""))}


def make_sandbox(
    workspace: Path, services: Services, argv: list[str], *, network: bool, terminal: bool
) -> Sandbox:
    # The test's Python (the probe's, the ACP agent's) and its venv may live under /root or the
    # home directory.
    python = (f"{ROOT}:ro", f"{sys.prefix}:ro", f"{sys.base_prefix}:ro")
    allow = (*python, str(services.sockets["allowed"]))
    settings = SandboxSettings(allow=tuple(Allowance.parse(a) for a in allow), network=network)
    return prepare_sandbox(settings, argv=argv, workspace=workspace, terminal=terminal)


def test_the_test_sockets_are_served_and_reached_without_the_sandbox(
    services: Services, workspace: Path
) -> None:
    result = subprocess.run(
        [sys.executable, "-I", "-S", "reach_probe.py", *shlex.split(services.probe_args())],
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert answers(result.stdout) == dict.fromkeys(services.sockets, True)


def run_inside(
    sandbox: Sandbox, command: list[str], workspace: Path, *, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run `command` in `sandbox` from the workspace, bounded in time; its output as text."""
    return subprocess.run(
        sandbox.command(command),
        cwd=workspace,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=check,
    )


@pytest.mark.sandbox
@pytest.mark.anyio
@pytest.mark.timeout(120)
@NETWORKS
async def test_a_sandboxed_shell_reaches_no_socket_of_the_machines(
    bwrap: str, log: Log, workspace: Path, services: Services, network: bool
) -> None:
    argv = ["bash", "--norc", "--noprofile", "-i"]
    sandbox = make_sandbox(workspace, services, argv, network=network, terminal=True)
    session = create_session(
        f"pty:{shlex.join(argv)}", log, workspace=workspace, conversation_id="c1", sandbox=sandbox
    )

    def screen(rec: Recording) -> str:
        return "".join(i.data["text"] for i in rec.of_type("terminal"))

    async with running(session, log) as rec:
        await session.input((probe_command(services) + "\n").encode(), by="alice")
        await rec.wait_until(lambda: "REACH done" in screen(rec))
    assert answers(screen(rec)) == services.expected()


@pytest.mark.sandbox
@pytest.mark.anyio
@pytest.mark.timeout(120)
@NETWORKS
async def test_a_sandboxed_acp_agent_and_its_terminals_reach_no_socket_of_the_machines(
    bwrap: str, log: Log, workspace: Path, services: Services, network: bool
) -> None:
    argv = [sys.executable, str(SHELL_ACP_AGENT)]
    sandbox = make_sandbox(workspace, services, argv, network=network, terminal=False)
    session = create_session(
        f"acp:{shlex.join(argv)}", log, workspace=workspace, conversation_id="c1", sandbox=sandbox
    )

    def reply(items: list[Item]) -> str:
        return "".join(
            i.data["text"] for i in items if i.type == "message" and i.data["role"] == "agent"
        )

    async def ask(rec: Recording, how: str) -> str:
        before = len(rec.items)
        await session.prompt(f"{how}: {probe_command(services)}", by="alice")
        await rec.wait_until(lambda: "REACH done" in reply(rec.items[before:]))
        return reply(rec.items[before:])

    async with running(session, log) as rec:
        own = await ask(rec, "run")  # its own shell tool
        through_host = await ask(rec, "terminal")  # a command the host runs for it
    assert answers(own) == services.expected()
    assert answers(through_host) == services.expected()


@pytest.mark.sandbox
def test_a_host_run_as_root_leaves_its_supplementary_groups_outside(
    bwrap: str, workspace: Path, supplementary_group: int | None
) -> None:
    secret = workspace / "group-only"
    secret.write_text("the group's\n")
    if IS_ROOT:
        os.chown(secret, OTHER_USER, GROUP)
        secret.chmod(0o040)  # the group may read it; its owner, someone else, not even that
    sandbox = prepare_sandbox(SandboxSettings(), argv=["sh"], workspace=workspace)
    script = "grep '^Groups:' /proc/self/status; cat group-only 2>/dev/null || echo unreadable"
    result = run_inside(sandbox, ["/bin/sh", "-c", script], workspace)
    groups_line, said = result.stdout.splitlines()
    groups = groups_line.split()[1:]
    if IS_ROOT:
        assert groups == []
        assert said == "unreadable"
    else:
        # The kernel keeps a user's supplementary groups in a user namespace (shown as the
        # overflow group) and lets no one there drop them: docs/security.md says so.
        assert len(groups) == len(os.getgroups())


@pytest.mark.sandbox
def test_no_process_in_the_sandbox_shows_the_options_of_bwrap(
    bwrap: str, tmp_path: Path, workspace: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "host_key").write_text("key\n")
    hidden = os.path.realpath(data / "host_key")
    sandbox = prepare_sandbox(
        SandboxSettings(allow=(Allowance.parse(str(data)),)),
        argv=["sh"],
        workspace=workspace,
        hide=(data / "host_key",),
    )
    # bwrap's options name the hidden file, the private directories and the workspace.
    options = bwrap_argv(sandbox.layout(), ["sh"])
    assert hidden in options
    assert str(workspace) in options
    script = 'for f in /proc/[0-9]*/cmdline; do tr "\\0" " " < "$f"; echo; done'
    result = run_inside(sandbox, ["/bin/sh", "-c", script], workspace)
    cmdlines = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(cmdlines) >= 2  # bwrap's pid 1, the shell, and what the shell runs
    for line in cmdlines:
        for name in (hidden, str(workspace), "--ro-bind", "--tmpfs", "--unshare-all"):
            assert name not in line


@pytest.mark.sandbox
def test_the_dns_settings_stay_readable_in_the_private_run(bwrap: str, workspace: Path) -> None:
    sandbox = prepare_sandbox(SandboxSettings(), argv=["cat"], workspace=workspace)
    result = run_inside(sandbox, ["cat", "/etc/resolv.conf"], workspace, check=False)
    if os.path.exists("/etc/resolv.conf"):
        assert result.stdout == Path("/etc/resolv.conf").read_text()
