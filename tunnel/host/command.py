"""Running a host from the command line: exit codes and the printed share links.

`tunnel host` itself (tunnel/share_command.py) builds its settings and calls these.
"""

from __future__ import annotations

import logging

import anyio
import typer

from tunnel.e2e.crypto import ShareSecrets
from tunnel.e2e.identity import KeyFileError
from tunnel.host.runner import ChannelHandler, Host, HostRefusedError, JoinHook
from tunnel.host.settings import HostSettings
from tunnel.process.signals import cancel_on_signal

EXIT_CONFIG = 2
"""Unusable options or key files."""

EXIT_REFUSED = 3
"""The relay refused this host (signature or key not accepted)."""

logger = logging.getLogger("tunnel.host")


def print_links(host: Host) -> None:
    """Print the share links, one per line, on stdout."""
    print(f"view link:  {host.view_link}", flush=True)
    print(f"drive link: {host.drive_link}", flush=True)


async def serve_until_signal(host: Host) -> None:
    """Run `host` until SIGINT or SIGTERM; print its links once registered.

    The signals are watched from the start: a host still trying to reach its relay stops too.
    """
    async with anyio.create_task_group() as tg:
        tg.start_soon(cancel_on_signal, tg.cancel_scope)
        await tg.start(_run, host)
        print_links(host)


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
