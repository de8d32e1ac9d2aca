"""A command run in a pseudo-terminal, as a person runs it: its stdin, stdout and stderr are the
terminal, and the test reads every byte the terminal would have to interpret.

`ScreenProcess` also runs the bytes through a terminal emulator (pyte), answers its cursor
position reports as a terminal does, and lets a test read the screen a person would see."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import re
import signal
import struct
import subprocess
import termios
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import anyio
import pyte

ROWS, COLUMNS = 50, 4000
"""Wide enough that rich wraps no line: a label and the text after it stay together."""

TERMINAL_ENV = {"TERM": "dumb", "NO_COLOR": "1", "COLUMNS": str(COLUMNS), "LINES": str(ROWS)}
"""Rich emits no escape of its own on a dumb terminal: any escape in the output is a failure."""


class PtyProcess:
    """One process on its own terminal; `received` is everything it wrote there, as bytes."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        rows: int = ROWS,
        columns: int = COLUMNS,
        controlling: bool = False,
    ) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self._master = master
        self._lock = threading.Lock()
        self._received = bytearray()
        try:
            self.process = subprocess.Popen(
                list(argv),
                stdin=slave,
                stdout=slave,
                stderr=slave,
                cwd=cwd,
                env=dict(env),
                start_new_session=True,
                # The terminal of its session, as a login's is: resizing it sends SIGWINCH.
                preexec_fn=_take_terminal if controlling else None,
            )
        finally:
            os.close(slave)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._master, 65536)
            except OSError:  # EIO: every writer of the terminal is gone
                return
            if not chunk:
                return
            with self._lock:
                self._received += chunk
                self._feed(chunk)

    def _feed(self, chunk: bytes) -> None:
        """What the terminal does with output (here: nothing but keep it)."""

    @property
    def received(self) -> bytes:
        with self._lock:
            return bytes(self._received)

    def text(self) -> str:
        """What it printed, as text; the terminal's own `\\r\\n` line ends read as `\\n`."""
        return self.received.decode("utf-8", errors="backslashreplace").replace("\r\n", "\n")

    def type(self, line: str) -> None:
        """Type one line, as a person at the keyboard would."""
        os.write(self._master, line.encode() + b"\n")

    def keys(self, data: bytes) -> None:
        """Press keys: the bytes a terminal sends for them (b"\\r" is Enter, b"\\x03" Ctrl-C)."""
        os.write(self._master, data)

    def resize(self, rows: int, columns: int) -> None:
        """Change the terminal's size, as a window resize does (the program gets SIGWINCH)."""
        fcntl.ioctl(self._master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))

    async def wait_for(self, pattern: str, *, within: float = 30.0) -> re.Match[str]:
        """Wait until the output matches `pattern` (a regex); fail with what it printed."""
        compiled = re.compile(pattern)
        with contextlib.suppress(TimeoutError), anyio.fail_after(within):
            while True:
                match = compiled.search(self.text())
                if match:
                    return match
                if self.process.poll() is not None:
                    break
                await anyio.sleep(0.05)
        tail = self.text()[-3000:]
        raise AssertionError(f"no {pattern!r} on the terminal; it ended with:\n{tail}")

    async def wait_exit(self, *, within: float = 15.0) -> int:
        """Wait until the process exits of itself (fail after `within` seconds); its exit code."""
        with anyio.fail_after(within):
            while self.process.poll() is None:
                await anyio.sleep(0.05)
        return self.process.returncode

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it does not stop; the exit code. Reads what is left."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self._reader.join(10)
        os.close(self._master)
        return self.process.returncode


def _take_terminal() -> None:
    """In the child, after setsid: make its standard input its controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class ScreenProcess(PtyProcess):
    """A PtyProcess whose output drives an emulated terminal of `rows` x `columns`."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        rows: int = 30,
        columns: int = 120,
    ) -> None:
        self.screen = pyte.HistoryScreen(columns, rows, history=5000)
        self.screen.write_process_input = self._answer  # type: ignore[method-assign]
        self._stream = pyte.ByteStream(self.screen)
        super().__init__(argv, env=env, cwd=cwd, rows=rows, columns=columns, controlling=True)

    def _feed(self, chunk: bytes) -> None:
        self._stream.feed(chunk)

    def _answer(self, data: str) -> None:
        # A cursor position report, as a terminal answers prompt_toolkit's request.
        with contextlib.suppress(OSError):
            os.write(self._master, data.encode())

    def lines(self) -> list[str]:
        """Every line shown so far: those scrolled off the top, then the screen's."""
        with self._lock:
            screen = self.screen
            top = [
                "".join(line[x].data for x in range(screen.columns)).rstrip()
                for line in screen.history.top
            ]
            return top + [line.rstrip() for line in screen.display]

    def display(self) -> list[str]:
        """The screen now, line by line."""
        with self._lock:
            return [line.rstrip() for line in self.screen.display]

    def cursor_line(self) -> str:
        """The line the cursor is on: where typing shows."""
        with self._lock:
            return self.screen.display[self.screen.cursor.y].rstrip()

    async def wait_screen(
        self, pattern: str, *, within: float = 30.0, where: str = "lines"
    ) -> re.Match[str]:
        """Wait until the screen (`where`: "lines", all of them, "display", or "cursor", the
        cursor's line) matches `pattern`; fail with what it shows."""
        compiled = re.compile(pattern)
        read = {"lines": self.lines, "display": self.display, "cursor": self.cursor_line}[where]
        with contextlib.suppress(TimeoutError), anyio.fail_after(within):
            while True:
                shown = read()
                match = compiled.search(shown if isinstance(shown, str) else "\n".join(shown))
                if match:
                    return match
                if self.process.poll() is not None:
                    break
                await anyio.sleep(0.05)
        shown = "\n".join(self.lines()[-60:])
        raise AssertionError(f"no {pattern!r} on the screen; it shows:\n{shown}")


@contextlib.contextmanager
def screen_process(
    argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, rows: int = 30, columns: int = 120
) -> Iterator[ScreenProcess]:
    """Run `argv` on an emulated terminal for the block; stopped after."""
    process = ScreenProcess(argv, env=env, cwd=cwd, rows=rows, columns=columns)
    try:
        yield process
    finally:
        process.stop()


@contextlib.contextmanager
def pty_process(argv: Sequence[str], *, env: Mapping[str, str], cwd: Path) -> Iterator[PtyProcess]:
    """Run `argv` on a terminal of its own for the block; stopped (and read to the end) after."""
    process = PtyProcess(argv, env=env, cwd=cwd)
    try:
        yield process
    finally:
        process.stop()


_TITLE = re.compile(rb"\x1b\]2;([^\x07\x1b]*)\x07")
"""OSC 2, a window title, as the commands set it (ended by BEL)."""


def bells(received: bytes) -> int:
    """The bells a terminal rang: its BELs but those that end a title."""
    return _TITLE.sub(b"", received).count(b"\x07")


def titles(received: bytes) -> list[str]:
    """Every window title set, in order."""
    return [match.group(1).decode() for match in _TITLE.finditer(received)]
