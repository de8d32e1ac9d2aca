"""The two screens `tunnel attach` and the host console print to and read lines from.

`PromptScreen`, on a terminal: a prompt_toolkit `Application` that is not full screen, holding
the live part of the transcript (replies as they stream, running tool calls) and an input line
with history and completion, at the bottom of the terminal. What is printed for good goes above
it through prompt_toolkit's `patch_stdout`, which erases the live part and the input line, writes,
and draws them again, so a half-typed line is never cut by output. A whole Application rather
than `PromptSession` with `patch_stdout` alone: a prompt session can only print whole lines above
itself, and streamed text and tool-call lines need a part that is redrawn in place.

`PlainScreen`, when standard input or output is not a terminal, or the terminal is dumb (TERM
unset or `dumb`): lines in, lines out through rich, no cursor movement and no escape sequence of
its own (a dumb terminal shows them as junk); streamed text is printed as it arrives.

Neither prints text from the wire that has not passed `printable()`: the transcript and the
callers build every renderable from escaped text.
"""

from __future__ import annotations

import io
import os
import signal
from collections.abc import Callable
from typing import IO, Literal, TextIO

import anyio
from anyio.streams.memory import MemoryObjectSendStream
from prompt_toolkit.application import Application
from prompt_toolkit.buffer import Buffer
from prompt_toolkit.completion import CompleteEvent, Completer
from prompt_toolkit.filters import Condition
from prompt_toolkit.formatted_text import ANSI, StyleAndTextTuples, to_formatted_text
from prompt_toolkit.history import InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.layout import HSplit, Layout, Window
from prompt_toolkit.layout.containers import ConditionalContainer
from prompt_toolkit.layout.controls import BufferControl, FormattedTextControl
from prompt_toolkit.layout.menus import CompletionsMenu
from prompt_toolkit.layout.processors import BeforeInput
from prompt_toolkit.patch_stdout import patch_stdout
from prompt_toolkit.styles import Style
from rich.console import Console, RenderableType
from rich.text import Text

from tunnel.terminal.lines import stdin_lines
from tunnel.terminal.sanitize import printable

__all__ = ["PlainScreen", "PromptScreen", "Screen", "interactive_terminal"]

# Rich names its colour system as a string; its constructor takes only these literals.
_COLOR_SYSTEMS: dict[str, Literal["standard", "256", "truecolor", "windows"]] = {
    "standard": "standard",
    "256": "256",
    "truecolor": "truecolor",
    "windows": "windows",
}


def interactive_terminal(stdin: IO[str], stdout: IO[str]) -> bool:
    """Whether both ends are a terminal that understands cursor movement (so `PromptScreen`)."""
    term = os.environ.get("TERM", "")
    try:
        return stdin.isatty() and stdout.isatty() and term not in ("", "dumb")
    except ValueError:  # a closed stream
        return False


class Screen:
    """What both screens offer: print for good, a live part (or not), lines typed."""

    live: bool = False
    """Whether the screen redraws a live part in place (`Transcript` reads this)."""

    def print(self, renderable: RenderableType, *, end: str = "\n") -> None:
        raise NotImplementedError

    def changed(self) -> None:
        """The live part changed: redraw it soon."""

    def note(self, text: str, style: str = "dim") -> None:
        """One line of our own; `text` may hold what others chose, so it is escaped here."""
        self.print(Text(printable(text), style=style))

    def set_prompt(self, text: str) -> None:
        """What the input line starts with."""

    def complete_again(self) -> None:
        """What the completer offers may have changed (an answer it waited for came)."""

    async def run(self, lines: MemoryObjectSendStream[str]) -> None:
        """Read typed lines into `lines` until the end of input; returns then."""
        raise NotImplementedError

    async def release(self) -> None:
        """Give the terminal up for good (to a raw terminal session): input stops, and what
        was printed is out once this returns."""


class PlainScreen(Screen):
    """Lines through rich on a console, lines from a text stream (see the module docstring)."""

    live = False

    def __init__(self, console: Console, stdin: TextIO | None) -> None:
        self.console = console
        self._stdin = stdin

    def print(self, renderable: RenderableType, *, end: str = "\n") -> None:
        # soft_wrap: rich inserts no line break of its own, so streamed pieces join up.
        self.console.print(renderable, end=end, soft_wrap=not end)

    async def run(self, lines: MemoryObjectSendStream[str]) -> None:
        stdin = self._stdin
        if stdin is None:
            await anyio.sleep_forever()
            return
        async with stdin_lines(stdin) as typed:
            async for line in typed:
                await lines.send(line)


