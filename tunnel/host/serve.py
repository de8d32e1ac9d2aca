"""How `tunnel host` runs, once its options are settings: one body for whatever serves the
channels (the shared agent session, or the bare echo handler used to check a relay setup).

It runs until SIGINT/SIGTERM or /quit, prints the host id and the share links once registered,
and says every mistake in one line with an exit code.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, Protocol

import anyio
import typer
from anyio.abc import TaskGroup, TaskStatus
from rich.console import Console

from tunnel.e2e.crypto import ShareSecrets
from tunnel.e2e.identity import KeyFileError
from tunnel.host.echo import echo_handler
from tunnel.host.invitations import Invitations
from tunnel.host.runner import Host, HostRefusedError
from tunnel.host.settings import HostSettings
from tunnel.host.share import (
    Shared,
    ShareSettings,
    print_invitations,
    print_links,
    share_until_quit,
)
from tunnel.process.allocator import keep_freed_memory
from tunnel.process.exit_codes import EXIT_CONFIG, EXIT_REFUSED
from tunnel.process.signals import exit_code_after, run_until_signal
from tunnel.terminal.sanitize import printable


class Serve(Protocol):
    """Serves channels until cancelled (or until it cancels `scope`: the whole command); reports
    the registered `Host` through task_status."""

    def __call__(
        self, scope: anyio.CancelScope, *, task_status: TaskStatus[Host]
    ) -> Coroutine[Any, Any, None]: ...


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
    settings: HostSettings,
    serve: Serve,
    *,
    new_links: bool = False,
    banner: str | None = None,
    invite: tuple[tuple[str, str], ...] = (),
) -> int:
    """The body of `tunnel host` for any `serve`; returns the exit code.

    `banner` (rich markup) is printed after the links once registered. `invite` holds
    (name, role) pairs (`--invite`): each gets a personal link unless it has one of that role
    already, which stays as it was.
    """

    async def main(tg: TaskGroup) -> None:
        host: Host = await tg.start(serve, tg.cancel_scope)
        # Plain prints: scripts read these lines; rich would wrap a long link.
        print(f"host id: {host.host_id}", flush=True)
        print_links(host)
        print_invitations(host)
        if banner is not None:
            Console(highlight=False).print(banner)

    keep_freed_memory()
    try:
        if new_links:
            ShareSecrets.generate().save(settings.resolved_secrets_file)
        if invite:
            Invitations.load(settings.resolved_invitations_file).ensure_all(invite)
        stopped_by = anyio.run(run_until_signal, main)
    except (KeyFileError, OSError, ValueError) as exc:
        # Unusable key file, log file, workspace or agent spec: say which, no traceback.
        typer.echo(f"tunnel host: {printable(str(exc))}", err=True)
        return EXIT_CONFIG
    except HostRefusedError as exc:
        # The reason came from the relay: printed as text, never as terminal controls.
        typer.echo(f"tunnel host: {printable(str(exc))}", err=True)
        return EXIT_REFUSED
    return exit_code_after(stopped_by)
