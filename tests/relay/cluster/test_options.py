"""`tunnel relay --cluster`: what it needs, said in one line with exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tunnel.process.exit_codes import EXIT_CONFIG

ROOT = Path(__file__).resolve().parents[3]


def _relay(*args: str, secret: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUNNEL_RELAY_")}
    if secret is not None:
        env["TUNNEL_RELAY_CLUSTER_SECRET"] = secret
    return subprocess.run(
        [sys.executable, "-m", "tunnel.cli", "relay", "--port", "0", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


GOOD_SECRET = "s" * 32


@pytest.mark.parametrize(
    ("args", "secret", "says"),
    [
        (("--cluster", "redis://127.0.0.1:1/0"), GOOD_SECRET, "--node-url"),
        (("--cluster", "redis://127.0.0.1:1/0", "--node-url", "ws://127.0.0.1:2"), None, "secret"),
        (("--cluster", "redis://127.0.0.1:1/0", "--node-url", "ws://127.0.0.1:2"), "short", "16"),
        (
            ("--cluster", "http://127.0.0.1:1", "--node-url", "ws://127.0.0.1:2"),
            GOOD_SECRET,
            "redis://",
        ),
        (("--cluster", "redis://127.0.0.1:1/0", "--node-url", "ftp://x:2"), GOOD_SECRET, "ws://"),
        (("--node-url", "ws://127.0.0.1:2"), GOOD_SECRET, "go with --cluster"),
    ],
)
def test_a_cluster_option_that_cannot_work_is_one_line_and_exit_2(
    args: tuple[str, ...], secret: str | None, says: str
) -> None:
    result = _relay(*args, secret=secret)
    assert result.returncode == EXIT_CONFIG
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tunnel relay: ")
    assert says in lines[0]
    assert GOOD_SECRET not in result.stderr
