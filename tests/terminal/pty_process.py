"""A command run in a pseudo-terminal, as a person runs it: its stdin, stdout and stderr are the
terminal, and the test reads every byte the terminal would have to interpret."""

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

ROWS, COLUMNS = 50, 4000
"""Wide enough that rich wraps no line: a label and the text after it stay together."""

TERMINAL_ENV = {"TERM": "dumb", "NO_COLOR": "1", "COLUMNS": str(COLUMNS), "LINES": str(ROWS)}
"""Rich emits no escape of its own on a dumb terminal: any escape in the output is a failure."""


class PtyProcess:
    """One process on its own terminal; `received` is everything it wrote there, as bytes."""

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
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


@contextlib.contextmanager
def pty_process(argv: Sequence[str], *, env: Mapping[str, str], cwd: Path) -> Iterator[PtyProcess]:
    """Run `argv` on a terminal of its own for the block; stopped (and read to the end) after."""
    process = PtyProcess(argv, env=env, cwd=cwd)
    try:
        yield process
    finally:
        process.stop()
