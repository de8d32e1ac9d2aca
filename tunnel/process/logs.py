"""Logging setup shared by every command: one line per record on stderr, never a secret."""

from __future__ import annotations

import enum
import logging
import sys


def configure_logging(level: str) -> None:
    """Log to stderr at `level`; websockets' own chatter only when debugging."""
    logging.basicConfig(
        level=level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if level.lower() != "debug":
        logging.getLogger("websockets").setLevel(logging.WARNING)


class LogLevel(enum.StrEnum):
    """Log levels accepted by every command's --log-level."""

    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"
