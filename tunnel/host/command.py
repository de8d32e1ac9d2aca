"""`tunnel host`: options and TUNNEL_HOST_* variables become `HostSettings`, then `run_host`."""

from __future__ import annotations

import enum
import logging
import signal
import sys
from pathlib import Path
from typing import Annotated

import anyio
import typer

from tunnel.crypto import ShareSecrets
from tunnel.host.echo import echo_handler
from tunnel.host.runner import ChannelHandler, Host, HostRefusedError, JoinHook
from tunnel.host.settings import HostSettings
from tunnel.identity import KeyFileError

EXIT_CONFIG = 2
"""Unusable options or key files."""

EXIT_REFUSED = 3
"""The relay refused this host (signature or key not accepted)."""

logger = logging.getLogger("tunnel.host")


class LogLevel(enum.StrEnum):
    """Log levels accepted by --log-level."""

    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


def print_links(host: Host) -> None:
    """Print the share links, one per line, on stdout."""
    print(f"view link:  {host.view_link}", flush=True)
    print(f"drive link: {host.drive_link}", flush=True)


async def serve_until_signal(host: Host) -> None:
    """Run `host` until SIGINT or SIGTERM; print its links once registered."""
    async with anyio.create_task_group() as tg:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            await tg.start(_run, host)
            print_links(host)
            async for signum in signals:
                logger.info("%s: shutting down", signal.Signals(signum).name)
                break
        tg.cancel_scope.cancel()


async def _run(host: Host, *, task_status: anyio.abc.TaskStatus[Host]) -> None:
    await host.run(task_status=task_status)


def run_host_command(
    settings: HostSettings,
    handler: ChannelHandler,
    *,
    on_join: JoinHook | None = None,
    new_links: bool = False,
) -> int:
    """The body of `tunnel host` with a given handler; returns the exit code."""
    try:
        if new_links:
            ShareSecrets.generate().save(settings.resolved_secrets_file)
        host = Host(settings, handler, on_join=on_join)
    except (KeyFileError, OSError, ValueError) as exc:
        typer.echo(f"tunnel host: {exc}", err=True)
        return EXIT_CONFIG
    print(f"host id: {host.host_id}", flush=True)
    try:
        anyio.run(serve_until_signal, host)
    except HostRefusedError as exc:
        typer.echo(f"tunnel host: {exc}", err=True)
        return EXIT_REFUSED
    except BaseExceptionGroup as group:
        refused = group.subgroup(HostRefusedError)
        if refused is None:
            raise
        typer.echo(f"tunnel host: {refused.exceptions[0]}", err=True)
        return EXIT_REFUSED
    return 0


def host_command(
    relay: Annotated[
        str,
        typer.Option(
            "--relay", envvar="TUNNEL_HOST_RELAY", help="The relay's URL (https://relay.example)."
        ),
    ],
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
    new_links: Annotated[
        bool,
        typer.Option(
            "--new-links", help="Revoke the previous share links and make new ones first."
        ),
    ] = False,
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
    ] = LogLevel.info,
) -> None:
    """Share this machine's agent session through a relay and print the share links."""
    logging.basicConfig(
        level=log_level.value.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if log_level is not LogLevel.debug:
        logging.getLogger("websockets").setLevel(logging.WARNING)
    try:
        settings = HostSettings(
            relay_url=relay,
            key_file=key_file,
            name=name,
            ping_interval=ping_interval,
            ping_timeout=ping_timeout,
        )
    except ValueError as exc:
        typer.echo(f"tunnel host: {exc}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None
    if not echo:
        typer.echo("tunnel host: no agent handler is available in this build", err=True)
        raise typer.Exit(EXIT_CONFIG)
    raise typer.Exit(run_host_command(settings, echo_handler, new_links=new_links))
