"""The `tunnel` command line: a thin shell that turns options into settings and calls `run`."""

from __future__ import annotations

from typing import Annotated

import typer

from tunnel import __version__
from tunnel.process.usage import CommandLine

app = typer.Typer(
    name="tunnel",
    help="Share and co-drive a local coding agent through an end-to-end encrypted relay.",
    no_args_is_help=True,
    add_completion=False,
    # Usage errors in one line (CommandLine); plain help that wraps instead of cutting names off,
    # up to 100 columns; a bug's traceback as Python prints it, without local variables.
    cls=CommandLine,
    rich_markup_mode=None,
    context_settings={"max_content_width": 100},
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"tunnel {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """The options of `tunnel` itself, before any command."""


# Sub-commands register themselves below; each lives in the module that owns its feature. Their
# modules hold only the options: what a command runs is imported when it runs, so that
# `tunnel --help` and each command load no more than they need (bench/cli_bench.py).

from tunnel.relay.command import relay_command  # noqa: E402

app.command("relay")(relay_command)

from tunnel.host.command import host_command  # noqa: E402

app.command("host")(host_command)

from tunnel.log.cli import log_app  # noqa: E402

app.add_typer(log_app, name="log")

from tunnel.demo import demo_command  # noqa: E402

app.command("demo")(demo_command)

from tunnel.teammate.command import acp_command, attach_command  # noqa: E402

app.command("attach")(attach_command)
app.command("acp")(acp_command)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
