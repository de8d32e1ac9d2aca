"""relay/tunnel-relay.service read as systemd reads it, as far as the tests need: its
`[Service]` lines, the command its ExecStart runs, the environment it sets; and the confinement
of its process that a test can give without systemd (no new privileges, no memory both writable
and executable)."""

from __future__ import annotations

import ctypes
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
UNIT = ROOT / "relay" / "tunnel-relay.service"

INSTALLED = "/usr/local/bin/tunnel"
"""Where the unit expects the `tunnel` command."""

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_MDWE = 65
_PR_GET_MDWE = 66
_PR_MDWE_REFUSE_EXEC_GAIN = 1


def entries(section: str, unit: Path = UNIT) -> list[tuple[str, str]]:
    """Every `key=value` line of `section`, in order (a key may repeat)."""
    found: list[tuple[str, str]] = []
    current = None
    for raw in unit.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        assert sep, f"not a key=value line: {raw!r}"
        if current == section:
            found.append((key.strip(), value.strip()))
    return found


def service(key: str, unit: Path = UNIT) -> list[str]:
    """The values of `key` in `[Service]`, in order."""
    return [value for k, value in entries("Service", unit) if k == key]


def exec_start(unit: Path = UNIT) -> list[str]:
    """The ExecStart command line, split as systemd splits it (shell quoting, no expansion in
    what the unit holds)."""
    (line,) = service("ExecStart", unit)
    return shlex.split(line)


def relay_argv(*, port: int, unit: Path = UNIT) -> list[str]:
    """The unit's command run from this checkout (`python -m tunnel.cli` for the installed
    `tunnel`), listening on `port` instead of the unit's."""
    argv = exec_start(unit)
    assert argv[0] == INSTALLED, argv
    args = argv[1:]
    at = args.index("--port")
    args[at + 1] = str(port)
    return [sys.executable, "-m", "tunnel.cli", *args]


def environment(unit: Path = UNIT) -> dict[str, str]:
    """The variables the unit's `Environment=` lines set."""
    found: dict[str, str] = {}
    for line in service("Environment", unit):
        for assignment in shlex.split(line):
            name, _, value = assignment.partition("=")
            found[name] = value
    return found


def _prctl(option: int, value: int = 0) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(option, value, 0, 0, 0))


def memory_deny_write_execute_works() -> bool:
    """Whether this kernel can refuse a process memory both writable and executable
    (PR_SET_MDWE, Linux 6.3), as MemoryDenyWriteExecute= does with a seccomp filter."""
    return _prctl(_PR_GET_MDWE) >= 0


def confine() -> None:
    """In the child before exec: NoNewPrivileges=, and MemoryDenyWriteExecute= where the kernel
    can (both inherited by what it runs)."""
    if _prctl(_PR_SET_NO_NEW_PRIVS, 1) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if memory_deny_write_execute_works() and _prctl(_PR_SET_MDWE, _PR_MDWE_REFUSE_EXEC_GAIN) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_MDWE)")
