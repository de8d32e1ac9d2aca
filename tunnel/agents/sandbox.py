"""The Linux sandbox of `tunnel host --sandbox`: the bubblewrap command line an agent's process
runs under, and the checks, made before the host registers, that it can run on this machine.

`bwrap_argv` is pure: it turns a `Layout` (what the agent sees, what it may write, what is
hidden) into bwrap's arguments. `Sandbox.command` makes the layout from what exists on disk each
time the agent starts (the machine's UNIX sockets included) and hands bwrap its arguments
through a file descriptor; `prepare_sandbox` refuses, in one line, to go on without a working
sandbox. docs/agents.md ("The sandbox") and docs/security.md say what it stops and what not.
"""

from __future__ import annotations

import errno
import glob
import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "AGENT_PATHS",
    "SYSTEM_SECRETS",
    "Allowance",
    "Bind",
    "HiddenFiles",
    "Layout",
    "Link",
    "Mask",
    "Sandbox",
    "SandboxError",
    "SandboxSettings",
    "agent_allowances",
    "bound_sockets",
    "bwrap_argv",
    "bwrap_version",
    "host_private_paths",
    "launch_argv",
    "prepare_sandbox",
    "sandbox_environment",
]

AGENT_PATHS: Mapping[str, tuple[str, ...]] = {
    "claude": ("~/.claude", "~/.claude.json", "~/.local/bin/claude:ro", "~/.local/share/claude:ro"),
    "claude-agent-acp": ("~/.claude", "~/.claude.json"),
    "claude-code-acp": ("~/.claude", "~/.claude.json"),
    "gemini": ("~/.gemini",),
    "gemini-cli": ("~/.gemini",),
    "codex": ("~/.codex",),
    "codex-acp": ("~/.codex",),
    "qwen": ("~/.qwen",),
    "qwen-code": ("~/.qwen",),
    "npx": ("~/.npm:ro",),
}
"""The paths under the home directory each agent gets by default (`:ro`: read-only), by program
name or, after a launcher (npx, pnpx, bunx, uvx), by package name without scope or version. They
are where these agents keep their settings, login and (Claude Code's native installer) their
program; the table is docs/agents.md's. A path that does not exist when the agent starts is
left out."""

LAUNCHERS = frozenset({"npx", "pnpx", "bunx", "uvx"})
"""Programs that run a package named by their first argument: the package names the agent."""

SYSTEM_SECRETS = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/ssh/ssh_host_*key",
    "/etc/ssl/private",
)
"""Hidden in every sandbox (glob patterns). A host running as root stays root-owned inside, so
root-only files are readable unless hidden here. (/run, with /run/secrets and the Docker
socket, is private: `PRIVATE_DIRS`.)"""

MAX_HIDDEN_DIR_ENTRIES = 256
"""Files of a hidden directory whose hard links `HiddenFiles` knows, at most."""


class HiddenFiles:
    """The host's private files (`host_private_paths`, a sandbox's `hide`) and the system's
    secrets (`SYSTEM_SECRETS`): what the host never shows nor hands to an agent from the
    workspace, by path or by another name (a hard link)."""

    def __init__(self, paths: Iterable[Path | str] = ()) -> None:
        self._paths = tuple(str(path) for path in paths)

    def hides_fd(self, fd: int) -> bool:
        """Whether the file opened as `fd` is hidden: the file as opened, not its name, which
        a rename since cannot change."""
        return self.hides(os.readlink(f"/proc/self/fd/{fd}"), os.fstat(fd))

    def hides(self, real: str, info: os.stat_result) -> bool:
        """Whether the file at real path `real` with `info` is a hidden path, is inside one, or
        is one by another name (a hard link): checked by path and by (device, inode)."""
        hidden = [*self._paths, *(p for pattern in SYSTEM_SECRETS for p in glob.glob(pattern))]
        identity = (info.st_dev, info.st_ino)
        for path in hidden:
            top = os.path.realpath(path)
            if real == top or real.startswith(top.rstrip("/") + "/"):
                return True
            if identity in _files_of(top):
                return True
        return False


