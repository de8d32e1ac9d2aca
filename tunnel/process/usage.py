"""The command line's own errors (an unknown option, a bad value) as one line, like every other.

Each command says a user's mistake in one line on stderr, `tunnel <command>: what is wrong`, and
exits with EXIT_CONFIG. Typer finds some mistakes itself while parsing, before a command's body
runs; `CommandLine`, the root group of `tunnel`, says those the same way instead of drawing a
usage box.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import typer

# This typer ships its own copy of click; its exceptions are what the parser raises.
from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
from typer.core import TyperGroup

from tunnel.process.exit_codes import EXIT_CONFIG, EXIT_OK

PROG_NAME = "tunnel"
"""The program's name in usage lines and error prefixes, however it was started."""


class CommandLine(TyperGroup):
    """The `tunnel` group: usage errors become one line on stderr and exit with EXIT_CONFIG."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        prog_name = prog_name or PROG_NAME
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        try:
            # Not standalone: typer hands back errors and exit codes instead of printing them.
            result = super().main(
                args, prog_name, complete_var, False, windows_expand_args, **extra
            )
        except NoArgsIsHelpError as exc:
            typer.echo(exc.format_message(), err=True)
            sys.exit(EXIT_CONFIG)
        except UsageError as exc:
            path = exc.ctx.command_path if exc.ctx is not None else prog_name
            typer.echo(f"{path}: {one_line(exc.format_message())}; see {path} --help", err=True)
            sys.exit(EXIT_CONFIG)
        except ClickException as exc:
            typer.echo(f"{prog_name}: {one_line(exc.format_message())}", err=True)
            sys.exit(exc.exit_code)
        except typer.Abort:
            typer.echo(f"{prog_name}: aborted", err=True)
            sys.exit(1)
        sys.exit(result if isinstance(result, int) else EXIT_OK)


def one_line(message: str) -> str:
    """Click's message as one line that goes on after a `tunnel <command>:` prefix."""
    text = " ".join(message.split()).rstrip(".")
    return text[:1].lower() + text[1:]
