"""Logging setup shared by every command: one line per record on stderr, never a secret."""

from __future__ import annotations

import enum
import logging
import sys


class PrintableFormatter(logging.Formatter):
    """A formatter whose lines cannot drive a terminal: a record may quote what came over the
    wire (a teammate's name, an agent's error), so the finished line goes through `printable`."""

    def format(self, record: logging.LogRecord) -> str:
        # Imported here: the sanitiser is small, but logging is set up before anything else.
        from tunnel.terminal.sanitize import printable

        return printable(super().format(record))


def configure_logging(level: str) -> None:
    """Log to stderr at `level`; websockets' and httpx's own chatter only when debugging (httpx
    logs each request's full URL at info: a push endpoint or webhook URL, a capability)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(PrintableFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler])
    if level.lower() != "debug":
        for name in ("websockets", "httpx", "httpcore"):
            logging.getLogger(name).setLevel(logging.WARNING)


class LogLevel(enum.StrEnum):
    """Log levels accepted by every command's --log-level."""

    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"