class PromptScreen(Screen):
    """A live part and an input line at the bottom of the terminal (see the module docstring).

    `on_interrupt` runs on Ctrl-C (the terminal is in raw mode, so the key does not raise
    SIGINT by itself); Ctrl-D on an empty line ends the input, as end of file does, unless
    `on_eof` says otherwise.
    """

    live = True

    def __init__(
        self,
        *,
        completer: Completer | None = None,
        prompt: str = "> ",
        on_interrupt: Callable[[], None] | None = None,
        on_eof: Callable[[], None] | None = None,
    ) -> None:
        self._prompt = prompt
        self._on_eof = on_eof
        self._live: Callable[[], list[RenderableType]] = list
        self._on_interrupt = on_interrupt or _raise_sigint
        self._lines: MemoryObjectSendStream[str] | None = None
        self._app: Application[None] | None = None
        self._done = anyio.Event()
        self._buffer = Buffer(
            history=InMemoryHistory(),
            completer=completer,
            complete_while_typing=True,
            multiline=False,
            accept_handler=self._accept,
        )
        # What printing writes through: rich's Console on whatever sys.stdout is at that moment,
        # prompt_toolkit's proxy while the application runs.
        self.console = Console(force_terminal=True, highlight=False)

    def set_live_source(self, source: Callable[[], list[RenderableType]]) -> None:
        """Where the live part comes from (a `Transcript.live_view`)."""
        self._live = source

    def set_prompt(self, text: str) -> None:
        self._prompt = text
        self.changed()

    def print(self, renderable: RenderableType, *, end: str = "\n") -> None:
        # With the application running, sys.stdout is prompt_toolkit's proxy: it erases the live
        # part and the input line, writes, then draws them again.
        self.console.print(renderable, end=end)

    def changed(self) -> None:
        if self._app is not None:
            self._app.invalidate()

    def complete_again(self) -> None:
        if self._app is not None and self._app.is_running:
            self._buffer.start_completion(select_first=False)

    async def run(self, lines: MemoryObjectSendStream[str]) -> None:
        self._lines = lines
        app = self._app = self._application()
        try:
            with patch_stdout(raw=True):
                # SIGINT stays with the command's own handler (tunnel/process/signals.py).
                await app.run_async(handle_sigint=False)
        finally:
            self._app = None
            self._done.set()

    def exit(self) -> None:
        """End `run` (the terminal is restored)."""
        app = self._app
        if app is not None and app.is_running and app.future is not None and not app.future.done():
            app.exit()

    async def release(self) -> None:
        # The application ends (and waits for the terminal's last answers), then patch_stdout
        # writes what it still held: nothing of it is left to come later.
        if self._app is None:
            return
        self.exit()
        await self._done.wait()

    # -- internals ------------------------------------------------------------------------------

    def _accept(self, buffer: Buffer) -> bool:
        if self._lines is not None:
            try:
                self._lines.send_nowait(buffer.text)
            except anyio.WouldBlock:
                self.note("too many lines are waiting to be sent: this one was not", "yellow")
        return False  # the line is cleared (and kept in the history)

    def _live_text(self) -> StyleAndTextTuples:
        parts = self._live()
        if not parts or self._app is None:
            return []
        size = self._app.output.get_size()
        out = io.StringIO()
        # The same colours and width as what is printed for good.
        console = Console(
            file=out,
            force_terminal=True,
            width=max(size.columns - 1, 20),
            color_system=_COLOR_SYSTEMS.get(self.console.color_system or ""),
            highlight=False,
        )
        for part in parts:
            console.print(part)
        rows = out.getvalue().rstrip("\n").split("\n")
        # The live part shows its end and leaves the rest of the terminal to what was printed.
        room = max(size.rows // 2, 3)
        return to_formatted_text(ANSI("\n".join(rows[-room:])))

    def _application(self) -> Application[None]:
        bindings = KeyBindings()

        @bindings.add("c-i")
        def _complete(event: KeyPressEvent) -> None:
            # Tab completes at once, even before the menu that typing opens has its matches:
            # one match is taken, several open the menu, Tab again goes through it.
            buffer = self._buffer
            state = buffer.complete_state
            if state is not None and state.completions:
                buffer.complete_next()
                return
            found = list(
                buffer.completer.get_completions(
                    buffer.document, CompleteEvent(completion_requested=True)
                )
            )
            if len(found) == 1:
                buffer.apply_completion(found[0])
            elif found:
                buffer.start_completion(insert_common_part=True)

        @bindings.add("c-c")
        def _interrupt(event: KeyPressEvent) -> None:
            self._on_interrupt()

        @bindings.add("c-d", filter=Condition(lambda: not self._buffer.text))
        def _end(event: KeyPressEvent) -> None:
            if self._on_eof is not None:
                self._on_eof()
            else:
                event.app.exit()

        live = ConditionalContainer(
            Window(FormattedTextControl(self._live_text), dont_extend_height=True),
            filter=Condition(lambda: bool(self._live())),
        )
        line = Window(
            BufferControl(
                self._buffer,
                input_processors=[BeforeInput(lambda: self._prompt, style="class:prompt")],
            ),
            dont_extend_height=True,
            wrap_lines=True,
        )
        return Application(
            layout=Layout(
                HSplit([live, line, CompletionsMenu(max_height=8)]), focused_element=line
            ),
            key_bindings=bindings,
            style=Style.from_dict({"prompt": "bold"}),
            full_screen=False,
            erase_when_done=True,
            # Streamed chunks arrive many a second; the screen is redrawn at most this often.
            min_redraw_interval=0.05,
            include_default_pygments_style=False,
        )


def _raise_sigint() -> None:
    """Ctrl-C stops the command as SIGINT does (exit code 130, tunnel/process/signals.py)."""
    signal.raise_signal(signal.SIGINT)
