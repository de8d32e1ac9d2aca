"""The sandbox of `tunnel host --sandbox`: bubblewrap's command line (pure), the layout made from
what exists, the checks before the host starts, and terminal programs run in it."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tunnel.agents import PtySession, create_session
from tunnel.agents import sandbox as sandbox_module
from tunnel.agents.sandbox import (
    Allowance,
    Bind,
    Layout,
    Link,
    Mask,
    Sandbox,
    SandboxError,
    SandboxSettings,
    agent_allowances,
    bound_sockets,
    bwrap_argv,
    launch_argv,
    prepare_sandbox,
    sandbox_environment,
)
from tunnel.log import Log

from .conftest import Recording, running

LAYOUT = Layout(
    workspace="/home/ann/proj",
    scratch=("/tmp", "/var/tmp", "/run", "/home/ann", "/root", "/run/user/1000"),
    binds=(Bind("/home/ann/.claude", True), Bind("/opt/tools", False)),
    masks=(Mask("/home/ann/.claude/secret.json", False),),
)


def pairs(argv: list[str], option: str) -> list[str]:
    """The first argument of every `option` in argv, in order."""
    return [argv[i + 1] for i, arg in enumerate(argv) if arg == option]


def position(argv: list[str], *words: str) -> int:
    """Where the sequence `words` starts in argv."""
    for i in range(len(argv)):
        if argv[i : i + len(words)] == list(words):
            return i
    raise AssertionError(f"{words} not in {argv}")


# ---- the command line --------------------------------------------------------------------------


def test_the_system_is_read_only_and_home_tmp_and_runtime_dirs_are_private_tmpfs() -> None:
    argv = bwrap_argv(LAYOUT, ["claude"])
    root = position(argv, "--ro-bind", "/", "/")
    assert sorted(pairs(argv, "--tmpfs")[:6]) == sorted(LAYOUT.scratch)
    assert all(position(argv, "--tmpfs", p) > root for p in LAYOUT.scratch)
    # The user's runtime directory is made inside the private /run, after it.
    assert position(argv, "--tmpfs", "/run/user/1000") > position(argv, "--tmpfs", "/run")
    assert position(argv, "--dev", "/dev") > root
    assert position(argv, "--proc", "/proc") > root


def test_the_workspace_and_allowances_are_bound_after_the_tmpfs_that_hides_their_parents() -> None:
    argv = bwrap_argv(LAYOUT, ["claude"])
    home = position(argv, "--tmpfs", "/home/ann")
    workspace = position(argv, "--bind", "/home/ann/proj", "/home/ann/proj")
    assert workspace > home
    assert position(argv, "--bind", "/home/ann/.claude", "/home/ann/.claude") > home
    assert position(argv, "--ro-bind", "/opt/tools", "/opt/tools") > home
    assert argv[argv.index("--chdir") + 1] == "/home/ann/proj"


def test_a_path_inside_another_is_mounted_after_it_so_its_mode_wins() -> None:
    layout = Layout(
        workspace="/srv/code/app",
        binds=(Bind("/srv/code/app/vendor", False), Bind("/srv/code", False)),
    )
    argv = bwrap_argv(layout, ["x"])
    outer = position(argv, "--ro-bind", "/srv/code", "/srv/code")
    workspace = position(argv, "--bind", "/srv/code/app", "/srv/code/app")
    vendor = position(argv, "--ro-bind", "/srv/code/app/vendor", "/srv/code/app/vendor")
    assert outer < workspace < vendor


def test_hidden_paths_are_masked_last_and_only_where_they_would_show() -> None:
    layout = Layout(
        workspace="/srv/proj",
        scratch=("/tmp", "/home/ann"),
        binds=(Bind("/home/ann/.config", False),),
        masks=(
            Mask("/home/ann/.config/agent-tunnel", True),  # inside an allowance: masked
            Mask("/srv/proj/log.db", False),  # inside the workspace: masked
            Mask("/etc/shadow", False),  # on the read-only root: masked
            Mask("/home/ann/.ssh/id_ed25519", False),  # in a private tmpfs: not even named
            Mask("/tmp/host_key", False),
        ),
    )
    argv = bwrap_argv(layout, ["x"])
    last_bind = position(argv, "--ro-bind", "/home/ann/.config", "/home/ann/.config")
    assert position(argv, "--tmpfs", "/home/ann/.config/agent-tunnel") > last_bind
    assert position(argv, "--ro-bind", "/dev/null", "/srv/proj/log.db") > last_bind
    assert "/etc/shadow" in pairs(argv, "/dev/null")
    assert "/home/ann/.ssh/id_ed25519" not in argv
    assert "/tmp/host_key" not in argv


def test_no_namespace_is_shared_but_the_network_and_no_privilege_is_kept() -> None:
    argv = bwrap_argv(LAYOUT, ["claude"])
    for flag in ("--unshare-all", "--unshare-user", "--die-with-parent", "--new-session"):
        assert flag in argv
    assert "--disable-userns" in argv
    assert position(argv, "--cap-drop", "ALL") >= 0
    assert "--share-net" in argv
    assert "--share-net" not in bwrap_argv(LAYOUT, ["claude"], network=False)
    assert "--disable-userns" not in bwrap_argv(LAYOUT, ["claude"], disable_userns=False)


def test_the_command_comes_last_and_a_terminal_program_gets_its_pty_back() -> None:
    argv = bwrap_argv(LAYOUT, ["claude", "--flag"], bwrap="/usr/bin/bwrap")
    assert argv[0] == "/usr/bin/bwrap"
    assert argv[-3:] == ["--", "claude", "--flag"]
    terminal = bwrap_argv(LAYOUT, ["bash"], terminal=True, setsid="/usr/bin/setsid")
    assert terminal[-5:] == ["--", "/usr/bin/setsid", "--wait", "--ctty", "bash"]


def test_a_command_the_host_runs_for_the_agent_starts_where_it_asked() -> None:
    argv = bwrap_argv(LAYOUT, ["ls"], cwd="/home/ann/proj/src")
    assert argv[argv.index("--chdir") + 1] == "/home/ann/proj/src"


# ---- allowances and defaults -------------------------------------------------------------------


def test_an_allowance_is_writable_unless_it_says_ro() -> None:
    assert Allowance.parse("/opt/x") == Allowance(path="/opt/x", writable=True)
    assert Allowance.parse("/opt/x:ro") == Allowance(path="/opt/x", writable=False)
    assert Allowance.parse("/opt/x:rw") == Allowance(path="/opt/x", writable=True)
    assert Allowance.parse("~/.npm:ro", home="/home/ann").path == "/home/ann/.npm"
    assert Allowance.parse("/opt/x/../y/").path == "/opt/y"
    assert Allowance.parse("rel", home="/h").path == os.path.join(os.getcwd(), "rel")
    assert str(Allowance.parse("/opt/x:ro")) == "/opt/x:ro"
    with pytest.raises(ValueError, match="names no path"):
        Allowance.parse(":ro")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["claude"],
            {"~/.claude", "~/.claude.json", "~/.local/bin/claude:ro", "~/.local/share/claude:ro"},
        ),
        (["/usr/local/bin/gemini", "--experimental-acp"], {"~/.gemini"}),
        (
            ["npx", "-y", "@zed-industries/claude-code-acp@0.5"],
            {"~/.npm:ro", "~/.claude", "~/.claude.json"},
        ),
        (["npx", "@google/gemini-cli", "--experimental-acp"], {"~/.npm:ro", "~/.gemini"}),
        (["codex"], {"~/.codex"}),
        (["/opt/agents/node_modules/.bin/codex-acp"], {"~/.codex"}),
        (["npx", "@zed-industries/codex-acp@0.16.0"], {"~/.npm:ro", "~/.codex"}),
        (["qwen", "--acp"], {"~/.qwen"}),
        (["npx", "@qwen-code/qwen-code", "--acp"], {"~/.npm:ro", "~/.qwen"}),
        (["bash"], set()),
    ],
)
def test_each_known_agent_gets_its_own_config_by_default(
    argv: list[str], expected: set[str]
) -> None:
    got = {str(a).replace("/home/ann", "~") for a in agent_allowances(argv, home="/home/ann")}
    assert got == expected


def test_the_environment_keeps_api_keys_but_not_the_hosts_settings_or_agent_sockets() -> None:
    env = {
        "ANTHROPIC_API_KEY": "sk-1",
        "PATH": "/usr/bin",
        "TUNNEL_HOST_KEY_FILE": "/k",
        "TUNNEL_ATTACH_LINK": "https://r/h/x#drive.s",
        "SSH_AUTH_SOCK": "/run/user/1000/ssh",
    }
    assert sandbox_environment(env) == {"ANTHROPIC_API_KEY": "sk-1", "PATH": "/usr/bin"}


# ---- the layout made from what exists ------------------------------------------------------------

RUN = os.path.realpath("/run")


def users(entries: tuple[Bind, ...] | tuple[Link, ...]) -> list[Bind | Link]:
    """`entries` without what the private /run keeps of the host's (`test_the_private_run_...`)."""
    return [e for e in entries if not e.path.startswith(RUN + "/")]