def _files_of(path: str) -> list[tuple[int, int]]:
    """(device, inode) of `path`, and of the files directly in it when it is a directory."""
    try:
        info = os.stat(path)
    except OSError:
        return []
    found = [(info.st_dev, info.st_ino)]
    if stat.S_ISDIR(info.st_mode):
        try:
            with os.scandir(path) as entries:
                for count, entry in enumerate(entries):
                    if count >= MAX_HIDDEN_DIR_ENTRIES:
                        break
                    try:
                        one = entry.stat(follow_symlinks=False)
                    except OSError as exc:
                        if exc.errno != errno.ENOENT:
                            raise
                        continue
                    found.append((one.st_dev, one.st_ino))
        except OSError:
            pass
    return found


RUN_DIRS = ("/run", "/var/run")
"""Where the machine's services keep their UNIX sockets and runtime state (/var/run is most
often a link to /run): private, but for what `Sandbox.layout` keeps of it."""

# Replaced, not used: S108 is about temporary files.
PRIVATE_DIRS = ("/tmp", "/var/tmp", *RUN_DIRS)  # noqa: S108
"""System directories replaced by an empty, private tmpfs, as the home directory and /root are:
where programs leave temporary files and where the machine's services keep their UNIX sockets
(the system and session D-Bus, journald, databases, Docker, libvirt, X11 under /tmp). /dev/shm
is private too: bwrap's /dev is a new one."""

SOCKET_TABLE = "/proc/net/unix"
"""The UNIX sockets of the host's network namespace, with the path each is bound to."""

HIDDEN_ENV = frozenset({"SSH_AUTH_SOCK", "SSH_AGENT_PID", "GPG_AGENT_INFO"})
"""Variables not passed to a sandboxed agent (besides TUNNEL_*): the agents they name are
hidden anyway, and a program should not go looking for them."""

PROBE_TIMEOUT = 20.0
"""Seconds the check run of bubblewrap may take before the host gives up on it."""

_PROGRAM_MISSING = 97
_SETSID_MISSING = 98
# $1: the program, as the agent's process will look it up (a builtin has no path); $2: setsid.
_PROBE = (
    f'p=$(command -v "$1") || exit {_PROGRAM_MISSING}\n'
    f'case $p in */*) [ -x "$p" ] || exit {_PROGRAM_MISSING} ;; esac\n'
    f'if [ -n "$2" ] && [ ! -x "$2" ]; then exit {_SETSID_MISSING}; fi\n'
)

_USERNS_HINT = (
    "user namespaces are unavailable to you; enable them"
    " (sudo sysctl -w kernel.unprivileged_userns_clone=1 on Debian,"
    " user.max_user_namespaces=15000 if it is 0,"
    " kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu 23.10 and later)"
)


