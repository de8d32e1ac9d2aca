"""`tunnel host`: options and TUNNEL_HOST_* variables become settings; one body serves them.

Whatever serves the channels (the shared agent session, or the bare echo handler used to check
a relay setup), the command runs it the same way: until SIGINT/SIGTERM or /quit, printing the
host id and the share links once registered, with one line and an exit code for every mistake.
"""

from __future__ import annotations

from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any, Protocol

import anyio
import typer
from anyio.abc import TaskGroup, TaskStatus
from rich.console import Console
from rich.markup import escape

from tunnel.e2e.crypto import ShareSecrets
from tunnel.e2e.identity import KeyFileError
from tunnel.host.echo import echo_handler
from tunnel.host.runner import Host, HostRefusedError
from tunnel.host.settings import HostSettings
from tunnel.host.share import Shared, ShareSettings, print_links, share_until_quit
from tunnel.process.exit_codes import EXIT_CONFIG, EXIT_OK, EXIT_REFUSED
from tunnel.process.logs import LogLevel, configure_logging
from tunnel.process.signals import run_until_signal


class Serve(Protocol):
    """Serves channels until cancelled (or until it cancels `scope`: the whole command); reports
    the registered `Host` through task_status."""

    def __call__(
        self, scope: anyio.CancelScope, *, task_status: TaskStatus[Host]
    ) -> Coroutine[Any, Any, None]: ...


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
        raise typer.Exit(run_host_command(host, serve_echo(host), new_links=new_links))
    settings = ShareSettings(
        host=host,
        agent=agent,
        workspace=workspace,
        log_db=log_db,
        conversation_id=conversation,
        approve=approve,
        interactive=interactive,
    )
    banner = (
        f"[dim]sharing {escape(settings.agent)} in {escape(str(settings.workspace))};"
        " type a prompt, /allow or /deny a request, /quit to stop[/dim]"
    )
    raise typer.Exit(
        run_host_command(host, serve_share(settings), new_links=new_links, banner=banner)
    )


def serve_share(settings: ShareSettings) -> Serve:
    """Serve the shared agent session (`run_share`); the host user's /quit ends the command."""

    async def serve(scope: anyio.CancelScope, *, task_status: TaskStatus[Host]) -> None:
        async with anyio.create_task_group() as tg:
            console = Console(highlight=False)
            shared: Shared = await tg.start(share_until_quit, settings, console, scope)
            task_status.started(shared.host)

    return serve


def serve_echo(settings: HostSettings) -> Serve:
    """Serve every channel with `echo_handler`: checks a relay setup without an agent."""

    async def serve(scope: anyio.CancelScope, *, task_status: TaskStatus[Host]) -> None:
        await Host(settings, echo_handler).run(task_status=task_status)

    return serve


def run_host_command(
    settings: HostSettings, serve: Serve, *, new_links: bool = False, banner: str | None = None
) -> int:
    """The body of `tunnel host` for any `serve`; returns the exit code.

    `banner` (rich markup) is printed after the links once registered.
    """

    async def main(tg: TaskGroup) -> None:
        host: Host = await tg.start(serve, tg.cancel_scope)
        # Plain prints: scripts read these lines; rich would wrap a long link.
        print(f"host id: {host.host_id}", flush=True)
        print_links(host)
        if banner is not None:
            Console(highlight=False).print(banner)

    try:
        if new_links:
            ShareSecrets.generate().save(settings.resolved_secrets_file)
        anyio.run(run_until_signal, main)
    except (KeyFileError, OSError, ValueError) as exc:
        # Unusable key file, log file, workspace or agent spec: say which, no traceback.
        typer.echo(f"tunnel host: {exc}", err=True)
        return EXIT_CONFIG
    except HostRefusedError as exc:
        typer.echo(f"tunnel host: {exc}", err=True)
        return EXIT_REFUSED
    return EXIT_OK
