"""`tunnel host` with an agent that cannot start: one line and exit 2 before any link is shown."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import RelayProcess
from tunnel.process.exit_codes import EXIT_CONFIG

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("agent", "named"),
    [
        ("acp:/nonexistent/binary --flag", "/nonexistent/binary does not exist"),
        ("pty:/nonexistent", "/nonexistent does not exist"),
        ("acp:no-such-agent-program", "no program 'no-such-agent-program' on PATH"),
        ("pty:./notes.txt", "notes.txt is not executable"),
    ],
)
def test_an_agent_that_cannot_start_stops_the_host_before_its_links(
    relay: RelayProcess, tmp_path: Path, agent: str, named: str
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("not a program\n")
    log_db = tmp_path / "log.db"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tunnel",
            "host",
            "--relay",
            relay.url,
            "--agent",
            agent,
            "--workspace",
            str(workspace),
            "--log-db",
            str(log_db),
            "--key-file",
            str(tmp_path / "key"),
        ],
        cwd=ROOT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == EXIT_CONFIG, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("tunnel host: cannot start the agent: ")
    assert line.endswith(named)
    assert "link" not in result.stdout
    # Never registered, and nothing recorded: the next run does not replay a failure.
    assert not log_db.exists()
    assert "Traceback" not in relay.stderr()