def test_the_layout_shows_and_hides_only_what_exists(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / "host_key").write_text("key")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    sandbox = Sandbox(
        workspace=str(workspace),
        home=str(home),
        allow=(
            Allowance(path=str(home / ".claude")),
            Allowance(path=str(home / ".claude.json")),  # missing: left out
            Allowance(path=str(tmp_path), writable=False),
        ),
        hide=(str(home / ".claude" / "host_key"), str(tmp_path / "never-made.db")),
    )
    layout = sandbox.layout()
    assert layout.scratch[0] == "/tmp"
    # A home inside /tmp needs no tmpfs of its own: the one over /tmp hides it.
    assert (str(home) in layout.scratch) == (not str(home).startswith("/tmp/"))
    assert [b.path for b in users(layout.binds)] == [str(home / ".claude"), str(tmp_path)]
    assert Mask(str(home / ".claude" / "host_key"), False) in layout.masks
    assert all("never-made" not in m.path for m in layout.masks)
    assert sandbox.writable == (str(workspace), str(home / ".claude"))


def test_an_allowance_named_through_a_symbolic_link_is_bound_where_it_really_is(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    dotfiles = tmp_path / "dotfiles" / "claude"
    dotfiles.mkdir(parents=True)
    (dotfiles / "host_key").write_text("key")  # a hidden file, reached through the link
    home.mkdir()
    (home / ".claude").symlink_to(dotfiles)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    sandbox = Sandbox(
        workspace=str(workspace),
        home=str(home),
        allow=(Allowance(path=str(home / ".claude")),),
        hide=(str(dotfiles / "host_key"),),
    )
    layout = sandbox.layout()
    real = os.path.realpath(dotfiles)
    assert users(layout.binds) == [Bind(real, True)]
    # The name lies in the private home: a link there leads to the real place.
    assert users(layout.links) == [Link(os.path.realpath(home) + "/.claude", real)]
    argv = bwrap_argv(layout, ["claude"])
    link = position(argv, "--symlink", real, os.path.realpath(home) + "/.claude")
    assert position(argv, "--bind", real, real) < link
    # The hidden file is masked where the bind shows it.
    assert position(argv, "--ro-bind", "/dev/null", os.path.join(real, "host_key")) > link


def test_bound_sockets_are_the_paths_of_the_socket_table(tmp_path: Path) -> None:
    table = tmp_path / "unix"
    table.write_bytes(
        b"Num       RefCount Protocol Flags    Type St Inode Path\n"
        b"0000000000000000: 00000002 00000000 00010000 0001 01 32623 /run/dbus/system_bus_socket\n"
        b"0000000000000000: 00000003 00000000 00000000 0001 03 25323\n"  # unnamed
        b"0000000000000000: 00000002 00000000 00010000 0001 01 24218 @/tmp/.X11-unix/X0\n"
        b"0000000000000000: 00000002 00000000 00010000 0001 01 24219 /srv/my app/sock\n"
        b"0000000000000000: 00000002 00000000 00010000 0005 01 24220 /run/dbus/system_bus_socket\n"
    )
    assert bound_sockets(str(table)) == ["/run/dbus/system_bus_socket", "/srv/my app/sock"]
    assert bound_sockets(str(tmp_path / "missing")) == []


def serve(path: Path) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    return server


@pytest.fixture
def system_shows_tmp(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test's directory (under /tmp) stands for a place the read-only system shows."""
    monkeypatch.setattr(sandbox_module, "PRIVATE_DIRS", ())


def test_a_socket_only_the_system_shows_is_masked_but_not_in_the_workspace_or_an_allowance(
    tmp_path: Path, system_shows_tmp: None
) -> None:
    for folder in ("ws", "data", "elsewhere", "home", "named"):
        (tmp_path / folder).mkdir()
    (tmp_path / "via").symlink_to(tmp_path / "elsewhere")
    sandbox = Sandbox(
        workspace=str(tmp_path / "ws"),
        home=str(tmp_path / "home"),
        allow=(
            Allowance(path=str(tmp_path / "data"), writable=False),
            Allowance(path=str(tmp_path / "named" / "db.sock")),
        ),
    )
    places = ("elsewhere/s", "via/t", "ws/s", "data/s", "home/s", "named/db.sock", "named/other")
    servers = [serve(tmp_path / place) for place in places]
    stale = tmp_path / "elsewhere" / "stale"
    serve(stale).close()  # a socket file no one listens on: nothing to reach
    shm = tempfile.mkdtemp(dir="/dev/shm") if os.access("/dev/shm", os.W_OK) else None
    if shm is not None:
        servers.append(serve(Path(shm) / "s"))  # the sandbox's /dev is a new one
    try:
        masked = {m.path for m in sandbox.layout().masks}
    finally:
        for server in servers:
            server.close()
        if shm is not None:
            shutil.rmtree(shm)
    assert not any(path.startswith("/dev/") for path in masked)
    real = os.path.realpath(tmp_path)
    assert {
        f"{real}/elsewhere/s",
        f"{real}/elsewhere/t",  # bound through a link: masked where it really is
        f"{real}/named/other",  # beside an allowance, not in one
    } <= masked
    # The workspace's and an allowance's are the agent's to reach, the home's are hidden anyway,
    # and one named by --sandbox-allow is shown.
    for place in ("ws/s", "data/s", "home/s", "named/db.sock", "elsewhere/stale"):
        assert f"{real}/{place}" not in masked


def test_the_private_run_keeps_the_files_etc_links_into_it_and_its_links(tmp_path: Path) -> None:
    etc, run = tmp_path / "etc", tmp_path / "run"
    stub = run / "systemd" / "resolve" / "stub-resolv.conf"
    stub.parent.mkdir(parents=True)
    stub.write_text("nameserver 127.0.0.53\n")
    (run / "dir").mkdir()
    etc.mkdir()
    (etc / "resolv.conf").symlink_to(stub)
    (etc / "dir").symlink_to(run / "dir")  # a directory: not kept
    (etc / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")  # not a link
    (etc / "localtime").symlink_to(tmp_path / "zoneinfo")  # not into /run
    (tmp_path / "zoneinfo").write_text("UTC\n")
    with serve(run / "socket"):
        (etc / "socket").symlink_to(run / "socket")  # not a regular file
        real_run = os.path.realpath(run)
        kept = sandbox_module._linked_from_etc([real_run], etc=str(etc))
    assert kept == [os.path.realpath(stub)]
    (run / "current-system").symlink_to("/nix/store/abc-system")
    assert sandbox_module._links_in(str(run)) == [
        Link(str(run / "current-system"), "/nix/store/abc-system")
    ]


def test_the_launcher_hands_bwrap_its_options_through_a_file_descriptor(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text('#!/bin/sh\nprintf "argv:%s\\n" "$@"\ntr "\\0" "\\n" < "/proc/self/fd/$2"\n')
    fake.chmod(0o755)
    options = ["--ro-bind", "/dev/null", "/srv/with space/secret", "--chdir", "--"]
    argv = launch_argv(str(fake), options, ["prog", "an arg"])
    assert argv[:4] == [sys.executable, "-I", "-S", "-c"]
    said = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30).stdout
    lines = said.splitlines()
    fd = lines[1].removeprefix("argv:")
    assert lines[:5] == ["argv:--args", f"argv:{fd}", "argv:--", "argv:prog", "argv:an arg"]
    assert lines[5:] == options  # "--" as an option's value stays one
    missing = launch_argv(str(tmp_path / "nope"), options, ["prog"])
    failed = subprocess.run(missing, capture_output=True, text=True, check=False, timeout=30)
    assert failed.returncode == 127
    assert "nope: No such file or directory" in failed.stderr


# ---- checks before the host starts ---------------------------------------------------------------


def prepare(
    workspace: Path,
    *allow: str,
    argv: tuple[str, ...] = ("sh",),
    hide: tuple[Path, ...] = (),
    home: str | None = None,
) -> Sandbox:
    settings = SandboxSettings(allow=tuple(Allowance.parse(a) for a in allow))
    return prepare_sandbox(settings, argv=list(argv), workspace=workspace, hide=hide, home=home)


def test_another_platform_is_refused_with_what_to_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    with pytest.raises(SandboxError, match=r"--sandbox needs Linux .*on darwin"):
        prepare(tmp_path)


def test_missing_bubblewrap_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SandboxError, match=r"not installed: sudo apt-get install bubblewrap"):
        prepare(tmp_path)


def test_bubblewrap_without_user_namespaces_says_how_to_enable_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # What bwrap says where unprivileged user namespaces are off (Debian before 11).
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --version ]; then echo "bubblewrap 0.8.0"; exit 0; fi\n'
        "echo 'bwrap: No permissions to creating new namespace, likely because the kernel"
        " does not allow non-privileged user namespaces.' >&2\n"
        "exit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:/usr/bin:/bin")
    with pytest.raises(SandboxError) as error:
        prepare(tmp_path)
    message = str(error.value)
    assert "bubblewrap cannot make the sandbox here (bwrap: No permissions" in message
    assert "kernel.unprivileged_userns_clone=1" in message
    assert "\n" not in message


