"""`tunnel demo`: a relay and a host with the built-in demo agent on loopback, and the links."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import anyio
import typer
from anyio.abc import TaskGroup
from rich.console import Console
from rich.markup import escape

from tunnel.host.settings import HostSettings
from tunnel.host.share import Shared, ShareSettings, share_until_quit
from tunnel.process.exit_codes import EXIT_CONFIG
from tunnel.process.logs import configure_logging
from tunnel.process.signals import run_until_signal
from tunnel.relay.server import run as run_relay
from tunnel.relay.settings import RelaySettings


async def run_demo(
    *, port: int, share: ShareSettings | None = None, console: Console | None = None
) -> None:
    """Run the relay and the shared demo session until SIGINT/SIGTERM or /quit."""
    shown = console if console is not None else Console(highlight=False)

    async def main(tg: TaskGroup) -> None:
        bound = await tg.start(run_relay, RelaySettings(host="127.0.0.1", port=port))
        relay_url = f"http://127.0.0.1:{bound}"
        # The port may have been picked by the OS: the host dials the one actually bound.
        base = share or ShareSettings(host=HostSettings(relay_url=relay_url))
        settings = replace(base, host=replace(base.host, relay_url=relay_url))
        shared: Shared = await tg.start(share_until_quit, settings, shown, tg.cancel_scope)
        shown.print(
            "\n[bold]Open the drive link in a browser to co-drive, the view link to watch:[/bold]"
        )
        shown.print(f"  drive: {escape(str(shared.host.drive_link))}", soft_wrap=True)
        shown.print(f"  view:  {escape(str(shared.host.view_link))}", soft_wrap=True)
        shown.print("[dim]Type a prompt here too. Ctrl-C stops the demo.[/dim]\n")

    await run_until_signal(main)


def demo_command(
    port: Annotated[
        int, typer.Option(envvar="TUNNEL_DEMO_PORT", help="Loopback port for the relay.")
    ] = 8765,
    log_db: Annotated[
        Path | None,
        typer.Option(envvar="TUNNEL_LOG_DB", help="Conversation log file; default: data dir."),
    ] = None,
    key_file: Annotated[
        Path | None,
        typer.Option(envvar="TUNNEL_HOST_KEY_FILE", help="Host key; default: config dir."),
    ] = None,
    delay: Annotated[
        float, typer.Option(help="Seconds between the demo agent's streamed chunks.")
    ] = 0.03,
) -> None:
    """Run a local relay and a host with the demo agent, and print the links to open."""
    configure_logging("warning")
    share = ShareSettings(
        host=HostSettings(relay_url=f"http://127.0.0.1:{port}", key_file=key_file),
        agent="demo",
        workspace=Path.cwd(),
        log_db=log_db,
        conversation_id="demo",
        demo_delay=delay,
    )
    try:
        anyio.run(lambda: run_demo(port=port, share=share))
    except OSError as exc:
        typer.echo(f"tunnel demo: {exc}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None
