"""The `tunnel` command line itself: its version, and what `tunnel --help` leaves unloaded."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import tunnel

ROOT = Path(__file__).resolve().parents[1]

HEAVY = ("acp", "websockets", "cryptography", "msgpack", "anyio", "rich", "sqlite3")
"""What only running a command needs: the ACP client (the slowest by far), the network, the
crypto, the wire format, the event loop, the console and the log's database. (pydantic is not
here: typer itself loads it to parse a sub-command's options, `--help` included.)"""


def test_the_version_is_the_one_in_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert tunnel.__version__ == project["version"]


def test_tunnel_version_prints_the_version() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tunnel", "--version"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stdout) == (0, f"tunnel {tunnel.__version__}\n")


@pytest.mark.parametrize("command", [[], ["relay"], ["host"], ["attach"], ["demo"], ["log"]])
def test_help_loads_no_agent_network_or_crypto_code(command: list[str]) -> None:
    # -X importtime names every module the process imports, on stderr.
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tunnel", *command, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "Usage: tunnel" in result.stdout
    loaded = {
        line.rsplit("|", 1)[1].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "tunnel.cli" in loaded  # the listing is there at all
    for package in HEAVY:
        assert not {m for m in loaded if m == package or m.startswith(package + ".")}, package
