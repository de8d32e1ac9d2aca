"""What a terminal tells its user about permission requests waiting for an answer: the bell once
per new request, their number before the input prompt, and in the window title
(docs/notifications.md, "Terminals").

`WaitingRequests` decides, without I/O, which requests are new: one that was ever seen waiting
never counts as new again, whether it comes back in a snapshot, after a reconnect or a resume.
`TerminalSignals` writes the bell and the title. Both are our own bytes: the title holds a count
and the program's name, never text from the wire, and the bell is a BEL we write, not one an
agent sent (those are made visible by `printable()`, tunnel/terminal/sanitize.py).
"""

from __future__ import annotations

import contextlib
import os
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import IO

__all__ = ["MAX_REMEMBERED", "TerminalSignals", "WaitingRequests"]

MAX_REMEMBERED = 4096
"""Requests remembered as announced; an older one is forgotten (a request that old is long
answered, and request ids do not repeat)."""

BELL = "\a"

TITLE_SAVE = "\x1b[22;0t"
"""xterm's "push the window title" (CSI 22 ; 0 t): the title before ours comes back on exit.
Terminals without a title stack ignore it."""

TITLE_RESTORE = "\x1b[23;0t"
"""xterm's "pop the window title" (CSI 23 ; 0 t)."""


def _title(text: str) -> str:
    """OSC 2, set the window title, ended by BEL as every terminal with titles accepts."""
    return f"\x1b]2;{text}\x07"


class WaitingRequests:
    """The permission requests that wait now, and which of them were never announced."""

    def __init__(self) -> None:
        self._announced: OrderedDict[str, None] = OrderedDict()
        self.count = 0
        """How many requests wait now."""
        self.elsewhere = 0
        """How many wait in the host's other conversations (the window title counts them too,
        without naming them: docs/notifications.md, "Terminals")."""

    def update(self, waiting: Iterable[str]) -> int:
        """Take the ids of the requests that wait now; return how many of them were never seen
        waiting before (each is announced once, and never again)."""
        ids = list(dict.fromkeys(waiting))
        self.count = len(ids)
        new = 0
        for request_id in ids:
            if request_id not in self._announced:
                new += 1
                self._announced[request_id] = None
        while len(self._announced) > MAX_REMEMBERED:
            self._announced.popitem(last=False)
        return new

    def prompt(self, base: str) -> str:
        """The input prompt `base` with the count before it while requests wait."""
        return f"[{self.count} waiting] {base}" if self.count else base

    def title(self, program: str) -> str:
        """The window title: the program's name, with the count before it while requests
        wait (and the count of those waiting in other conversations)."""
        if self.elsewhere:
            program = f"[{self.elsewhere} waiting elsewhere] {program}"
        return self.prompt(program)


class TerminalSignals:
    """The bell and the window title of the terminal `stream` writes to.

    The bell rings only when `stream` is a terminal and `bell` is on; the title is set only on a
    terminal that is not dumb (`TERM` set and not `dumb`), and not before a request waits. On
    `close` the title is cleared and the one from before is restored where the terminal keeps a
    stack of titles.
    """

    def __init__(
        self,
        stream: IO[str],
        *,
        program: str,
        bell: bool = True,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        environ = os.environ if environ is None else environ
        try:
            terminal = stream.isatty()
        except ValueError:  # a closed stream
            terminal = False
        self._stream = stream
        self._program = program
        self._bell = bell and terminal
        self._titles = terminal and environ.get("TERM", "") not in ("", "dumb")
        self._shown: str | None = None
        """The title we set last; None while the terminal's own is shown."""

    def show(self, waiting: WaitingRequests, new: int) -> None:
        """Ring once for each of `new` requests, and show `waiting`'s count in the title."""
        out = BELL * new if self._bell else ""
        if self._titles and (self._shown is not None or waiting.count or waiting.elsewhere):
            title = waiting.title(self._program)
            if title != self._shown:
                if self._shown is None:
                    out += TITLE_SAVE
                out += _title(title)
                self._shown = title
        self._write(out)

    def close(self) -> None:
        """Give the terminal its title back (or clear ours where it cannot)."""
        if self._shown is not None:
            self._shown = None
            self._write(_title("") + TITLE_RESTORE)

    def _write(self, text: str) -> None:
        if not text:
            return
        # A terminal that went away (a closed pipe, a hung-up pty) is no reason to fail.
        with contextlib.suppress(OSError, ValueError):
            self._stream.write(text)
            self._stream.flush()
