"""`tunnel demo`: a relay and a host with the built-in demo agent on loopback, and the links.

The demo keeps its host key, share secrets and conversation log in a directory of its own
(`demo_dir()`, under the user's cache directory), never in the real ones a `tunnel host` uses;
each run starts it afresh unless told to keep it.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tunnel.process.exit_codes import EXIT_CONFIG
from tunnel.process.logs import configure_logging

if TYPE_CHECKING:
    import signal

    from anyio.abc import TaskGroup
    from rich.console import Console

    from tunnel.host.share import ShareSettings

# The relay and the host are imported when the demo runs, not here: every `tunnel` command
# imports this module to list its options.


def demo_dir() -> Path:
    """The demo's own directory: `<user cache dir>/agent-tunnel/demo` (not created here)."""
    import platformdirs

    return platformdirs.user_cache_path("agent-tunnel") / "demo"


def prepare_demo_dir(path: Path, *, keep: bool = False) -> Path:
    """Make `path` ready for a demo run: emptied first unless `keep`; returns it."""
    if not keep and path.exists():
        shutil.rmtree(path)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


async def run_demo(
    *, port: int, share: ShareSettings | None = None, console: Console | None = None
) -> signal.Signals | None:
    """Run the relay and the shared demo session until SIGINT/SIGTERM or /quit.

    Returns the signal that stopped it, None after /quit.
    """
    from rich.console import Console
    from rich.markup import escape

    from tunnel.host.settings import HostSettings
    from tunnel.host.share import Shared, ShareSettings, share_until_quit
    from tunnel.process.signals import run_until_signal
    from tunnel.relay.server import run as run_relay
    from tunnel.relay.settings import RelaySettings

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

    return await run_until_signal(main)


def demo_command(
    port: Annotated[
        int,
        typer.Option(
            envvar="TUNNEL_DEMO_PORT",
            min=0,
            max=65535,
            metavar="PORT",
            help="Loopback port for the relay; 0 picks a free one.",
        ),
    ] = 8765,
    keep: Annotated[
        bool,
        typer.Option(
            "--keep",
            help="Keep the demo's directory (key, links, conversation) from the last run.",
        ),
    ] = False,
    delay: Annotated[
        float,
        typer.Option(
            min=0, metavar="SECONDS", help="Seconds between the demo agent's streamed chunks."
        ),
    ] = 0.03,
) -> None:
    """Run a local relay and a host with the demo agent, and print the links to open."""
    import anyio

    from tunnel.e2e.identity import KeyFileError
    from tunnel.host.settings import HostSettings
    from tunnel.host.share import ShareSettings
    from tunnel.process.signals import exit_code_after

    configure_logging("warning")
    directory = demo_dir()
    try:
        prepare_demo_dir(directory, keep=keep)
    except OSError as exc:
        typer.echo(f"tunnel demo: cannot prepare {directory}: {exc.strerror or exc}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None
    fresh = "kept from the last run" if keep else "fresh; --keep keeps it for the next run"
    print(f"demo directory: {directory} ({fresh})", flush=True)
    share = ShareSettings(
        host=HostSettings(relay_url=f"http://127.0.0.1:{port}", key_file=directory / "host_key"),
        agent="demo",
        workspace=Path.cwd(),
        log_db=directory / "log.db",
        conversation_id="demo",
        demo_delay=delay,
    )
    try:
        stopped_by = anyio.run(lambda: run_demo(port=port, share=share))
    except (KeyFileError, OSError, ValueError) as exc:
        # The port is taken, or a kept directory is unusable: one line, no traceback.
        typer.echo(f"tunnel demo: {exc}", err=True)
        raise typer.Exit(EXIT_CONFIG) from None
    raise typer.Exit(exit_code_after(stopped_by))