class SandboxError(ValueError):
    """`--sandbox` cannot be honoured here: not Linux, no bubblewrap, no user namespaces, an
    allowance that is missing or would show the whole home directory, a workspace that holds the
    home directory or the host's own files, or an agent program the sandbox hides. The user's to
    fix; said in one line, and the host stops rather than run the agent unconfined."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Allowance:
    """A host path the sandboxed agent sees at the same place: `--sandbox-allow PATH[:ro]`."""

    path: str
    """Absolute, `~` expanded, symlinks kept (the agent looks for it where the user named it)."""
    writable: bool = True

    @classmethod
    def parse(cls, text: str, *, home: str | None = None) -> Allowance:
        """`PATH`, `PATH:rw` or `PATH:ro`; `~` is the home directory, a relative path is taken
        from the current directory. ValueError for an empty path."""
        path, writable = text, True
        if text.endswith((":ro", ":rw")):
            path, writable = text[:-3], text.endswith(":rw")
        if not path:
            raise ValueError(f"{text!r} names no path: use PATH or PATH:ro")
        if path == "~" or path.startswith("~/"):
            path = (home if home is not None else os.path.expanduser("~")) + path[1:]
        return cls(path=os.path.normpath(os.path.abspath(path)), writable=writable)

    def __str__(self) -> str:
        return self.path if self.writable else f"{self.path}:ro"


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxSettings:
    """What the host user chose: `--sandbox-allow` and `--sandbox-net`."""

    allow: tuple[Allowance, ...] = ()
    """Host paths shown to the agent besides the workspace and its defaults (`AGENT_PATHS`)."""
    network: bool = True
    """Share the host's network (agents call their model's API); False: only a private
    loopback (`--sandbox-net none`)."""


class Bind(NamedTuple):
    """A host path shown at the same place inside."""

    path: str
    writable: bool


class Link(NamedTuple):
    """A symbolic link made inside, at `path`, to `target`: an allowance named through a
    symbolic link (a dotfile kept elsewhere) is bound at its real path and found at its name;
    the links directly in the host's /run are made again in the private one (NixOS keeps its
    system there: /run/current-system)."""

    path: str
    target: str


class Mask(NamedTuple):
    """A host path hidden inside: a file (or a UNIX socket) becomes /dev/null, a directory an
    empty tmpfs."""

    path: str
    is_dir: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """What the agent's filesystem is made of, in the order bwrap mounts it: the host's root
    read-only, `scratch` over it, `workspace` and `binds` over that, then `links`, `masks` last.
    Every path but a link's is a real path (no symbolic link in it)."""

    workspace: str
    """Writable; the agent starts in it."""
    scratch: tuple[str, ...] = ()
    """Directories replaced by an empty, private, writable tmpfs (`PRIVATE_DIRS`, the home
    directory, /root, the user's /run/user/UID inside the private /run); what the agent writes
    there is gone when it exits. One inside another is mounted after it."""
    binds: tuple[Bind, ...] = ()
    """Existing host paths shown at the same place; deeper paths win over the ones above."""
    links: tuple[Link, ...] = ()
    masks: tuple[Mask, ...] = ()
    """Existing host paths hidden wherever they are, even inside the workspace or a bind."""


def bwrap_argv(
    layout: Layout,
    command: Sequence[str],
    *,
    bwrap: str = "bwrap",
    network: bool = True,
    disable_userns: bool = True,
    terminal: bool = False,
    setsid: str = "setsid",
    cwd: str | None = None,
) -> list[str]:
    """The command line that runs `command`, in `cwd` (default: the workspace), in a sandbox
    laid out by `layout`: bwrap, its options, `--`, the program.

    Every namespace is new (user, pid, ipc, uts, cgroup, and network unless `network`); the
    process has no capabilities, bwrap sets no_new_privs (so setuid programs do not raise it),
    and, with `disable_userns` (bwrap 0.8+), it cannot make user namespaces of its own. It runs
    in a new session, with no controlling terminal it could inject keystrokes into; a `terminal`
    program gets its pseudo-terminal back as controlling terminal through util-linux `setsid
    --ctty`, so job control and Ctrl-C work. It dies with the host.
    """
    options = _bwrap_options(layout, network=network, disable_userns=disable_userns, cwd=cwd)
    return [bwrap, *options, "--", *_program(command, terminal=terminal, setsid=setsid)]


def _program(command: Sequence[str], *, terminal: bool, setsid: str) -> list[str]:
    return [setsid, "--wait", "--ctty", *command] if terminal else list(command)


def _bwrap_options(
    layout: Layout, *, network: bool, disable_userns: bool, cwd: str | None
) -> list[str]:
    args = ["--die-with-parent", "--unshare-all", "--unshare-user"]
    if network:
        args.append("--share-net")
    if disable_userns:
        args.append("--disable-userns")
    args += ["--new-session", "--cap-drop", "ALL"]
    args += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    # Stable sorts: a path inside another is mounted after it (the user's /run/user/UID inside
    # the private /run), so the inner one wins.
    for path in sorted(layout.scratch, key=_depth):
        args += ["--tmpfs", path]
    binds = sorted([Bind(layout.workspace, True), *layout.binds], key=lambda b: _depth(b.path))
    for bind in binds:
        args += ["--bind" if bind.writable else "--ro-bind", bind.path, bind.path]
    for link in layout.links:
        args += ["--symlink", link.target, link.path]
    for mask in layout.masks:
        if _visible(mask.path, layout.scratch, binds):
            args += ["--tmpfs", mask.path] if mask.is_dir else ["--ro-bind", "/dev/null", mask.path]
    return [*args, "--chdir", cwd if cwd is not None else layout.workspace]


