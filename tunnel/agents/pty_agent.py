"""A terminal program in a pseudo-terminal as the shared session (`--agent pty:COMMAND ARGS...`).

The program's output becomes `terminal` items: bytes are decoded incrementally as UTF-8 (a
character split across reads is not mangled) and coalesced, so an item is stored after 50 ms of
quiet, after at most 250 ms, or when 16 KiB of text is waiting. Drivers' keystrokes go to the
pty, resizes become TIOCSWINSZ (the kernel tells the program with SIGWINCH), and the exit is
stored as `terminal_exit`. A prompt after the exit starts the program again.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import fcntl
import logging
import math
import os
import signal
import struct
import sys
import termios
from collections.abc import Sequence
from pathlib import Path

import anyio
import anyio.abc

from tunnel.app.requests import MAX_INPUT_SIZE, MAX_TERMINAL_SIDE, PromptImage
from tunnel.log import Log, StoreError

from .base import AgentInfo, AgentSession
from .errors import SessionError, check_by, check_prompt
from .permissions import PermissionBroker
from .recorder import Recorder
from .writer import reason_of

logger = logging.getLogger("tunnel.agents.pty")

QUIET = 0.05
"""Seconds without output after which buffered output is stored."""

MAX_DELAY = 0.25
"""Seconds buffered output may wait at most, even while the program keeps writing."""

MAX_ITEM_CHARS = 16 * 1024
"""Characters per `terminal` item; it bounds the output buffer too."""

READ_SIZE = 64 * 1024

INPUT_TIMEOUT = 5.0
"""Seconds to wait for a program that does not read its input before refusing more."""

TERMINAL_SIZE_EVENT = "terminal_size"
"""The event that tells every teammate the terminal's new size (docs/application.md)."""

START_TIMEOUT = 10.0
STOP_GRACE = 1.0

# Exec'd in the child: make the pty its controlling terminal (after start_new_session's setsid)
# so job control, Ctrl-C and SIGWINCH work, then become the real program. Ctrl-C and Ctrl-\ get
# their default action back: a host started with them ignored (a background job of a script, as
# POSIX has it) would hand that on, and the program would never see a teammate's Ctrl-C.
_SHIM = (
    "import fcntl, os, signal, sys, termios\n"
    "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
    "signal.signal(signal.SIGQUIT, signal.SIG_DFL)\n"
    "try:\n"
    "    fcntl.ioctl(0, termios.TIOCSCTTY, 0)\n"
    "except OSError:\n"
    "    pass\n"
    "try:\n"
    "    os.execvp(sys.argv[1], sys.argv[1:])\n"
    "except OSError as exc:\n"
    "    sys.stderr.write(f'{sys.argv[1]}: {exc.strerror}\\r\\n')\n"
    "    os._exit(127)\n"
)


class _Program:
    """One run of the terminal program."""

    def __init__(self, process: anyio.abc.Process, master: int) -> None:
        self.process = process
        self.master = master
        self.closed = False


