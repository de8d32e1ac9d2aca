"""Small builders, and a runner for real `tunnel` processes, shared by the log tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tunnel.log import NewItem


def new(type: str = "message", by: str = "host", **data: Any) -> NewItem:
    """A NewItem with the given data."""
    return NewItem(type=type, data=data or {"text": "hi"}, created_by=by)


def news(count: int, type: str = "message", start: int = 0) -> list[NewItem]:
    """`count` NewItems whose data numbers them from `start`."""
    return [NewItem(type=type, data={"n": start + i}, created_by="host") for i in range(count)]


ROOT = Path(__file__).resolve().parents[2]
PYTHON = ROOT / ".venv" / "bin" / "python"


def tunnel(
    *args: str, env: dict[str, str] | None = None, unprivileged: bool = False, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    """Run `python -m tunnel ARGS...` as a real process; stdout and stderr as text.

    `unprivileged` runs it without the power to ignore file permissions (root loses
    CAP_DAC_OVERRIDE), so a read-only directory is read-only for it even under root.
    """
    python = str(PYTHON if PYTHON.exists() else sys.executable)
    command = [python, "-m", "tunnel", *args]
    if unprivileged:
        command = [*unprivileged_prefix(), *command]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        timeout=timeout,
        check=False,
    )


def unprivileged_prefix() -> list[str]:
    """What to put before a command so that file permissions bind it; skips the test if that
    cannot be done (root without setpriv)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: permissions cannot be enforced")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--"]