# Run by the host's Python in place of bwrap, and replaced by it at once; its arguments: bwrap,
# how many of the rest are bwrap's options, the options, then `--` and the program. It drops the
# supplementary groups where the kernel lets it (a host run as root: they would open what those
# groups may inside; a normal user's stay, see docs/security.md), and hands bwrap its options in
# an in-memory file (`--args FD`, read and closed by bwrap) so that they are in no process's
# /proc/N/cmdline: the sandbox's pid 1 is a copy of bwrap.
_LAUNCHER = (
    "import os, sys\n"
    "try:\n"
    "    os.setgroups([])\n"
    "except PermissionError:\n"
    "    pass\n"
    "bwrap, count, *rest = sys.argv[1:]\n"
    "options, program = rest[: int(count)], rest[int(count) :]\n"
    "fd = os.memfd_create('bwrap-args', 0)\n"
    "data = b''.join(os.fsencode(option) + b'\\0' for option in options)\n"
    "while data:\n"
    "    data = data[os.write(fd, data) :]\n"
    "os.lseek(fd, 0, os.SEEK_SET)\n"
    "os.set_inheritable(fd, True)\n"
    "try:\n"
    "    os.execv(bwrap, [bwrap, '--args', str(fd), *program])\n"
    "except OSError as exc:\n"
    "    sys.stderr.write(f'{bwrap}: {exc.strerror}\\n')\n"
    "    os._exit(127)\n"
)


def launch_argv(
    bwrap: str, options: Sequence[str], program: Sequence[str], *, python: str = sys.executable
) -> list[str]:
    """The command that runs bwrap with `options` (`bwrap_argv`'s, between bwrap and `--`) and
    `program`, through `_LAUNCHER`."""
    return [python, "-I", "-S", "-c", _LAUNCHER, bwrap, str(len(options)), *options, "--", *program]


def _depth(path: str) -> int:
    return len([part for part in path.split("/") if part])


def _under(path: str, top: str) -> bool:
    return top == "/" or path == top or path.startswith(top.rstrip("/") + "/")


def _visible(path: str, scratch: Sequence[str], binds: Sequence[Bind]) -> bool:
    """Whether `path` shows a host file inside: the last mount covering it is not a tmpfs.

    A hidden path in a scratch directory is not masked at all: masking would make its name
    appear in the empty tmpfs."""
    visible = True  # the host's root, read-only
    for top in scratch:
        if _under(path, top):
            visible = False
    for bind in binds:
        if _under(path, bind.path):
            visible = True
    return visible


def bound_sockets(table: str = SOCKET_TABLE) -> list[str]:
    """The paths UNIX sockets are bound to, as `table` (/proc/net/unix: those of the host's
    network namespace) lists them: its last column, where it starts with `/` (an abstract
    socket's starts with `@`, an unnamed one has none). [] if it cannot be read."""
    try:
        with open(table, "rb") as file:
            lines = file.read().splitlines()[1:]
    except OSError:
        return []
    paths = []
    for line in lines:
        fields = line.split(None, 7)
        if len(fields) == 8 and fields[7].startswith(b"/"):
            paths.append(os.fsdecode(fields[7]))
    return list(dict.fromkeys(paths))


def _system_sockets(scratch: Sequence[str], binds: Sequence[Bind]) -> list[str]:
    """The real paths of the bound sockets that only the read-only system would show: each is
    masked. One in a private directory (or /dev, which is new) is gone anyway; one in the
    workspace or an allowance is the agent's to reach (its own, or one the user chose to show)."""
    found = []
    for path in bound_sockets():
        real = os.path.realpath(path)
        try:
            is_socket = stat.S_ISSOCK(os.stat(real).st_mode)
        except OSError:
            continue  # gone, or where the host user (and so the agent) cannot look
        covered = [top for top in (*scratch, "/dev") if _under(real, top)]  # bwrap's own /dev
        covered += [bind.path for bind in binds if _under(real, bind.path)]
        if is_socket and not covered:
            found.append(real)
    return found


