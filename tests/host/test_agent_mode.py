"""`tunnel host --agent-mode`: a mistake in it is one line and exit 2, before any link is shown."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agents.test_acp import FAKE_AGENT
from tests.support import RelayProcess
from tunnel.process.exit_codes import EXIT_CONFIG

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
FAKE = "acp:" + shlex.join([sys.executable, str(FAKE_AGENT)])


@pytest.mark.parametrize(
    ("agent", "options", "said"),
    [
        ("demo", ["--agent-mode", "plan"], "--agent-mode needs an acp: agent"),
        (
            FAKE,
            ["--approvals", "ask", "--agent-mode", "acceptEdits"],
            "--agent-mode acceptEdits may edit files and run commands without asking, and the"
            " approval policy preset:ask needs edits and commands asked",
        ),
        (
            FAKE,
            ["--agent-mode", "turbo"],
            "--agent-mode: the agent offers no mode 'turbo' (it offers default, plan, acceptEdits)",
        ),
    ],
)
def test_an_agent_mode_that_cannot_be_used_stops_the_host_in_one_line(
    relay: RelayProcess, tmp_path: Path, agent: str, options: list[str], said: str
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
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
            str(tmp_path / "log.db"),
            "--key-file",
            str(tmp_path / "key"),
            "--no-interactive",
            *options,
        ],
        cwd=ROOT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=40,
        check=False,
    )
    assert result.returncode == EXIT_CONFIG, result.stderr
    [line] = result.stderr.splitlines()
    assert line == f"tunnel host: {said}"
    assert "link" not in result.stdout
    log_db = tmp_path / "log.db"
    if log_db.exists():
        shown = subprocess.run(
            [sys.executable, "-m", "tunnel", "log", "show", "main", "--db", str(log_db)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert "agent_started" not in shown.stdout, shown.stdout
