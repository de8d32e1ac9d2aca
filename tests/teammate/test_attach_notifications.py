"""`tunnel attach` tells its user about permission requests that wait: one bell per new request
(a drive link's), the count before the prompt and in the window title. Never for a request a
replay shows answered, nor again for one seen before (a snapshot, a reconnect).

The last test runs the real command on an emulated terminal, with a relay, a host and an agent
that asks, and reads every byte the terminal received.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from rich.console import Console

from tests.support import RelayProcess, read_line, stop_process
from tests.teammate.feeding import show
from tests.terminal.pty_process import ScreenProcess, bells, screen_process, titles
from tunnel.app.host_messages import ItemMessage, Ready, Snapshot, encode
from tunnel.e2e.crypto import ShareLink, new_secret
from tunnel.teammate.attach import Attachment, AttachSettings
from tunnel.terminal.notify import TerminalSignals

ROOT = Path(__file__).resolve().parents[2]
TUNNEL = (sys.executable, "-m", "tunnel.cli")
FAKE_ACP_AGENT = ROOT / "tests" / "agents" / "fake_acp_agent.py"
TERMINAL = {"TERM": "xterm-256color", "NO_COLOR": "1", "PYTHONUNBUFFERED": "1"}


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _attachment(role: str) -> tuple[Attachment, Terminal]:
    link = ShareLink(
        relay_url="http://127.0.0.1:1", host_id="a" * 26, role=role, secret=new_secret()
    )
    terminal = Terminal()
    printed = Console(file=io.StringIO(), width=10_000, color_system=None)
    attachment = Attachment(
        AttachSettings(link=link, name="me"),
        console=printed,
        status=printed,
        stdin=io.StringIO(),
        signals=TerminalSignals(terminal, program="tunnel attach", environ={"TERM": "xterm"}),
    )
    return attachment, terminal


def _feed(attachment: Attachment, message: Any) -> None:
    """One host message, then what the receive loop does after each."""
    show(attachment, encode(message))
    attachment._signal_waiting()


def _request(seq: int, request_id: str, **data: Any) -> dict[str, Any]:
    data = {"request_id": request_id, "title": "Edit \x07\x1b]2;pwned\x07", "options": [], **data}
    return {"seq": seq, "type": "permission_request", "created_by": "agent", "data": data}


def _decision(seq: int, request_id: str) -> dict[str, Any]:
    data = {"request_id": request_id, "outcome": "selected", "option_id": "ok"}
    return {"seq": seq, "type": "permission_decision", "created_by": "bob", "data": data}


def _ready(role: str) -> Ready:
    return Ready(conversation_id="c", name="me", role=role, agent_name="a", agent_kind="chat")


@pytest.mark.parametrize("role", ["drive", "view"])
def test_each_waiting_request_rings_once_and_a_replay_answered_or_seen_rings_none(
    role: str,
) -> None:
    attachment, terminal = _attachment(role)
    _feed(attachment, _ready(role))
    # r1 waits on the first page and is answered on the second: it never waited here.
    _feed(attachment, Snapshot(items=[_request(1, "r1"), _request(2, "r2")], last_seq=2, more=True))
    assert terminal.getvalue() == ""
    _feed(attachment, Snapshot(items=[_decision(3, "r1")], last_seq=3, more=False))
    assert attachment._waiting.count == 1
    _feed(attachment, ItemMessage(item=_request(4, "r3")))
    # Decided by the policy before anyone saw it: not waiting.
    _feed(attachment, ItemMessage(item=_request(5, "r4", policy={"source": "preset:ask"})))
    _feed(attachment, ItemMessage(item=_decision(6, "r4")))
    # A reconnect: the same requests, nothing new.
    _feed(attachment, _ready(role))
    _feed(attachment, Snapshot(items=[], last_seq=6, more=False))
    received = terminal.getvalue().encode()
    assert bells(received) == (2 if role == "drive" else 0)  # r2 and r3; a viewer cannot answer
    assert titles(received) == ["[1 waiting] tunnel attach", "[2 waiting] tunnel attach"]
    _feed(attachment, ItemMessage(item=_decision(7, "r2")))
    _feed(attachment, ItemMessage(item=_decision(8, "r3")))
    assert titles(terminal.getvalue().encode())[-1] == "tunnel attach"
    # Nothing of the requests' hostile titles reached the terminal.
    assert "pwned" not in terminal.getvalue()


# -- the real command on a real terminal ---------------------------------------------------------


@contextlib.contextmanager
def _host(relay: RelayProcess, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`tunnel host` sharing the fake ACP agent, no console input; stopped after the block."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("milk\n")
    argv = [*TUNNEL, "host", "--relay", relay.url, "--workspace", str(workspace)]
    argv += ["--agent", f"acp:{sys.executable} {FAKE_ACP_AGENT}", "--no-interactive"]
    argv += ["--log-db", str(tmp_path / "log.db"), "--key-file", str(tmp_path / "key")]
    host = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield host
    finally:
        stop_process(host, 15)


async def _drive_link(host: subprocess.Popen[bytes]) -> str:
    for _ in range(20):
        line = await anyio.to_thread.run_sync(read_line, host)
        match = re.search(r"drive link: (\S+)", line)
        if match:
            return match.group(1)
    raise AssertionError("the host printed no drive link")


def _attach(link: str, name: str, **env: str) -> contextlib.AbstractContextManager[ScreenProcess]:
    argv = [*TUNNEL, "attach", "--name", name]
    environ = dict(os.environ, TUNNEL_LINK=link, **TERMINAL, **env)
    return screen_process(argv, env=environ, cwd=ROOT)


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_attach_rings_once_per_new_request_and_shows_how_many_wait(
    relay: RelayProcess, tmp_path: Path
) -> None:
    with _host(relay, tmp_path) as host:
        link = await _drive_link(host)
        with _attach(link, "alice") as alice:
            await alice.wait_screen(r"attached as alice \(drive\)")
            alice.keys(b"ask\r")
            await alice.wait_screen(r"^\[1 waiting\] >$", where="cursor")
            assert bells(alice.received) == 1
            assert alice.screen.title == "[1 waiting] tunnel attach"

            # The relay restarts: alice comes back to the same request, and does not ring.
            relay.kill()
            restarted = RelayProcess(tmp_path, port=relay.port).start()
            try:
                await alice.wait_screen(r"(?s)attached as alice \(drive\).*attached as alice")

                # A fresh attach with the bell off sees the count, and rings nothing.
                with _attach(link, "carol", TUNNEL_NO_BELL="1") as carol:
                    await carol.wait_screen(r"^\[1 waiting\] >$", where="cursor")
                    assert carol.screen.title == "[1 waiting] tunnel attach"
                    assert bells(carol.received) == 0

                alice.keys(b"/allow\r")
                await alice.wait_screen(r"chose default")
                await alice.wait_screen(r"^>$", where="cursor")
                assert alice.screen.title == "tunnel attach"

                # The answered request in the history of a fresh attach rings nothing.
                with _attach(link, "dave") as dave:
                    await dave.wait_screen(r"chose default")
                    await dave.wait_screen(r"^>$", where="cursor")
                    assert bells(dave.received) == 0
                    assert titles(dave.received) == []

                # A new request rings once more.
                alice.keys(b"ask\r")
                await alice.wait_screen(r"^\[1 waiting\] >$", where="cursor")
                alice.keys(b"/allow\r")
                await alice.wait_screen(r"(?s)chose default.*chose default")
                alice.keys(b"\x04")  # Ctrl-D: leave
                assert await alice.wait_exit() == 0
            finally:
                restarted.stop()
        # One bell per request, the reconnect's replay none; the title given back on the way
        # out.
        assert bells(alice.received) == 2
        assert alice.received.endswith(b"\x1b]2;\x07\x1b[23;0t")