def test_a_workspace_that_holds_the_home_directory_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with pytest.raises(SandboxError, match="holds your home directory"):
        prepare(home, home=str(home))
    with pytest.raises(SandboxError, match="holds your home directory"):
        prepare(Path("/"), home=str(home))


def test_an_allowance_must_exist_and_must_not_show_the_whole_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    workspace = home / "proj"
    workspace.mkdir(parents=True)
    with pytest.raises(SandboxError, match="no such file or directory"):
        prepare(workspace, str(tmp_path / "nope"), home=str(home))
    with pytest.raises(SandboxError, match="would show your whole home directory"):
        prepare(workspace, f"{tmp_path}:ro", home=str(home))


def test_the_hosts_own_files_may_not_live_in_the_workspace(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with pytest.raises(SandboxError, match=r"host's own file .*log\.db is inside the workspace"):
        prepare(workspace, hide=(workspace / "log.db",), home=str(tmp_path / "home"))


@pytest.mark.sandbox
def test_a_program_the_sandbox_hides_is_named_with_the_allowance_that_shows_it(
    bwrap: str, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    tool = home / "tools" / "bin" / "agent"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\necho hi\n")
    tool.chmod(0o755)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with pytest.raises(SandboxError) as error:
        prepare(workspace, argv=(str(tool),), home=str(home))
    assert "is hidden inside the sandbox; show its installation read-only, e.g." in str(error.value)
    assert f"--sandbox-allow {home / 'tools'}:ro" in str(error.value)
    # With that allowance it starts.
    sandbox = prepare(workspace, f"{home / 'tools'}:ro", argv=(str(tool),), home=str(home))
    assert sandbox.bwrap == bwrap


# ---- terminal programs in the sandbox ------------------------------------------------------------


def sandboxed_pty(log: Log, workspace: Path, command: str) -> PtySession:
    sandbox = prepare_sandbox(
        SandboxSettings(), argv=shlex.split(command), workspace=workspace, terminal=True
    )
    session = create_session(
        f"pty:{command}", log, workspace=workspace, conversation_id="c1", sandbox=sandbox
    )
    assert isinstance(session, PtySession)
    assert session.sandbox is sandbox
    return session


def output(rec: Recording) -> str:
    return "".join(i.data["text"] for i in rec.of_type("terminal")).replace("\r", "")


@pytest.mark.sandbox
@pytest.mark.anyio
@pytest.mark.timeout(90)
async def test_a_sandboxed_shell_keeps_its_terminal_job_control_and_exit_code(
    bwrap: str, log: Log, workspace: Path
) -> None:
    session = sandboxed_pty(log, workspace, "bash --norc --noprofile -i")
    async with running(session, log) as rec:
        # The '' keep each marker out of the echo of the typed line.
        await session.input(b"tty -s && echo has-''a-tty; echo pid-''$$\n", by="alice")
        await rec.wait_until(lambda: re.search(r"pid-(\d+)", output(rec)) is not None)
        assert "has-a-tty" in output(rec)
        # Its own pid namespace: it sees none of the host's processes.
        match = re.search(r"pid-(\d+)", output(rec))
        assert match is not None
        assert int(match.group(1)) < 10
        # Ctrl-C reaches the foreground job, not the sandbox: the shell lives on.
        await session.input(b"echo sl''eeping; sleep 60\n", by="alice")
        await rec.wait_until(lambda: "sleeping" in output(rec))
        await session.cancel(by="alice")
        await session.input(b"echo status-''$?\n", by="alice")
        await rec.wait_until(lambda: "status-130" in output(rec))
        await session.input(b"exit 7\n", by="alice")
        exit_item = await rec.wait_item("terminal_exit")
        assert exit_item.data["code"] == 7


@pytest.mark.anyio
async def test_the_demo_agent_cannot_be_sandboxed(log: Log, workspace: Path) -> None:
    sandbox = Sandbox(workspace=str(workspace), home="/nonexistent")
    with pytest.raises(ValueError, match="needs an acp: or pty: agent"):
        create_session("demo", log, workspace=workspace, conversation_id="c1", sandbox=sandbox)
