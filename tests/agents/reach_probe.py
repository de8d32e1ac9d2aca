"""Tries to connect to each UNIX socket named on its command line, for the sandbox tests:
`python -I -S reach_probe.py NAME=PATH ...` prints `REACH NAME yes` for a connection made,
`REACH NAME no ERRNO` for one refused, then `REACH done`. Standard library only."""

from __future__ import annotations

import errno
import socket
import sys

TIMEOUT = 5.0
"""Seconds one connection may take: the test's sockets listen, so a connection is immediate."""


def reach(path: str) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(TIMEOUT)
        try:
            client.connect(path)
        except OSError as exc:
            return f"no {errno.errorcode.get(exc.errno, 'timeout') if exc.errno else 'timeout'}"
    return "yes"


def main(args: list[str]) -> None:
    for arg in args:
        name, _, path = arg.partition("=")
        print(f"REACH {name} {reach(path)}", flush=True)
    print("REACH done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