def _linked_from_etc(run: Sequence[str], *, etc: str = "/etc") -> list[str]:
    """The regular files in `run` (the host's /run) that a symbolic link directly in `etc` leads
    to: kept, read-only, in the private /run. /etc/resolv.conf is one where systemd-resolved,
    resolvconf or NetworkManager manage DNS."""
    try:
        entries = list(os.scandir(etc))
    except OSError:
        return []
    found = []
    for entry in entries:
        if entry.is_symlink():
            real = os.path.realpath(entry.path)
            if any(_under(real, top) for top in run) and os.path.isfile(real):
                found.append(real)
    return sorted(set(found))


def _links_in(top: str) -> list[Link]:
    """The symbolic links directly in `top` (the host's /run), to be made again in the private
    one: a link only names a path, which leads inside to what the sandbox shows there."""
    try:
        entries = list(os.scandir(top))
    except OSError:
        return []
    links = []
    for entry in entries:
        if entry.is_symlink():
            try:
                links.append(Link(entry.path, os.readlink(entry.path)))
            except OSError:
                continue
    return links


def agent_allowances(argv: Sequence[str], *, home: str) -> tuple[Allowance, ...]:
    """The `AGENT_PATHS` defaults for the agent run by `argv`."""
    if not argv:
        return ()
    names = [os.path.basename(argv[0])]
    if names[0] in LAUNCHERS:
        package = next((arg for arg in argv[1:] if not arg.startswith("-")), None)
        if package is not None:
            names.append(_package_name(package))
    paths = [path for name in names for path in AGENT_PATHS.get(name, ())]
    return tuple(Allowance.parse(path, home=home) for path in dict.fromkeys(paths))


def _package_name(package: str) -> str:
    """`@scope/name@1.2` -> `name`."""
    name = package.rsplit("/", 1)[-1]
    return name.split("@", 1)[0] or name


def host_private_paths(
    *,
    key_file: Path,
    secrets_file: Path,
    log_db: Path,
    invitations_file: Path | None = None,
    others: tuple[Path, ...] = (),
) -> tuple[Path, ...]:
    """The host's own files, hidden from every sandboxed agent: its key, its share secrets and
    personal links, the conversation log with SQLite's companion files, agent-tunnel's config
    and data directories, and `others` (the push key and subscriptions)."""
    import platformdirs

    paths = [key_file, secrets_file, log_db, *others]
    if invitations_file is not None:
        paths.append(invitations_file)
    paths += [log_db.with_name(log_db.name + suffix) for suffix in ("-wal", "-shm", "-journal")]
    paths += [
        platformdirs.user_config_path("agent-tunnel"),
        platformdirs.user_data_path("agent-tunnel"),
    ]
    return tuple(paths)


def sandbox_environment(env: Mapping[str, str]) -> dict[str, str]:
    """`env` without the host's own settings (TUNNEL_*) and the agent sockets of `HIDDEN_ENV`.

    Everything else passes, model API keys included: the agent needs them."""
    return {k: v for k, v in env.items() if not k.startswith("TUNNEL_") and k not in HIDDEN_ENV}


