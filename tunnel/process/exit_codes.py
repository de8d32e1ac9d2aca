"""The exit codes every command uses: one meaning each, whichever command exits."""

from __future__ import annotations

EXIT_OK = 0
"""Done: stopped by a signal, by /quit, or the work finished."""

EXIT_CONFIG = 2
"""Unusable options or files: the user's mistake, said in one line (typer uses 2 for usage too)."""

EXIT_REFUSED = 3
"""The relay refused this host for good (signature or key not accepted)."""
