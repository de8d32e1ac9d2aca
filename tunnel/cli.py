"""The `tunnel` command line: a thin shell that turns options into settings and calls `run`."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="tunnel",
    help="Share and co-drive a local coding agent through an end-to-end encrypted relay.",
    no_args_is_help=True,
    add_completion=False,
)

# Sub-commands register themselves below; each lives in the module that owns its feature.

from tunnel.relay.command import relay_command  # noqa: E402

app.command("relay")(relay_command)

from tunnel.host.command import host_command  # noqa: E402

app.command("host")(host_command)

from tunnel.log.cli import log_app  # noqa: E402

app.add_typer(log_app, name="log")

from tunnel.demo import demo_command  # noqa: E402

app.command("demo")(demo_command)

from tunnel.teammate.attach import attach_command  # noqa: E402

app.command("attach")(attach_command)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