@dataclass(frozen=True, slots=True, kw_only=True)
class Sandbox:
    """The sandbox one agent runs in; `command` makes its layout anew at each start."""

    workspace: str
    """The workspace's real path."""
    home: str
    allow: tuple[Allowance, ...] = ()
    """The agent's defaults and the user's `--sandbox-allow`, the user's winning."""
    hide: tuple[str, ...] = ()
    """Real paths hidden wherever they are (`host_private_paths`), besides `SYSTEM_SECRETS`."""
    network: bool = True
    bwrap: str = "bwrap"
    setsid: str = "setsid"
    disable_userns: bool = True

    @property
    def writable(self) -> tuple[str, ...]:
        """The host paths whose changes outlive the agent: the workspace and the writable
        allowances that exist now."""
        rw = [a.path for a in self.allow if a.writable and os.path.exists(a.path)]
        return (self.workspace, *rw)

    def layout(self) -> Layout:
        """The layout for what exists now (a path made later is neither shown nor hidden)."""
        scratch: list[str] = []
        for path in map(os.path.realpath, (*PRIVATE_DIRS, self.home, "/root")):
            # One inside another needs no tmpfs of its own.
            if path != "/" and os.path.isdir(path) and not any(_under(path, s) for s in scratch):
                scratch.append(path)
        run = [p for p in dict.fromkeys(map(os.path.realpath, RUN_DIRS)) if p in scratch]
        # The user's runtime directory (XDG_RUNTIME_DIR), empty, inside the private /run.
        runtime = os.path.realpath(f"/run/user/{os.getuid()}")
        if os.path.isdir(runtime) and runtime not in scratch:
            scratch.append(runtime)
        binds = [Bind(path, False) for path in _linked_from_etc(run)]
        links: list[Link] = [link for top in run for link in _links_in(top)]
        for allowance in self.allow:
            if os.path.exists(allowance.path):
                real = os.path.realpath(allowance.path)
                binds.append(Bind(real, allowance.writable))
                # Where its name is, its parent directory resolved: a symbolic link there shows
                # inside unless that directory is a private tmpfs.
                folder, name = os.path.split(allowance.path)
                links.append(Link(os.path.join(os.path.realpath(folder), name), real))
        every_bind = [Bind(self.workspace, True), *binds]
        links = [
            link
            for link in links
            if link.path != link.target and not _visible(link.path, scratch, every_bind)
        ]
        hidden = [*self.hide, *(p for pattern in SYSTEM_SECRETS for p in glob.glob(pattern))]
        masks: dict[str, Mask] = {}
        for path in hidden:
            if os.path.exists(path):
                real = os.path.realpath(path)
                masks.setdefault(real, Mask(real, os.path.isdir(real)))
        for real in _system_sockets(scratch, every_bind):
            if not any(m.is_dir and _under(real, m.path) for m in masks.values()):
                masks.setdefault(real, Mask(real, False))
        return Layout(
            workspace=self.workspace,
            scratch=tuple(scratch),
            binds=tuple(binds),
            links=tuple(links),
            masks=tuple(masks.values()),
        )

    def command(
        self, argv: Sequence[str], *, terminal: bool = False, cwd: str | None = None
    ) -> list[str]:
        """The command that runs `argv` in this sandbox (`terminal`: a pty: program, see
        `bwrap_argv`): bwrap, started through `launch_argv`."""
        options = _bwrap_options(
            self.layout(), network=self.network, disable_userns=self.disable_userns, cwd=cwd
        )
        program = _program(argv, terminal=terminal, setsid=self.setsid)
        return launch_argv(self.bwrap, options, program)

    def wrap(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        terminal: bool = False,
        cwd: str | None = None,
    ) -> tuple[list[str], dict[str, str]]:
        """The command and environment that run `argv` (with `env`, in `cwd`: default the
        workspace) in this sandbox: the agent, or a command it has the host run for it."""
        return self.command(argv, terminal=terminal, cwd=cwd), sandbox_environment(env)


