"""`RawTerminal`: a `pty:` agent's screen drawn in this terminal, and every key passed through.

Used by `tunnel attach --raw` on a terminal. The terminal is put in raw mode, so every key goes
to the agent as the bytes the terminal sends (Enter alone, Ctrl-C, arrows, Escape); the one key
kept back is `ESCAPE_KEY`, Ctrl-], which leaves, as telnet's escape character does. The agent's
output is written as it is: it is a terminal program drawing its screen (docs/security.md, "What
a terminal prints"). This terminal's size is reported at the start and on every SIGWINCH.
"""

from __future__ import annotations

import os
import signal
import termios
import tty
from collections.abc import Awaitable, Callable

import anyio

from tunnel.app.requests import MAX_INPUT_SIZE
from tunnel.terminal.sanitize import printable

__all__ = ["ESCAPE_KEY", "ESCAPE_NAME", "RawTerminal"]

ESCAPE_KEY = b"\x1d"
"""Ctrl-]: leaves the raw terminal; never sent to the agent."""

ESCAPE_NAME = "Ctrl-]"

READ_SIZE = min(4096, MAX_INPUT_SIZE)
"""Bytes read from the keyboard at once: a paste larger than this goes out in pieces, each
within what one `input` request may carry."""


class RawTerminal:
    """Raw mode on `fd_in` while `run()` runs; output written to `fd_out` as it is."""

    def __init__(
        self,
        *,
        fd_in: int,
        fd_out: int,
        send_keys: Callable[[bytes], Awaitable[None]],
        resized: Callable[[int, int], Awaitable[None]],
    ) -> None:
        self._in = fd_in
        self._out = fd_out
        self._send_keys = send_keys
        self._resized = resized
        self._running = False
        # Output that came before raw mode began: the screen's first strokes. Bounded by what
        # arrives between the host's `ready` and the start of `run()`, one replay at most.
        self._pending: list[str] = []

    @property
    def running(self) -> bool:
        return self._running

    def write(self, text: str) -> None:
        """The agent's screen output, as it is."""
        if not self._running:
            self._pending.append(text)
            return
        data = text.encode("utf-8", "replace")
        while data:
            written = os.write(self._out, data)
            data = data[written:]

    def note(self, text: str) -> None:
        """A line of our own between the agent's output; `text` is escaped."""
        self.write(f"\r\n[{printable(text)}]\r\n")

    def size(self) -> tuple[int, int]:
        """This terminal's (columns, rows)."""
        size = os.get_terminal_size(self._out)
        return size.columns, size.lines

    async def run(self) -> None:
        """Pass keys through until the escape key or the end of input; restores the terminal."""
        saved = termios.tcgetattr(self._in)
        try:
            tty.setraw(self._in)
            self._running = True
            pending, self._pending = self._pending, []
            for text in pending:
                self.write(text)
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._watch_size)
                await self._pump_keys()
                tg.cancel_scope.cancel()
        finally:
            self._running = False
            termios.tcsetattr(self._in, termios.TCSADRAIN, saved)
            os.write(self._out, b"\r\n")

    async def _pump_keys(self) -> None:
        while True:
            await anyio.wait_readable(self._in)
            try:
                data = os.read(self._in, READ_SIZE)
            except BlockingIOError:
                continue
            if not data:
                return  # end of input
            escape = data.find(ESCAPE_KEY)
            if escape >= 0:
                if escape:
                    await self._send_keys(data[:escape])
                return
            await self._send_keys(data)

    async def _watch_size(self) -> None:
        with anyio.open_signal_receiver(signal.SIGWINCH) as changes:
            await self._resized(*self.size())
            async for _ in changes:
                await self._resized(*self.size())
