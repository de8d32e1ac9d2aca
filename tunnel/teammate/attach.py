"""`tunnel attach LINK`: a terminal teammate client.

Watches the shared session and, with a drive link, prompts and answers permissions from the
keyboard. Reconnects by itself and resubscribes after the last item it holds, so a dropped link
shows no gap and no duplicate.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TextIO

import anyio
import typer
from rich.console import Console
from rich.markup import escape

from tunnel.app import host_messages as incoming
from tunnel.app.errors import BadRequest
from tunnel.app.requests import Request, Subscribe, encode_request
from tunnel.e2e.crypto import ShareLink
from tunnel.process.backoff import TEAMMATE_MAX_BACKOFF, Backoff
from tunnel.process.exit_codes import EXIT_CONFIG
from tunnel.process.groups import unwrap_group
from tunnel.process.logs import configure_logging
from tunnel.proto.codes import FINAL_CODES
from tunnel.teammate.client import TeammateError, TeammateSession, connect_teammate
from tunnel.terminal.commands import HELP, Quit, Revoke, Say, parse_line
from tunnel.terminal.lines import stdin_lines
from tunnel.terminal.render import render_event, render_item
from tunnel.terminal.view import ConversationView

logger = logging.getLogger("tunnel.attach")


@dataclass(frozen=True, slots=True, kw_only=True)
class AttachSettings:
    """Everything `tunnel attach` needs."""

    link: ShareLink
    name: str
    reconnect: bool = True
    max_backoff: float = TEAMMATE_MAX_BACKOFF


class _Quit(Exception):
    pass


class Attachment:
    """One attached terminal: prints what arrives, sends what the user types."""

    def __init__(self, settings: AttachSettings, *, console: Console, stdin: TextIO) -> None:
        self._settings = settings
        self._console = console
        self._stdin = stdin
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
                code = 0
            tg.cancel_scope.cancel()
        return code

    async def _read_keyboard(self) -> None:
        async with stdin_lines(self._stdin) as lines:
            async for line in lines:
                await self._lines_send.send(line)
        await self._lines_send.send("/quit")  # end of input

    async def _attach_forever(self) -> int:
        while True:
            try:
                # The client's task groups wrap what they raise: look through the wrapping.
                async with unwrap_group():
                    await self._attach_once()
            except TeammateError as exc:
                delay = self._backoff.next_delay()
                if (exc.by_peer and exc.code in FINAL_CODES) or not self._settings.reconnect:
                    self._console.print(f"[bold red]{escape(str(exc))}[/bold red]")
                    return EXIT_CONFIG
                self._console.print(
                    f"[yellow]{escape(str(exc))}; retrying in {delay:.1f}s[/yellow]"
                )
            except OSError as exc:
                delay = self._backoff.next_delay()
                if not self._settings.reconnect:
                    self._console.print(
                        f"[bold red]cannot reach the relay: {escape(str(exc))}[/bold red]"
                    )
                    return EXIT_CONFIG
                self._console.print(f"[yellow]cannot reach the relay; retrying in {delay:.1f}s")
            else:
                return 0
            await anyio.sleep(delay)

    async def _attach_once(self) -> None:
        async with connect_teammate(self._settings.link, name=self._settings.name) as channel:
            await channel.send(encode_request(Subscribe(after=self._view.last_seq)))
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._forward_lines, channel)
                while True:
                    self._show(await channel.receive())

    async def _forward_lines(self, channel: TeammateSession) -> None:
        async for line in self._lines_receive:
            command = parse_line(line, self._view.pending)
            if command is None:
                continue
            if isinstance(command, Quit):
                raise _Quit
            if isinstance(command, Say):
                self._console.print(f"[dim]{escape(command.text)}[/dim]")
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
                self._terminal = message.agent_kind == "terminal"
                self._console.print(
                    f"[bold]attached as {escape(message.name)} ({escape(message.role)})[/bold]"
                    + (f" [dim]{HELP}[/dim]" if self._settings.link.role == "drive" else "")
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
                self._console.print(f"[dim]attached: {escape(names)}[/dim]")
            case incoming.Error():
                self._console.print(f"[red]refused: {escape(message.message)}[/red]")

    def _show_item(self, item: Any) -> None:
        if not isinstance(item, Mapping) or not self._view.accept(item):
            return
        data = item.get("data")
        if self._terminal and item.get("type") == "terminal" and isinstance(data, Mapping):
            # Terminal output is shown raw so the program's own escapes draw the screen.
            self._console.file.write(str(data.get("text", "")))
            self._console.file.flush()
            return
        self._console.print(render_item(item))


async def run_attach(settings: AttachSettings) -> int:
    """The programmatic API behind `tunnel attach`; returns the process exit code."""
    attachment = Attachment(settings, console=Console(highlight=False), stdin=sys.stdin)
    return await attachment.run()


def attach_command(
    link: Annotated[
        str | None,
        typer.Argument(
            envvar="TUNNEL_LINK",
            help="The share link (or set TUNNEL_LINK, or use --link-file, to keep it out of ps).",
            show_default=False,
        ),
    ] = None,
    link_file: Annotated[
        Path | None,
        typer.Option(help="Read the share link from this file."),
    ] = None,
    name: Annotated[
        str, typer.Option(envvar="TUNNEL_NAME", help="Your name, as the others see it.")
    ] = "teammate",
    reconnect: Annotated[
        bool, typer.Option(help="Reconnect by itself when the link drops.")
    ] = True,
) -> None:
    """Attach to a shared session from this terminal: watch, and drive with a drive link."""
    configure_logging("warning")
    if link_file is not None:
        link = link_file.read_text().strip()
    if not link:
        typer.echo(
            "tunnel attach: give a share link (argument, TUNNEL_LINK or --link-file)", err=True
        )
        raise typer.Exit(EXIT_CONFIG)
    try:
        parsed = ShareLink.parse(link)
    except ValueError as exc:
        typer.echo(f"tunnel attach: {exc}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None
    settings = AttachSettings(link=parsed, name=name, reconnect=reconnect)
    raise typer.Exit(anyio.run(run_attach, settings))
