"""relay/tunnel-relay.service: systemd accepts every line of it, its hardening scores as systemd
itself rates a well-confined service, and its ExecStart is a `tunnel relay` command line the
command accepts (the end-to-end test in test_nginx.py runs it)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.relay.service.unit import INSTALLED, UNIT, exec_start, relay_argv, service

pytestmark = pytest.mark.service

ROOT = Path(__file__).resolve().parents[3]

MAX_EXPOSURE = 2.0
"""The highest exposure `systemd-analyze security` may rate the unit (0 is the best, 10 the
worst; up to 2.0 systemd calls it "OK")."""


def _installed_here(tmp_path: Path) -> Path:
    """The unit with its ExecStart naming this checkout's `tunnel` command: systemd-analyze
    checks that the command exists; the rest is the file as written."""
    tunnel = Path(sys.executable).with_name("tunnel")
    assert tunnel.exists(), f"no {tunnel}: install the package (pip install -e .)"
    unit = tmp_path / UNIT.name
    text = UNIT.read_text()
    assert text.count(f"ExecStart={INSTALLED} ") == 1
    unit.write_text(text.replace(f"ExecStart={INSTALLED} ", f"ExecStart={tunnel} "))
    return unit


def test_systemd_accepts_every_line_of_the_unit(tmp_path: Path, systemd_analyze: str) -> None:
    unit = _installed_here(tmp_path)
    result = subprocess.run(
        [systemd_analyze, "verify", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    said = [line for line in (result.stdout + result.stderr).splitlines() if unit.name in line]
    # An unknown key or a value systemd cannot parse is only a warning naming the file's line.
    assert result.returncode == 0, result.stdout + result.stderr
    assert said == [], result.stdout + result.stderr


def test_the_unit_is_confined_as_systemd_rates_a_well_confined_service(
    tmp_path: Path, systemd_analyze: str
) -> None:
    unit = _installed_here(tmp_path)
    result = subprocess.run(
        [systemd_analyze, "security", "--offline=true", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
    assert found, result.stdout + result.stderr
    assert float(found.group(1)) <= MAX_EXPOSURE, result.stdout
    for key, value in {
        "DynamicUser": "yes",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "CapabilityBoundingSet": "",
        "MemoryDenyWriteExecute": "yes",
        "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
    }.items():
        assert service(key) == [value], key
    assert "@system-service" in service("SystemCallFilter")


def test_exec_start_is_a_tunnel_relay_command_line_the_command_accepts() -> None:
    (line,) = service("ExecStart")
    # Nothing systemd would expand (specifiers, variables): split as a shell splits it.
    assert "%" not in line
    assert "$" not in line
    argv = exec_start()
    assert argv[:2] == [INSTALLED, "relay"]
    assert "--port" in argv
    assert "--host" in argv
    # Every option it names exists: an unknown one is a usage error, --help or not. The values
    # are the command's to check when it starts: test_nginx.py runs this command line.
    check = [*relay_argv(port=0), "--help"]
    result = subprocess.run(
        check, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    for option in (arg for arg in argv if arg.startswith("--")):
        assert option in result.stdout, option
