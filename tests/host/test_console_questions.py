"""The host console shows the agent's questions, counts and rings for them, and answers them with
/answer, as `tunnel attach` does (the real command on an emulated terminal, sharing the fake ACP
agent)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.support import RelayProcess
from tests.terminal.pty_process import bells, screen_process

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
FAKE_ACP_AGENT = ROOT / "tests" / "agents" / "fake_acp_agent.py"


async def test_the_console_answers_the_agents_question(relay: RelayProcess, tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    argv = [sys.executable, "-m", "tunnel.cli", "host", "--relay", relay.url]
    argv += ["--agent", f"acp:{sys.executable} {FAKE_ACP_AGENT}", "--workspace", str(workspace)]
    argv += ["--log-db", str(tmp_path / "log.db"), "--key-file", str(tmp_path / "key")]
    env = dict(os.environ, PYTHONUNBUFFERED="1", TERM="xterm-256color", NO_COLOR="1")
    with screen_process(argv, env=env, cwd=ROOT) as host:
        await host.wait_screen(r"drive link: (\S+)")
        host.keys(b"elicit\r")
        await host.wait_screen(r"question\? Pick")
        await host.wait_screen(r"^\[1 waiting\] >$", where="cursor")
        assert host.screen.title == "[1 waiting] tunnel host"
        host.keys(b"/answer 1=ann 2=9\r")  # not one of its choices: refused, still open
        await host.wait_screen(r"color.*expected one of its choices")
        host.keys(b"/answer 1=ann 2=Red\r")
        await host.wait_screen(r'answered accept \{"color": "r", "name": "ann"\}')
        await host.wait_screen(r"^>$", where="cursor")
        assert host.screen.title == "tunnel host"
        host.keys(b"/quit\r")
        assert await host.wait_exit(within=20) == 0
    assert bells(host.received) == 1  # once for the question, not again for the refused answer
