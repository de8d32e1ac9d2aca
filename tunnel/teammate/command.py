"""`tunnel attach` and `tunnel acp`: the share link (an argument, TUNNEL_LINK or a file) and the
options become `AttachSettings`, then `run_attach` (tunnel/teammate/attach.py) runs the terminal
client; or `AcpSettings`, then `run_acp` (tunnel/teammate/acp_bridge.py) serves an editor.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tunnel.link.framings import FramingName
from tunnel.process.exit_codes import EXIT_CONFIG
from tunnel.process.logs import configure_logging

if TYPE_CHECKING:
    from tunnel.e2e.crypto import ShareLink

LinkArgument = Annotated[
    str | None,
    typer.Argument(
        envvar="TUNNEL_LINK",
        help="The share link (or set TUNNEL_LINK, or use --link-file, to keep it out of ps).",
        metavar="LINK",
        show_default=False,
    ),
]
LinkFileOption = Annotated[
    Path | None,
    typer.Option(metavar="FILE", help="Read the share link from this file."),
]


def attach_command(
    link: LinkArgument = None,
    link_file: LinkFileOption = None,
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
    no_bell: Annotated[
        bool,
        typer.Option(
            "--no-bell",
            envvar="TUNNEL_NO_BELL",
            help="Do not ring the terminal's bell when a permission request starts waiting"
            " (the prompt and the window title still show how many wait).",
        ),
    ] = False,
    conversation: Annotated[
        str | None,
        typer.Option(
            envvar="TUNNEL_ATTACH_CONVERSATION",
            metavar="ID",
            help="Show this conversation of the host's first (/list shows them, /switch goes to"
            " another). Default: the host's first conversation.",
            show_default=False,
        ),
    ] = None,
    framing: Annotated[
        FramingName,
        typer.Option(
            envvar="TUNNEL_ATTACH_FRAMING",
            help="The WebSocket library to dial the relay with: picows (pip install"
            " 'agent-tunnel[fast]') spends less CPU per message received (docs/performance.md).",
        ),
    ] = FramingName.websockets,
) -> None:
    """Attach to a shared session from this terminal: watch, and drive with a drive link."""
    # The client loads only now, so that `tunnel --help` and the other commands never do.
    import anyio

    from tunnel.teammate.attach import AttachSettings, run_attach

    configure_logging("warning")
    parsed = _share_link("attach", link, link_file, name)
    settings = AttachSettings(
        link=parsed,
        name=name,
        reconnect=reconnect,
        give_up_after=give_up_after,
        raw=raw,
        history=history,
        bell=not no_bell,
        conversation=_conversation(conversation),
        framing=_framing(framing),
    )
    raise typer.Exit(anyio.run(run_attach, settings))


def _framing(value: FramingName) -> str:
    """`--framing`, once its library is installed: else one line on stderr and exit code 2."""
    from tunnel.link.framings import check_framing

    try:
        return check_framing(value.value)
    except ValueError as exc:
        typer.echo(f"tunnel attach: {exc}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None


def _conversation(value: str | None) -> str | None:
    """`--conversation`, checked: a mistake is one line on stderr and exit code 2."""
    from tunnel.e2e.opening import MAX_CONVERSATION_LENGTH

    if value is not None and not 1 <= len(value) <= MAX_CONVERSATION_LENGTH:
        typer.echo(
            f"tunnel attach: --conversation is 1 to {MAX_CONVERSATION_LENGTH} characters", err=True
        )
        raise typer.Exit(EXIT_CONFIG)
    return value


def _share_link(command: str, link: str | None, link_file: Path | None, name: str) -> ShareLink:
    """The link from the argument, TUNNEL_LINK or --link-file, parsed, and the name checked;
    a mistake is one line on stderr and exit code 2."""
    from tunnel.e2e.crypto import ShareLink
    from tunnel.handshake import check_name

    if link_file is not None:
        try:
            link = link_file.read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            typer.echo(f"tunnel {command}: cannot read --link-file {link_file}: {reason}", err=True)
            raise typer.Exit(EXIT_CONFIG) from None
    if not link:
        typer.echo(
            f"tunnel {command}: give a share link (argument, TUNNEL_LINK or --link-file)", err=True
        )
        raise typer.Exit(EXIT_CONFIG)
    try:
        parsed = ShareLink.parse(link)
    except ValueError as exc:
        typer.echo(f"tunnel {command}: {exc}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None
    try:
        check_name(name)
    except ValueError as exc:
        typer.echo(f"tunnel {command}: --name: {exc}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None
    return parsed


def acp_command(
    link: LinkArgument = None,
    link_file: LinkFileOption = None,
    name: Annotated[
        str,
        typer.Option(envvar="TUNNEL_NAME", metavar="NAME", help="Your name, as the others see it."),
    ] = "editor",
    history: Annotated[
        int | None,
        typer.Option(
            envvar="TUNNEL_HISTORY",
            min=0,
            metavar="N",
            help="Replay the last N items of the conversation when the editor loads the"
            " session. Default: the host's default for a joiner (at most 200 items).",
            show_default=False,
        ),
    ] = None,
    give_up_after: Annotated[
        float | None,
        typer.Option(
            envvar="TUNNEL_GIVE_UP_AFTER",
            min=0,
            metavar="SECONDS",
            help="End (exit code 4) after this many seconds without being attached: the relay"
            " unreachable or the host offline. Default: keep trying.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve a shared session to an editor as an ACP agent on stdin and stdout (Zed's
    agent_servers): the editor watches, and drives with a drive link."""
    import anyio

    from tunnel.teammate.acp_bridge import AcpSettings, run_acp

    configure_logging("warning")
    parsed = _share_link("acp", link, link_file, name)
    settings = AcpSettings(link=parsed, name=name, history=history, give_up_after=give_up_after)
    raise typer.Exit(anyio.run(run_acp, settings))
