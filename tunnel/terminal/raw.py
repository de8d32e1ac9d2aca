"""`RawTerminal`: a `pty:` agent's screen drawn in this terminal, and every key passed through.

Used by `tunnel attach --raw` on a terminal. The terminal is put in raw mode, so every key goes
to the agent as the bytes the terminal sends (Enter alone, Ctrl-C, arrows, Escape); the one key
kept back is `ESCAPE_KEY`, Ctrl-], which leaves, as telnet's escape character does. The agent's
output is written as it is: it is a terminal program drawing its screen (docs/security.md, "What
a terminal prints"). This terminal's size is reported at the start and on every SIGWINCH.

A viewer's screen is drawn at the host's terminal size (`draw_at`), which its drivers chose: a
program draws for that size, with cursor moves that no other size can reflow. In a larger
terminal the screen is cleared and the host's rows become the scrolling region (and, where the
terminal has left and right margins, its columns the margins), so the program scrolls and wraps
where it does on the host and the rest stays blank; a terminal without such margins wraps long
lines at its own width.
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

RESET_MARGINS = "\x1b[?69l\x1b[r"
"""No left and right margins (DECLRMM off), and the whole screen as the scrolling region."""

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
        # The host's terminal size to draw at (None: this terminal's own), and the margins set
        # for it now: (rows, columns), each None where this terminal's own edge serves.
        self._host: tuple[int, int] | None = None
        self._margins: tuple[int | None, int | None] = (None, None)

    @property
    def running(self) -> bool:
        return self._running

    def write(self, text: str) -> None:
        """The agent's screen output, as it is."""
        if not self._running:
            self._pending.append(text)
            return
        self._write(text)

    def _write(self, text: str) -> None:
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

    def draw_at(self, cols: int, rows: int) -> None:
        """Draw the agent's screen at the host's terminal size from now on (a viewer's)."""
        self._host = (cols, rows)
        if self._running:
            self._fit_margins()

    def _fit_margins(self) -> None:
        """Keep the program's screen to the host's size inside this terminal: its rows as the
        scrolling region, its columns as the left and right margins, where this terminal is
        larger. A change clears the screen: what was drawn at another size would only mislead,
        and a full-screen program redraws on the host's resize."""
        margins: tuple[int | None, int | None] = (None, None)
        if self._host is not None:
            cols, rows = self._host
            local_cols, local_rows = self.size()
            margins = (rows if rows < local_rows else None, cols if cols < local_cols else None)
        if margins == self._margins:
            return
        self._margins = margins
        rows_margin, cols_margin = margins
        # Back to the terminal's own edges, clear, then the host's (DECSTBM; DECLRMM and
        # DECSLRM, which a terminal without left and right margins ignores).
        sequence = RESET_MARGINS + "\x1b[H\x1b[2J"
        if rows_margin is not None:
            sequence += f"\x1b[1;{rows_margin}r"
        if cols_margin is not None:
            sequence += f"\x1b[?69h\x1b[1;{cols_margin}s"
        self._write(sequence + "\x1b[H")

    async def run(self) -> None:
        """Pass keys through until the escape key or the end of input; restores the terminal."""
        saved = termios.tcgetattr(self._in)
        try:
            # TCSADRAIN, not setraw's default TCSAFLUSH: keys typed before raw mode began (a
            # Ctrl-] pressed as the screen appeared) are read, not discarded.
            tty.setraw(self._in, termios.TCSADRAIN)
            self._running = True
            # Before the first stroke: the replay draws the screen at the host's size.
            self._fit_margins()
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
            rows_margin, _ = self._margins
            if self._margins != (None, None):
                # The terminal's own edges again, the cursor below the screen drawn.
                self._write(RESET_MARGINS + f"\x1b[{rows_margin or 1};1H")
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
                self._fit_margins()
                await self._resized(*self.size())
