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


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
