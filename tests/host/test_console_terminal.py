"""The host console on a real terminal, read as a person reads it (a terminal emulator fed with
every byte the host wrote): the line being typed stays whole while a teammate's turn prints
above it, and is sent whole when finished."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.host.teammate import attached
from tests.support import RelayProcess
from tests.terminal.pty_process import screen_process
from tunnel.app.requests import Prompt

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
FAKE_ACP_AGENT = ROOT / "tests" / "agents" / "fake_acp_agent.py"


async def test_typing_at_the_console_while_a_teammates_turn_prints_keeps_the_line_whole(
    relay: RelayProcess, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    argv = [sys.executable, "-m", "tunnel.cli", "host", "--relay", relay.url]
    argv += ["--agent", f"acp:{sys.executable} {FAKE_ACP_AGENT}", "--workspace", str(workspace)]
    argv += ["--log-db", str(tmp_path / "log.db"), "--key-file", str(tmp_path / "key")]
    argv += ["--name", "hannah"]
    env = dict(os.environ, PYTHONUNBUFFERED="1", TERM="xterm-256color", NO_COLOR="1")
    with screen_process(argv, env=env, cwd=ROOT) as host:
        link = (await host.wait_screen(r"drive link: (\S+)")).group(1)
        host.keys(b"half a li")
        await host.wait_screen(r"^> half a li$", where="cursor")
        async with attached(link, "bob") as bob:
            await host.wait_screen(r"bob \(drive\) joined")
            await bob.send(Prompt(text="from bob"))
            await host.wait_screen(r"agent echo: from bob")
        # A join, a prompt and the agent's reply scrolled above the line being typed.
        assert host.cursor_line() == "> half a li"
        host.keys(b"ne\r")
        await host.wait_screen(r"hannah: half a line\n")
        await host.wait_screen(r"agent echo: half a line")
        host.keys(b"/quit\r")
        assert await host.wait_exit(within=20) == 0
