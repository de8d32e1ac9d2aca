"""`tunnel attach`: the share link (an argument, TUNNEL_LINK or a file) and the options become
`AttachSettings`, then `run_attach` (tunnel/teammate/attach.py) runs the terminal client.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tunnel.process.exit_codes import EXIT_CONFIG
from tunnel.process.logs import configure_logging


def attach_command(
    link: Annotated[
        str | None,
        typer.Argument(
            envvar="TUNNEL_LINK",
            help="The share link (or set TUNNEL_LINK, or use --link-file, to keep it out of ps).",
            metavar="LINK",
            show_default=False,
        ),
    ] = None,
    link_file: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="Read the share link from this file."),
    ] = None,
    name: Annotated[
        str,
        typer.Option(envvar="TUNNEL_NAME", metavar="NAME", help="Your name, as the others see it."),
    ] = "teammate",
    reconnect: Annotated[
        bool, typer.Option(help="Reconnect by itself when the link drops.")
    ] = True,
    give_up_after: Annotated[
        float | None,
        typer.Option(
            envvar="TUNNEL_GIVE_UP_AFTER",
            min=0,
            metavar="SECONDS",
            help="Stop (exit code 4) after this many seconds without being attached: the relay"
            " unreachable or the host offline. Default: keep trying.",
            show_default=False,
        ),
    ] = None,
    raw: Annotated[
        bool,
        typer.Option(
            "--raw",
            help="Show a terminal (pty:) agent's screen as it is, its escape sequences included,"
            " so the program draws it in this terminal; on a terminal, every key then goes to"
            " the program (Enter alone, Ctrl-C) until Ctrl-] leaves. Names, prompts, errors and"
            " a chat agent's output are shown with control characters made visible either way.",
        ),
    ] = False,
    history: Annotated[
        int | None,
        typer.Option(
            envvar="TUNNEL_HISTORY",
            min=0,
            metavar="N",
            help="Show the last N items of the conversation when attaching (and of what was"
            " missed after a reconnect). Default: as many as the terminal has rows.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Attach to a shared session from this terminal: watch, and drive with a drive link."""
    # The client loads only now, so that `tunnel --help` and the other commands never do.
    import anyio

    from tunnel.e2e.crypto import ShareLink
    from tunnel.handshake import check_name
    from tunnel.teammate.attach import AttachSettings, run_attach

    configure_logging("warning")
    if link_file is not None:
        try:
            link = link_file.read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            typer.echo(f"tunnel attach: cannot read --link-file {link_file}: {reason}", err=True)
            raise typer.Exit(EXIT_CONFIG) from None
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
    try:
        check_name(name)
    except ValueError as exc:
        typer.echo(f"tunnel attach: --name: {exc}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None
    settings = AttachSettings(
        link=parsed,
        name=name,
        reconnect=reconnect,
        give_up_after=give_up_after,
        raw=raw,
        history=history,
    )
    raise typer.Exit(anyio.run(run_attach, settings))