def prepare_sandbox(
    settings: SandboxSettings,
    *,
    argv: Sequence[str],
    workspace: Path,
    hide: Iterable[Path] = (),
    terminal: bool = False,
    home: str | None = None,
) -> Sandbox:
    """The sandbox for the agent `argv`, checked by running bubblewrap once; blocks on it.

    Raises `SandboxError` (one line that says how to fix it) when the platform has no sandbox,
    bubblewrap is missing or cannot make namespaces, an allowance is unusable, or the agent's
    program (or, for a `terminal` agent, `setsid`) cannot be found inside.
    """
    if not sys.platform.startswith("linux"):
        raise SandboxError(
            f"--sandbox needs Linux (bubblewrap); on {sys.platform} run the host in a Linux"
            " virtual machine or container, or share without --sandbox"
        )
    home = os.path.normpath(home if home is not None else os.path.expanduser("~"))
    real_workspace = os.path.realpath(workspace)
    if _under(os.path.realpath(home), real_workspace):
        raise SandboxError(
            f"--sandbox: the workspace {real_workspace} holds your home directory;"
            " share a project directory instead"
        )
    hidden = tuple(os.path.realpath(p) for p in hide)
    for path in hidden:
        if _under(path, real_workspace):
            # The sandbox would mask it from the agent's tools, but the host itself serves the
            # workspace to ACP file requests.
            raise SandboxError(
                f"--sandbox: the host's own file {path} is inside the workspace; keep the key,"
                " the share secrets and the log outside it (--key-file, --log-db)"
            )
    allow = {a.path: a for a in agent_allowances(argv, home=home)}
    for allowance in settings.allow:
        if not os.path.exists(allowance.path):
            raise SandboxError(f"--sandbox-allow {allowance}: no such file or directory")
        if _under(os.path.realpath(home), os.path.realpath(allowance.path)):
            raise SandboxError(
                f"--sandbox-allow {allowance} would show your whole home directory;"
                " allow the paths the agent needs"
            )
        allow.pop(allowance.path, None)  # the user's choice replaces the default
        allow[allowance.path] = allowance
    if not os.access(SOCKET_TABLE, os.R_OK):
        raise SandboxError(
            f"--sandbox: cannot read {SOCKET_TABLE}, which lists the UNIX sockets to hide"
        )
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxError(
            "--sandbox needs bubblewrap (bwrap), which is not installed:"
            " sudo apt-get install bubblewrap (Fedora: sudo dnf install bubblewrap)"
        )
    setsid = ""
    if terminal:
        setsid = shutil.which("setsid") or ""
        if not setsid:
            raise SandboxError("--sandbox needs util-linux's setsid for a pty: agent")
    sandbox = Sandbox(
        workspace=real_workspace,
        home=home,
        allow=tuple(allow.values()),
        hide=hidden,
        network=settings.network,
        bwrap=bwrap,
        setsid=setsid or "setsid",
        disable_userns=bwrap_version(bwrap) >= (0, 8),
    )
    _probe(sandbox, argv[0], setsid)
    return sandbox


def bwrap_version(bwrap: str) -> tuple[int, ...]:
    """bwrap's version, (0,) if it does not say (`bubblewrap 0.8.0`)."""
    try:
        # bwrap is the one on PATH, as a shell would run it; nothing comes from a teammate.
        result = subprocess.run(  # noqa: S603
            [bwrap, "--version"], capture_output=True, text=True, timeout=PROBE_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxError(f"--sandbox: cannot run {bwrap}: {exc}") from None
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", result.stdout)
    return tuple(int(part) for part in match.groups(default="0")) if match else (0,)


def _probe(sandbox: Sandbox, program: str, setsid: str) -> None:
    """Run bubblewrap once with the sandbox's layout: it works, and the program is inside."""
    command = sandbox.command(["/bin/sh", "-c", _PROBE, "sh", program, setsid])
    try:
        result = subprocess.run(  # noqa: S603 (the host user's own agent command)
            command,
            env=sandbox_environment(os.environ),
            cwd=sandbox.workspace,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise SandboxError(
            f"--sandbox: bubblewrap did not finish a check run within {PROBE_TIMEOUT:g} s"
        ) from None
    except OSError as exc:
        raise SandboxError(f"--sandbox: cannot run {sandbox.bwrap}: {exc.strerror}") from None
    if result.returncode == 0:
        return
    if result.returncode == _PROGRAM_MISSING:
        raise SandboxError(_hidden_program(program, sandbox))
    if result.returncode == _SETSID_MISSING:
        raise SandboxError(f"--sandbox: {setsid} is hidden inside the sandbox")
    lines = [line.strip() for line in result.stderr.splitlines() if line.strip()]
    said = lines[0][:300] if lines else f"exit code {result.returncode}"
    hint = ""
    if re.search(r"namespace|uid map|not permitted|permission denied", said, re.IGNORECASE):
        hint = "; " + _USERNS_HINT
    raise SandboxError(f"--sandbox: bubblewrap cannot make the sandbox here ({said}){hint}")


def _hidden_program(program: str, sandbox: Sandbox) -> str:
    found = shutil.which(program) if os.sep not in program else program
    if found is None:
        return f"--sandbox: the agent's program {program!r} cannot be found inside the sandbox"
    real = os.path.realpath(os.path.join(sandbox.workspace, found))
    folder = os.path.dirname(real)
    if os.path.basename(folder) == "bin":
        folder = os.path.dirname(folder)
    return (
        f"--sandbox: the agent's program {program!r} ({real}) is hidden inside the sandbox;"
        f" show its installation read-only, e.g. --sandbox-allow {folder}:ro"
    )
