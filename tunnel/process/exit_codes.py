"""The exit codes every command uses: one meaning each, whichever command exits."""

from __future__ import annotations

EXIT_OK = 0
"""Done: the work finished, the user typed /quit, or SIGTERM stopped the command."""

EXIT_CONFIG = 2
"""Unusable options or files: the user's mistake, said in one line (typer uses 2 for usage too)."""

EXIT_REFUSED = 3
"""Refused for good: the relay refused this host's key, or a link was refused or revoked."""

EXIT_UNREACHABLE = 4
"""Gave up: the relay or the host stayed unreachable (`tunnel attach --give-up-after`)."""

EXIT_CORRUPT = 5
"""Damaged data: `tunnel log check` (or `export --strict`) found items it cannot read, or
`tunnel log verify` found the audit chain or a signature broken."""

EXIT_INTERRUPTED = 130
"""Stopped by SIGINT (Ctrl-C): 128 + SIGINT, as a shell reports a program the signal killed."""
