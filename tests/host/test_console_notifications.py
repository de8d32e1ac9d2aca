"""The host console tells the host user about permission requests that wait, as `tunnel attach`
does: one bell per new request, the count before the prompt and in the window title, given back
on the way out; `--no-bell` (or TUNNEL_HOST_NO_BELL) keeps the count and the title, not the bell.
The real command on an emulated terminal, a teammate prompting the agent that asks."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.support import RelayProcess
from tests.terminal.pty_process import bells, screen_process
from tunnel.app.requests import Prompt

from .teammate import attached

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
FAKE_ACP_AGENT = ROOT / "tests" / "agents" / "fake_acp_agent.py"


@pytest.mark.parametrize("bell", [True, False], ids=["bell", "no-bell"])
async def test_the_console_rings_once_per_new_request_and_shows_how_many_wait(
    relay: RelayProcess, tmp_path: Path, bell: bool
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("milk\n")
    argv = [sys.executable, "-m", "tunnel.cli", "host", "--relay", relay.url]
    argv += ["--agent", f"acp:{sys.executable} {FAKE_ACP_AGENT}", "--workspace", str(workspace)]
    argv += ["--log-db", str(tmp_path / "log.db"), "--key-file", str(tmp_path / "key")]
    env = dict(os.environ, PYTHONUNBUFFERED="1", TERM="xterm-256color", NO_COLOR="1")
    if not bell:
        env["TUNNEL_HOST_NO_BELL"] = "1"
    with screen_process(argv, env=env, cwd=ROOT) as host:
        link = (await host.wait_screen(r"drive link: (\S+)")).group(1)
        async with attached(link, "bob") as bob:
            for turn in (1, 2):
                await bob.send(Prompt(text="ask"))
                await host.wait_screen(r"^\[1 waiting\] >$", where="cursor")
                assert host.screen.title == "[1 waiting] tunnel host"
                host.keys(b"/allow\r")
                await host.wait_screen(r"(?s)chose default" + r".*chose default" * (turn - 1))
                await host.wait_screen(r"^>$", where="cursor")
                assert host.screen.title == "tunnel host"
        host.keys(b"/quit\r")
        assert await host.wait_exit(within=20) == 0
    assert bells(host.received) == (2 if bell else 0)
    # The title cleared, and the one from before restored, on the way out.
    assert b"\x1b]2;\x07\x1b[23;0t" in host.received
