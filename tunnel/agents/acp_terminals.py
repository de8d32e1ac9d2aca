"""Terminals an ACP agent runs through the host: terminal/create, terminal/output,
terminal/wait_for_exit, terminal/kill and terminal/release (docs/agents.md, "Terminals").

A command runs as a program with its arguments (no shell), in its own process group, with the
workspace (or a directory inside it) as its working directory: the directory the host resolved
to an fd, not its name again (tunnel/agents/workspace.py). Its stdout and stderr go to one
output buffer, bounded: past the limit the oldest output is dropped, at a character boundary,
as the protocol asks. Every chunk of output is handed to `on_output` as it arrives (the session
streams it to the teammates), and `on_exit` is called once the command has ended or was released.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from .recorder import new_id

if TYPE_CHECKING:
    from .sandbox import Sandbox

DEFAULT_OUTPUT_BYTES = 1024 * 1024
"""Output kept per terminal when the agent sets no `outputByteLimit`."""

MAX_OUTPUT_BYTES = 4 * 1024 * 1024
"""Output kept per terminal at most, whatever limit the agent asks for."""

MAX_TERMINALS = 16
"""Terminals an agent may hold at once (created and not released); one more is refused."""

READ_BYTES = 64 * 1024
"""Output read (and streamed) at a time."""


class TerminalError(Exception):
    """The agent asked for something about terminals that cannot be done (its fault)."""


@dataclass(slots=True, kw_only=True)
class Terminal:
    """One command the agent runs, and what it printed."""

    terminal_id: str
    argv: list[str]
    cwd: str
    limit: int
    process: asyncio.subprocess.Process
    output: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    exit_code: int | None = None
    signal: str | None = None
    exited: anyio.Event = field(default_factory=anyio.Event)
    released: bool = False

    def text(self) -> str:
        return self.output.decode("utf-8", errors="replace")

    def keep(self, chunk: bytes) -> None:
        """Add output; past the limit drop the oldest bytes, never half a character."""
        self.output += chunk
        excess = len(self.output) - self.limit
        if excess > 0:
            # Skip UTF-8 continuation bytes so the kept output starts on a character.
            while excess < len(self.output) and self.output[excess] & 0xC0 == 0x80:
                excess += 1
            del self.output[:excess]
            self.truncated = True


OutputHook = Callable[[Terminal, str], Awaitable[None]]
ExitHook = Callable[[Terminal], Awaitable[None]]


class Terminals:
    """The terminals of one agent process."""

    sandbox: Sandbox | None = None
    """The agent's sandbox (tunnel/agents/sandbox.py): its commands run in it too."""

    def __init__(
        self,
        task_group: anyio.abc.TaskGroup,
        *,
        on_output: OutputHook,
        on_exit: ExitHook,
    ) -> None:
        self._task_group = task_group
        self._on_output = on_output
        self._on_exit = on_exit
        self._terminals: dict[str, Terminal] = {}

    async def create(
        self,
        command: str,
        args: Sequence[str],
        *,
        cwd: str,
        cwd_fd: int,
        env: Mapping[str, str],
        output_byte_limit: int | None,
    ) -> Terminal:
        """Start `command` in the directory `cwd_fd` (`Workspace.open_dir`; the caller closes
        it), whose name in the workspace is `cwd`."""
        if len(self._terminals) >= MAX_TERMINALS:
            raise TerminalError(f"{MAX_TERMINALS} terminals are open already; release one first")
        limit = DEFAULT_OUTPUT_BYTES if output_byte_limit is None else output_byte_limit
        limit = max(0, min(limit, MAX_OUTPUT_BYTES))
        argv = [command, *args]
        spawn, spawn_env = argv, {**os.environ, **env}
        if self.sandbox is not None:
            # bubblewrap enters `cwd` by name inside the sandbox, where whatever the name leads
            # to is something the command could reach anyway.
            spawn, spawn_env = self.sandbox.wrap(argv, spawn_env, cwd=cwd)
        try:
            process = await asyncio.create_subprocess_exec(
                *spawn,
                cwd=_fd_path(cwd_fd, cwd),
                env=spawn_env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        except FileNotFoundError:
            raise TerminalError(f"cannot run {command}: program not found") from None
        except PermissionError:
            raise TerminalError(f"cannot run {command}: permission denied") from None
        except OSError as exc:
            raise TerminalError(f"cannot run {command}: {exc.strerror or exc}") from None
        terminal = Terminal(
            terminal_id=new_id("term"), argv=argv, cwd=cwd, limit=limit, process=process
        )
        self._terminals[terminal.terminal_id] = terminal
        self._task_group.start_soon(self._pump, terminal)
        return terminal

    def get(self, terminal_id: str) -> Terminal:
        terminal = self._terminals.get(terminal_id)
        if terminal is None:
            raise TerminalError(f"no terminal {terminal_id!r} (never created, or released)")
        return terminal

    def kill(self, terminal_id: str) -> None:
        """Kill the command; the terminal stays until released."""
        _kill(self.get(terminal_id))

    def release(self, terminal_id: str) -> None:
        """Kill the command if it still runs and forget the terminal."""
        terminal = self.get(terminal_id)
        terminal.released = True
        del self._terminals[terminal_id]
        _kill(terminal)

    def release_all(self) -> None:
        for terminal_id in list(self._terminals):
            self.release(terminal_id)

    async def _pump(self, terminal: Terminal) -> None:
        stream = terminal.process.stdout
        assert stream is not None
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        try:
            while chunk := await stream.read(READ_BYTES):
                terminal.keep(chunk)
                text = decoder.decode(chunk)
                if text:
                    await self._on_output(terminal, text)
            if tail := decoder.decode(b"", final=True):
                await self._on_output(terminal, tail)
            code = await terminal.process.wait()
        finally:
            if terminal.process.returncode is None:
                # Cancelled (the session stops): leave nothing running.
                _kill(terminal)
                with anyio.move_on_after(2, shield=True):
                    await terminal.process.wait()
        if code < 0:
            try:
                terminal.signal = signal.Signals(-code).name
            except ValueError:
                terminal.signal = f"signal {-code}"
        else:
            terminal.exit_code = code
        terminal.exited.set()
        await self._on_exit(terminal)


def _fd_path(fd: int, name: str) -> str:
    """A name the child enters `fd` by: /proc/self/fd/N is the child's own copy of the fd
    (inherited across fork, closed only at exec since it is O_CLOEXEC, after the chdir), so the
    directory is the one resolved, whatever the agent renamed since; the command never holds
    the fd. Without /proc the name is all there is: only Linux confines an agent (--sandbox),
    and an unconfined one reaches any directory anyway."""
    proc = f"/proc/self/fd/{fd}"
    return proc if os.path.isdir(proc) else name


def _kill(terminal: Terminal) -> None:
    if terminal.process.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(terminal.process.pid, signal.SIGKILL)