class PtySession(AgentSession):
    """A shared terminal running one program."""

    def __init__(
        self,
        *,
        argv: Sequence[str],
        log: Log,
        workspace: Path,
        conversation_id: str,
        cols: int = 80,
        rows: int = 24,
    ) -> None:
        if not argv:
            raise ValueError("a pty agent needs a command")
        recorder = Recorder(log, conversation_id)
        super().__init__(
            info=AgentInfo(name=os.path.basename(argv[0]), kind="terminal"),
            conversation_id=conversation_id,
            recorder=recorder,
            permissions=PermissionBroker(recorder),
        )
        self._argv = list(argv)
        self._workspace = os.path.realpath(workspace)
        self._size = (cols, rows)
        self._program: _Program | None = None
        self._serving = False
        self._restart = anyio.Event()
        self._started = anyio.Event()
        self._write_lock = anyio.Lock()

    @property
    def program_pid(self) -> int | None:
        """The process id of the running program, None when it is not running."""
        program = self._program
        return program.process.pid if program is not None else None

    # -- the session API -----------------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        async with anyio.create_task_group() as tg:
            await tg.start(self._recorder.writer.run)
            self._serving = True
            try:
                program = await self._spawn()
                task_status.started()
                while True:
                    if program is not None:
                        await self._serve(program)
                    await self._restart.wait()
                    program = await self._spawn()
            finally:
                self._serving = False
                self._started.set()  # release prompts waiting for a restart
                tg.cancel_scope.cancel()

    async def prompt(self, text: str, *, by: str, images: Sequence[PromptImage] = ()) -> None:
        """Record the prompt, then type it into the program followed by Enter."""
        check_prompt(text, by)
        if images:
            raise SessionError(
                "not_supported", f"{self.info.name} is a terminal: it takes no images"
            )
        if not self._serving:
            raise SessionError("agent_unavailable", "the terminal session is not running")
        # Typed only once stored: nothing reaches the program that the log does not show.
        self._recorder.writer.check_writable()
        try:
            await self._recorder.user_message(text, by=by)
        except ValueError as exc:
            raise SessionError("bad_request", f"the prompt cannot be stored: {exc}") from None
        except StoreError as exc:
            raise SessionError(
                "agent_unavailable", f"the prompt was not stored: {reason_of(exc)}"
            ) from None
        if self._program is None:
            self._restart.set()
            with anyio.move_on_after(START_TIMEOUT):
                await self._started.wait()
        await self._write(text.encode("utf-8") + b"\r")

    async def cancel(self, *, by: str) -> None:
        """Send Ctrl-C, as a human at the terminal would."""
        check_by(by)
        if self._program is None:
            return
        await self._recorder.session_event("cancelled", by=by, hold=True)
        await self._write(b"\x03")

    async def input(self, data: bytes, *, by: str) -> None:
        check_by(by)
        if not isinstance(data, bytes | bytearray):
            raise SessionError("bad_request", "input must be bytes")
        if len(data) > MAX_INPUT_SIZE:
            raise SessionError("bad_request", f"input is limited to {MAX_INPUT_SIZE} bytes")
        # Its echo could not be recorded: typing waits until the log writes again.
        self._recorder.writer.check_writable()
        await self._write(data)

    async def resize(self, cols: int, rows: int, *, by: str) -> None:
        check_by(by)
        if type(cols) is not int or type(rows) is not int:
            raise SessionError("bad_request", "cols and rows must be integers")
        if not (1 <= cols <= MAX_TERMINAL_SIDE and 1 <= rows <= MAX_TERMINAL_SIDE):
            raise SessionError(
                "bad_request", f"cols and rows must be between 1 and {MAX_TERMINAL_SIDE}"
            )
        changed = (cols, rows) != self._size
        self._size = (cols, rows)
        program = self._program
        if program is not None and not program.closed:
            _set_size(program.master, cols, rows)
        if changed:
            # Every teammate draws the screen at this size: the program now draws for it.
            await self._recorder.publish(TERMINAL_SIZE_EVENT, {"cols": cols, "rows": rows})

    def terminal_size(self) -> tuple[int, int]:
        return self._size

    # -- internals -----------------------------------------------------------------------------

    async def _spawn(self) -> _Program | None:
        # A prompt arriving from now on (even while the exit is being recorded) restarts it.
        self._restart = anyio.Event()
        try:
            return await self._spawn_program()
        finally:
            self._started.set()
            self._started = anyio.Event()

    async def _spawn_program(self) -> _Program | None:
        master, slave = os.openpty()
        try:
            _set_size(master, *self._size)
            os.set_blocking(master, False)
            env = dict(os.environ, TERM="xterm-256color")
            argv = [sys.executable, "-I", "-S", "-c", _SHIM, *self._argv]
            if self.sandbox is not None:
                # bwrap runs it in a new session; setsid --ctty (not the shim) then makes the pty
                # its controlling terminal inside the sandbox (tunnel/agents/sandbox.py).
                argv, env = self.sandbox.wrap(self._argv, env, terminal=True)
            process = await anyio.open_process(
                argv,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                cwd=self._workspace,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            os.close(master)
            await self._recorder.error(f"could not start {self.info.name}: {exc.strerror or exc}")
            return None
        finally:
            os.close(slave)
        program = self._program = _Program(process, master)
        await self._recorder.session_event("agent_started", agent=self.info.name)
        return program

    async def _serve(self, program: _Program) -> None:
        """Pump the output until the program exits, then record the exit."""
        drained = anyio.Event()
        code: int | None = None
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._pump_output, program.master, drained)
                code = await program.process.wait()
                # Output written just before the exit is still in the pty: read it all, unless
                # a leftover child keeps the terminal open.
                with anyio.move_on_after(0.5):
                    await drained.wait()
                tg.cancel_scope.cancel()
        finally:
            self._program = None
            with anyio.move_on_after(STOP_GRACE * 3, shield=True):
                await _stop(program)
        details = {}
        if code is not None and code < 0:
            with contextlib.suppress(ValueError):
                details["signal"] = signal.Signals(-code).name
        await self._recorder.terminal_exit(code, **details)

    async def _pump_output(self, fd: int, drained: anyio.Event) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        buffer: list[str] = []
        size = 0
        oldest = 0.0
        try:
            while True:
                now = anyio.current_time()
                wait = min(QUIET, oldest + MAX_DELAY - now) if buffer else math.inf
                with anyio.move_on_after(max(wait, 0.0)) as scope:
                    await anyio.wait_readable(fd)
                if scope.cancelled_caught:
                    await self._store("".join(buffer))
                    buffer, size = [], 0
                    continue
                try:
                    data = os.read(fd, READ_SIZE)
                except BlockingIOError:
                    continue
                except OSError as exc:
                    # EIO: every process holding the terminal has closed it.
                    if exc.errno != errno.EIO:
                        logger.warning("reading the terminal failed: %s", exc)
                    break
                if not data:
                    break
                text = decoder.decode(data)
                if not text:
                    continue
                if not buffer:
                    oldest = anyio.current_time()
                buffer.append(text)
                size += len(text)
                if size >= MAX_ITEM_CHARS:
                    await self._store("".join(buffer))
                    buffer, size = [], 0
            drained.set()
        finally:
            rest = "".join(buffer) + decoder.decode(b"", final=True)
            with anyio.move_on_after(STOP_GRACE, shield=True):
                await self._store(rest)

    async def _store(self, text: str) -> None:
        for start in range(0, len(text), MAX_ITEM_CHARS):
            await self._recorder.terminal(text[start : start + MAX_ITEM_CHARS])

    async def _write(self, data: bytes) -> None:
        program = self._program
        if program is None or program.closed:
            raise SessionError("agent_unavailable", "the terminal program is not running")
        async with self._write_lock:
            view = memoryview(data)
            try:
                with anyio.fail_after(INPUT_TIMEOUT):
                    while view:
                        if program.closed:
                            raise SessionError("agent_unavailable", "the program has exited")
                        try:
                            written = os.write(program.master, view)
                        except BlockingIOError:
                            await anyio.wait_writable(program.master)
                            continue
                        view = view[written:]
            except TimeoutError:
                raise SessionError(
                    "agent_unavailable", "the program is not reading its input"
                ) from None
            except (OSError, anyio.ClosedResourceError):
                raise SessionError("agent_unavailable", "the program has exited") from None


def _set_size(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


async def _stop(program: _Program) -> None:
    """Hang up the terminal, then SIGTERM and SIGKILL the program's process group."""
    process = program.process
    pid = process.pid
    for sig in (signal.SIGHUP, signal.SIGTERM, signal.SIGKILL):
        if process.returncode is not None:
            break
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        with anyio.move_on_after(STOP_GRACE):
            await process.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    if not program.closed:
        program.closed = True
        anyio.notify_closing(program.master)
        os.close(program.master)
