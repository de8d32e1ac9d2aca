"""`tunnel attach LINK`: a terminal teammate client (its options: tunnel/teammate/command.py).

Watches the shared session and, with a drive link, prompts and answers permissions from the
keyboard. Reconnects by itself and resubscribes after the last item it holds, so a dropped link
shows no gap and no duplicate. The conversation goes to stdout; what it is waiting for (a relay
it cannot reach, a host that is offline) and why it stops go to stderr. Everything that came over
the wire is printed through `printable()` (tunnel/terminal/sanitize.py); only a `pty:` agent's
own screen, and only with `--raw`, reaches the terminal as it is.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TextIO

import anyio
from anyio.abc import TaskGroup
from rich.console import Console
from rich.markup import escape

from tunnel.app import host_messages as incoming
from tunnel.app.errors import BadRequest
from tunnel.app.requests import Request, Subscribe, encode_request
from tunnel.e2e.crypto import ShareLink
from tunnel.handshake import check_name
from tunnel.process.backoff import TEAMMATE_MAX_BACKOFF, Backoff
from tunnel.process.exit_codes import EXIT_OK, EXIT_REFUSED, EXIT_UNREACHABLE
from tunnel.process.groups import unwrap_group
from tunnel.process.signals import exit_code_after, run_until_signal
from tunnel.proto.codes import FINAL_CODES, CloseCode
from tunnel.teammate.client import TeammateError, TeammateSession, connect_teammate
from tunnel.terminal.commands import Quit, Revoke, Say, parse_line
from tunnel.terminal.lines import stdin_lines
from tunnel.terminal.render import render_event, render_item
from tunnel.terminal.sanitize import printable
from tunnel.terminal.view import ConversationView

logger = logging.getLogger("tunnel.attach")

HOST_GONE_HINT_AFTER = 3
""""Host offline" answers in a row after which the user is told, once, that the link may be
wrong: a mistyped host id looks exactly like a host that is not online."""

HOST_GONE_HINT = "no host is online for this link: it may be wrong, or the host has not started"


def sandbox_text(sandbox: incoming.SandboxInfo) -> str:
    """The line that tells a teammate, on attach, how far the agent reaches on the host."""
    if not sandbox.enabled:
        return "the agent is not sandboxed: it can do whatever the host's user can"
    writable = ", ".join(sandbox.writable) or "nothing"
    network = "network on" if sandbox.network else "no network"
    return f"the agent runs in a sandbox: it can write only in {writable}; {network}"


@dataclass(frozen=True, slots=True, kw_only=True)
class AttachSettings:
    """Everything `tunnel attach` needs."""

    link: ShareLink
    name: str
    """The display name the others see (1 to 64 characters)."""

    reconnect: bool = True
    """Try again when the relay cannot be reached or the link drops."""

    max_backoff: float = TEAMMATE_MAX_BACKOFF
    """Cap of the delay between attempts, in seconds."""

    give_up_after: float | None = None
    """Seconds without being attached (relay unreachable, host offline) after which to stop
    with EXIT_UNREACHABLE; None keeps trying."""

    raw: bool = False
    """Write a `pty:` agent's screen output to this terminal as it is, its escape sequences
    included, so the program draws its own screen. Off, it is escaped like everything else;
    on, everything else still is."""

    def __post_init__(self) -> None:
        check_name(self.name)
        if self.give_up_after is not None and not self.give_up_after >= 0:
            raise ValueError("give_up_after is a number of seconds, 0 or more")


class _Quit(Exception):
    pass


class Attachment:
    """One attached terminal: prints what arrives, sends what the user types."""

    def __init__(
        self,
        settings: AttachSettings,
        *,
        console: Console,
        stdin: TextIO,
        status: Console | None = None,
    ) -> None:
        self._settings = settings
        self._console = console
        # What it waits for goes to stderr: stdout is the conversation's.
        self._status = status if status is not None else Console(stderr=True, highlight=False)
        self._stdin = stdin
        self._attached = False
        self._host_gone = 0
        self._hinted = False
        self._view = ConversationView()
        self._terminal = False
        self._backoff = Backoff(maximum=settings.max_backoff)
        # Lines typed while disconnected wait here; bounded so a paste storm cannot grow memory.
        self._lines_send, self._lines_receive = anyio.create_memory_object_stream[str](16)

    async def run(self) -> int:
        """Attach until the user quits or the link is refused; returns the exit code."""
        async with anyio.create_task_group() as tg:
            if self._settings.link.role == "drive":
                tg.start_soon(self._read_keyboard)
            else:
                self._console.print("[dim]view-only link: you can watch but not drive[/dim]")
            try:
                code = await self._attach_forever()
            except _Quit:
                code = EXIT_OK
            tg.cancel_scope.cancel()
        return code

    async def _read_keyboard(self) -> None:
        async with stdin_lines(self._stdin) as lines:
            async for line in lines:
                await self._lines_send.send(line)
        await self._lines_send.send("/quit")  # end of input

    async def _attach_forever(self) -> int:
        settings = self._settings
        waiting_since = anyio.current_time()
        while True:
            host_gone = False
            try:
                # The client's task groups wrap what they raise: look through the wrapping.
                async with unwrap_group():
                    await self._attach_once()
            except TeammateError as exc:
                if exc.by_peer and exc.code in FINAL_CODES:
                    self._stop(str(exc))
                    return EXIT_REFUSED
                problem = str(exc)
                host_gone = exc.code == CloseCode.HOST_GONE
            except OSError as exc:
                problem = f"cannot reach the relay at {settings.link.relay_url}: {exc}"
            else:
                return EXIT_OK
            if self._attached:
                # It was attached until now: the wait starts over.
                self._attached = False
                waiting_since = anyio.current_time()
            self._count_host_gone(host_gone)
            delay = self._backoff.next_delay()
            waited = anyio.current_time() - waiting_since
            if not settings.reconnect:
                self._stop(problem)
                return EXIT_UNREACHABLE
            if settings.give_up_after is not None:
                if waited >= settings.give_up_after:
                    self._stop(f"{problem}; gave up after {settings.give_up_after:g} s")
                    return EXIT_UNREACHABLE
                # The last attempt is made at the deadline, not after it.
                delay = min(delay, settings.give_up_after - waited)
            self._status.print(
                f"[yellow]{escape(printable(problem))}; retrying in {delay:.1f} s[/yellow]",
                soft_wrap=True,
            )
            await anyio.sleep(delay)

    def _count_host_gone(self, host_gone: bool) -> None:
        self._host_gone = self._host_gone + 1 if host_gone else 0
        if self._host_gone >= HOST_GONE_HINT_AFTER and not self._hinted:
            self._hinted = True
            self._status.print(f"[bold]{HOST_GONE_HINT}[/bold]", soft_wrap=True)

    def _stop(self, reason: str) -> None:
        """Say why attach stops: one line on stderr, like every command's last word."""
        # The reason may be a close reason the relay or the host chose.
        print(f"tunnel attach: {printable(reason)}", file=sys.stderr, flush=True)

    async def _attach_once(self) -> None:
        async with connect_teammate(self._settings.link, name=self._settings.name) as channel:
            await channel.send(encode_request(Subscribe(after=self._view.last_seq)))
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._forward_lines, channel)
                while True:
                    self._show(await channel.receive())

    async def _forward_lines(self, channel: TeammateSession) -> None:
        async for line in self._lines_receive:
            command = parse_line(line, self._view)
            if command is None:
                continue
            if isinstance(command, Quit):
                raise _Quit
            if isinstance(command, Say):
                # It may echo what the agent named: option names and ids, its commands.
                self._console.print(f"[dim]{escape(printable(command.text))}[/dim]")
                continue
            if isinstance(command, Revoke):
                self._console.print("[dim]only the host can revoke the links[/dim]")
                continue
            request: Request = command
            await channel.send(encode_request(request))

    def _show(self, plaintext: bytes) -> None:
        try:
            message = incoming.parse(plaintext)
        except BadRequest:
            logger.warning("dropped a malformed message from the host")
            return
        match message:
            case incoming.Ready():
                # The host answered: this attachment works, so the next outage starts over.
                self._backoff.reset()
                self._attached = True
                self._host_gone = 0
                self._terminal = message.agent_kind == "terminal"
                name, role = printable(message.name), printable(message.role)
                self._console.print(
                    f"[bold]attached as {escape(name)} ({escape(role)})[/bold]"
                    + (
                        " [dim]/help lists the commands[/dim]"
                        if self._settings.link.role == "drive"
                        else ""
                    )
                )
                if message.sandbox is not None:
                    sandbox = printable(sandbox_text(message.sandbox))
                    self._console.print(f"[dim]{escape(sandbox)}[/dim]")
                if self._terminal and not self._settings.raw:
                    self._console.print(
                        "[dim]the agent is a terminal program: its screen is shown with escape"
                        " sequences made visible (--raw shows it as it is)[/dim]"
                    )
            case incoming.Snapshot():
                if message.reset:
                    # The host's log is not the one we saw (a new log under the same
                    # conversation).
                    self._view = ConversationView()
                    self._console.print("[dim]the host's conversation log starts over[/dim]")
                for item in message.items:
                    self._show_item(item)
            case incoming.ItemMessage():
                self._show_item(message.item)
            case incoming.EventMessage():
                line = render_event(message.event)
                if line is not None:
                    self._console.print(line)
            case incoming.PresenceMessage():
                names = ", ".join(f"{m.name} ({m.role})" for m in message.members)
                self._console.print(f"[dim]attached: {escape(printable(names))}[/dim]")
            case incoming.Error():
                self._console.print(f"[red]refused: {escape(printable(message.message))}[/red]")

    def _show_item(self, item: Any) -> None:
        if not isinstance(item, Mapping) or not self._view.accept(item):
            return
        if item.get("type") != "terminal":
            self._console.print(render_item(item))
            return
        data = item.get("data")
        if self._settings.raw and self._terminal and isinstance(data, Mapping):
            # The one exception (docs/security.md, "What a terminal prints"): with --raw, a
            # terminal agent's screen output is written as it is, so its escapes draw the screen.
            self._console.file.write(str(data.get("text", "")))
            self._console.file.flush()
            return
        # Output chunks follow each other with no line break of their own.
        self._console.print(render_item(item), end="", soft_wrap=True)


async def run_attach(settings: AttachSettings) -> int:
    """The programmatic API behind `tunnel attach`; returns the process exit code.

    Runs until the user quits, the link is refused, attach gives up, or SIGINT/SIGTERM.
    """
    attachment = Attachment(settings, console=Console(highlight=False), stdin=sys.stdin)
    code = EXIT_OK

    async def main(tg: TaskGroup) -> None:
        nonlocal code
        code = await attachment.run()
        tg.cancel_scope.cancel()

    stopped_by = await run_until_signal(main)
    return code if stopped_by is None else exit_code_after(stopped_by)
