"""`tunnel host`: options and TUNNEL_HOST_* variables become `ShareSettings`, then `run_share`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import anyio
import typer
from rich.console import Console
from rich.markup import escape

from tunnel.e2e.crypto import ShareSecrets
from tunnel.e2e.identity import KeyFileError
from tunnel.host.command import EXIT_CONFIG, EXIT_REFUSED, print_links, run_host_command
from tunnel.host.echo import echo_handler
from tunnel.host.runner import HostRefusedError
from tunnel.host.settings import HostSettings
from tunnel.host.share import Shared, ShareSettings, share_until_quit
from tunnel.process.groups import unwrap_group
from tunnel.process.logs import LogLevel, configure_logging
from tunnel.process.signals import cancel_on_signal


async def share_until_signal(settings: ShareSettings, console: Console) -> None:
    """Run the share until SIGINT/SIGTERM (or /quit); print the links once registered.

    Signals are watched from the start, so a host still trying to reach its relay stops too.
    """
    async with unwrap_group(), anyio.create_task_group() as tg:
        tg.start_soon(cancel_on_signal, tg.cancel_scope)
        shared: Shared = await tg.start(share_until_quit, settings, console, tg.cancel_scope)
        # Plain prints: scripts read these lines; rich would wrap a long link.
        print(f"host id: {shared.host.host_id}", flush=True)
        print_links(shared.host)
        console.print(
            f"[dim]sharing {escape(settings.agent)} in {escape(str(settings.workspace))};"
            " type a prompt, /allow or /deny a request, /quit to stop[/dim]"
        )


def host_command(
    relay: Annotated[
        str,
        typer.Option(
            "--relay", envvar="TUNNEL_HOST_RELAY", help="The relay's URL (https://relay.example)."
        ),
    ],
    agent: Annotated[
        str,
        typer.Option(
            envvar="TUNNEL_HOST_AGENT",
            help='The agent to share: demo, "acp:COMMAND ARGS..." or "pty:COMMAND ARGS...".',
        ),
    ] = "demo",
    workspace: Annotated[
        Path,
        typer.Option(
            envvar="TUNNEL_HOST_WORKSPACE",
            help="The agent's working directory; ACP agents get files inside it only.",
        ),
    ] = Path(),
    log_db: Annotated[
        Path | None,
        typer.Option(
            envvar="TUNNEL_LOG_DB", help="The conversation log (SQLite); default: the data dir."
        ),
    ] = None,
    conversation: Annotated[
        str,
        typer.Option(
            envvar="TUNNEL_HOST_CONVERSATION",
            help="Conversation id in the log; the same id resumes an earlier session.",
        ),
    ] = "main",
    key_file: Annotated[
        Path | None,
        typer.Option(
            envvar="TUNNEL_HOST_KEY_FILE",
            help="The host's private key (created if missing); default: the user config dir.",
        ),
    ] = None,
    name: Annotated[
        str, typer.Option(envvar="TUNNEL_HOST_NAME", help="Your name, as teammates see it.")
    ] = "host",
    approve: Annotated[
        bool,
        typer.Option("--approve", help="Ask here before each teammate is admitted."),
    ] = False,
    new_links: Annotated[
        bool,
        typer.Option(
            "--new-links", help="Revoke the previous share links and make new ones first."
        ),
    ] = False,
    interactive: Annotated[
        bool,
        typer.Option(help="Read prompts and answers from standard input."),
    ] = True,
    ping_interval: Annotated[
        float,
        typer.Option(envvar="TUNNEL_HOST_PING_INTERVAL", help="Seconds between keepalive pings."),
    ] = 20.0,
    ping_timeout: Annotated[
        float,
        typer.Option(envvar="TUNNEL_HOST_PING_TIMEOUT", help="Seconds to wait for a pong."),
    ] = 20.0,
    echo: Annotated[bool, typer.Option("--echo", hidden=True)] = False,
    log_level: Annotated[
        LogLevel, typer.Option(envvar="TUNNEL_HOST_LOG_LEVEL", help="Log verbosity.")
    ] = LogLevel.warning,
) -> None:
    """Share an agent session through a relay and print the view and drive links."""
    configure_logging(log_level.value)
    try:
        host = HostSettings(
            relay_url=relay,
            key_file=key_file,
            name=name,
            ping_interval=ping_interval,
            ping_timeout=ping_timeout,
        )
    except ValueError as exc:
        typer.echo(f"tunnel host: {exc}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None
    if echo:  # a bare echo handler: used to test the link layer on its own
        raise typer.Exit(run_host_command(host, echo_handler, new_links=new_links))
    settings = ShareSettings(
        host=host,
        agent=agent,
        workspace=workspace,
        log_db=log_db,
        conversation_id=conversation,
        approve=approve,
        interactive=interactive,
    )
    raise typer.Exit(run_share_command(settings, new_links=new_links))


def run_share_command(settings: ShareSettings, *, new_links: bool = False) -> int:
    """The body of `tunnel host`; returns the exit code."""
    try:
        if new_links:
            ShareSecrets.generate().save(settings.host.resolved_secrets_file)
        anyio.run(share_until_signal, settings, Console(highlight=False))
    except (KeyFileError, OSError, ValueError) as exc:
        # Unusable key file, log file, workspace or agent spec: say which, no traceback.
        typer.echo(f"tunnel host: {exc}", err=True)
        return EXIT_CONFIG
    except HostRefusedError as exc:
        typer.echo(f"tunnel host: {exc}", err=True)
        return EXIT_REFUSED
    return 0
