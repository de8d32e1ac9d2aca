"""`tunnel attach` on a real terminal, read as a person reads it: the screen of a terminal emulator
fed with every byte the command wrote (tests/terminal/pty_process.py).

The input line stays whole while output arrives above it; replies show while they stream; a
fresh attach shows the end of the conversation yet knows the agent's commands; a `pty:` agent
gets every key in `--raw` mode, Enter alone and Ctrl-C included, the terminal's size too, until
Ctrl-] leaves.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import anyio
import pytest

from tests.host.teammate import Teammate, attached
from tests.support import RelayProcess, read_line
from tests.terminal.pty_process import ScreenProcess, screen_process
from tunnel.app.requests import Input, Prompt, Resize

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
TUNNEL = (sys.executable, "-m", "tunnel.cli")
FAKE_ACP_AGENT = ROOT / "tests" / "agents" / "fake_acp_agent.py"
TERMINAL = {"TERM": "xterm-256color", "NO_COLOR": "1", "PYTHONUNBUFFERED": "1"}
"""A terminal that moves its cursor (so attach keeps an input line), without colours."""


@contextlib.contextmanager
def _host(relay: RelayProcess, tmp_path: Path, agent: str) -> Iterator[subprocess.Popen[bytes]]:
    """`tunnel host` sharing `agent`, no console input; stopped after the block."""
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    host = subprocess.Popen(
        [
            *TUNNEL,
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
        ],
        cwd=ROOT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield host
    finally:
        if host.poll() is None:
            host.terminate()
            try:
                host.wait(15)
            except subprocess.TimeoutExpired:
                host.kill()
                host.wait(5)


async def _link(host: subprocess.Popen[bytes], role: str = "drive") -> str:
    for _ in range(20):
        line = await anyio.to_thread.run_sync(read_line, host)
        match = re.search(rf"{role} link: (\S+)", line)
        if match:
            return match.group(1)
    raise AssertionError(f"the host printed no {role} link")


async def _links(host: subprocess.Popen[bytes]) -> tuple[str, str]:
    """The view link and the drive link, which the host prints in that order."""
    links: dict[str, str] = {}
    for _ in range(20):
        line = await anyio.to_thread.run_sync(read_line, host)
        match = re.search(r"(view|drive) link:\s+(\S+)", line)
        if match:
            links[match.group(1)] = match.group(2)
        if len(links) == 2:
            return links["view"], links["drive"]
    raise AssertionError("the host printed no view and drive links")


def _attach(
    link: str, *args: str, name: str = "alice", rows: int = 30, columns: int = 120
) -> contextlib.AbstractContextManager[ScreenProcess]:
    """`tunnel attach` as `name` on a `rows` x `columns` emulated terminal; stopped after."""
    env = dict(os.environ, TUNNEL_LINK=link, **TERMINAL)
    argv = [*TUNNEL, "attach", "--name", name, *args]
    return screen_process(argv, env=env, cwd=ROOT, rows=rows, columns=columns)


@contextlib.asynccontextmanager
async def _attached_to_fake_agent(
    relay: RelayProcess, tmp_path: Path
) -> AsyncIterator[tuple[str, ScreenProcess]]:
    """The drive link of a host sharing the fake ACP agent, and alice attached by it."""
    with _host(relay, tmp_path, f"acp:{sys.executable} {FAKE_ACP_AGENT}") as host:
        link = await _link(host)
        with _attach(link) as screen:
            await screen.wait_screen(r"attached as alice \(drive\)")
            yield link, screen


@contextlib.asynccontextmanager
async def _raw_viewer(
    relay: RelayProcess, tmp_path: Path, host_size: Resize, *, rows: int, columns: int
) -> AsyncIterator[tuple[Teammate, ScreenProcess]]:
    """Bob driving a host that shares a Python REPL, his terminal `host_size`; carol viewing
    with `--raw` on a `rows` x `columns` terminal."""
    with _host(relay, tmp_path, f"pty:{sys.executable} -q") as host:
        view_link, drive_link = await _links(host)
        async with attached(drive_link, "bob") as bob:
            await bob.send(host_size)
            await bob.wait_for(_resized_to(host_size.cols, host_size.rows))
            with _attach(view_link, "--raw", name="carol", rows=rows, columns=columns) as screen:
                yield bob, screen


async def test_typing_while_output_arrives_keeps_the_typed_line_whole(
    relay: RelayProcess, tmp_path: Path
) -> None:
    async with _attached_to_fake_agent(relay, tmp_path) as (link, screen):
        screen.keys(b"half a li")
        await screen.wait_screen(r"^> half a li$", where="cursor")
        async with attached(link, "bob") as bob:
            await bob.send(Prompt(text="from bob"))
            await screen.wait_screen(r"agent echo: from bob")
        # Output scrolled above the line being typed; the line is as it was.
        assert screen.cursor_line() == "> half a li"
        screen.keys(b"ne\r")
        await screen.wait_screen(r"alice: half a line\n")
        await screen.wait_screen(r"agent echo: half a line")
        # The agent's commands complete at the prompt line (Tab), as in the page.
        screen.keys(b"/rev\t")
        await screen.wait_screen(r"^> /review$", where="cursor")
        screen.keys(b"\x15")  # Ctrl-U: the line is cleared, not sent
        screen.keys(b"\x04")  # Ctrl-D on an empty line: leave
        assert await screen.wait_exit() == 0


async def test_a_reply_shows_while_it_streams_before_the_turn_ends(
    relay: RelayProcess, tmp_path: Path
) -> None:
    async with _attached_to_fake_agent(relay, tmp_path) as (_, screen):
        # The agent streams a dot every 10 ms until the turn is cancelled; its reply
        # is stored only when the turn ends.
        screen.keys(b"wait\r")
        await screen.wait_screen(r"agent \.{5,}")
        assert "the turn was cancelled" not in "\n".join(screen.lines())
        screen.keys(b"/cancel\r")
        await screen.wait_screen(r"the turn was cancelled")
        # Ctrl-C at the prompt line stops attach as SIGINT does.
        screen.keys(b"\x03")
        assert await screen.wait_exit() == 130


async def test_a_fresh_attach_shows_the_last_items_and_knows_the_agents_commands(
    relay: RelayProcess, tmp_path: Path
) -> None:
    with _host(relay, tmp_path, f"acp:{sys.executable} {FAKE_ACP_AGENT}") as host:
        link = await _link(host)
        async with attached(link, "bob") as bob:
            for number in range(8):
                await bob.send(Prompt(text=f"prompt {number}"))
            await bob.wait_for(lambda t: t.item_of("message", text="echo: prompt 7"), within=30)
        with _attach(link, "--history", "3") as screen:
            await screen.wait_screen(r"attached as alice \(drive\)")
            await screen.wait_screen(r"earlier items not shown")
            await screen.wait_screen(r"agent echo: prompt 7")
            shown = "\n".join(screen.lines())
            # Three items of some twenty: the echoes of the last prompts, nothing of the first.
            assert "prompt 0" not in shown
            assert "prompt 4" not in shown
            # The commands the agent advertised at its start, long before: /help has them.
            screen.keys(b"/help\r")
            await screen.wait_screen(r"the agent's commands: /compact")


async def test_raw_mode_passes_every_key_and_the_size_to_a_pty_agent_until_ctrl_bracket(
    relay: RelayProcess, tmp_path: Path
) -> None:
    with _host(relay, tmp_path, f"pty:{sys.executable} -q") as host:
        link = await _link(host)
        with _attach(link, "--raw", rows=30, columns=100) as screen:
            await screen.wait_screen(r"(?m)^>>>")
            screen.keys(b"1+1\r")
            await screen.wait_screen(r"(?m)^2$")
            # The program sees this terminal's size, and its changes.
            screen.keys(b"import os; os.get_terminal_size()\r")
            await screen.wait_screen(r"columns=100, lines=30")
            screen.resize(40, 90)
            # The size travels apart from the keys: the program waits for it (10 s at most).
            screen.keys(
                b'exec("import time\\nfor _ in range(200):\\n'
                b' if os.get_terminal_size().columns == 90: break\\n time.sleep(0.05)");'
                b" os.get_terminal_size()\r"
            )
            await screen.wait_screen(r"columns=90, lines=40", within=15)
            # Enter alone reaches it (a new prompt), and so does Ctrl-C.
            screen.keys(b"\r")
            await screen.wait_screen(r"(?m)^>>>\n>>>$")
            screen.keys(b"while True: pass\r\r")
            await screen.wait_screen(r"(?m)^\.\.\.$")
            screen.keys(b"\x03")
            await screen.wait_screen(r"KeyboardInterrupt")
            screen.keys(b"\x1d")  # Ctrl-]
            assert await screen.wait_exit() == 0


async def test_a_blank_line_sends_enter_to_a_pty_agent_without_raw(
    relay: RelayProcess, tmp_path: Path
) -> None:
    with _host(relay, tmp_path, f"pty:{sys.executable} -q") as host:
        link = await _link(host)
        with _attach(link) as screen:
            await screen.wait_screen(r"blank line sends Enter")
            await screen.wait_screen(r">>>")
            screen.keys(b"1+1\r")
            await screen.wait_screen(r"(?m)^2$")
            screen.keys(b"\r")
            # The program answered Enter alone with a prompt of its own.
            await screen.wait_screen(r"(?m)^>>> ?\n>>>")


def _resized_to(cols: int, rows: int) -> Callable[[Teammate], bool]:
    size = {"cols": cols, "rows": rows}
    return lambda t: any(e["kind"] == "terminal_size" and e["data"] == size for e in t.events)


async def test_a_raw_viewer_in_a_smaller_terminal_is_told_the_hosts_size_first(
    relay: RelayProcess, tmp_path: Path
) -> None:
    host_size = Resize(cols=100, rows=40)
    async with _raw_viewer(relay, tmp_path, host_size, rows=20, columns=60) as (_, screen):
        await screen.wait_screen(r"the host's terminal is 100x40, larger than this one \(60x20\)")
        await screen.wait_screen(r"the agent's screen follows")
        screen.keys(b"\x1d")  # Ctrl-]
        assert await screen.wait_exit() == 0


async def test_a_raw_viewer_in_a_larger_terminal_sees_the_screen_at_the_hosts_rows(
    relay: RelayProcess, tmp_path: Path
) -> None:
    host_size = Resize(cols=60, rows=10)
    async with _raw_viewer(relay, tmp_path, host_size, rows=30, columns=100) as (bob, screen):
        await screen.wait_screen(r"(?m)^>>>")
        # Forty lines on a ten-row terminal: it scrolls, within its ten rows here too.
        await bob.send(Input(data=b'print("\\n".join(f"line {n}" for n in range(40)))\r'))
        await screen.wait_screen(r"(?m)^line 39\n>>>")
        shown = screen.display()
        assert "line 39" in shown[:10]
        assert shown[10:] == [""] * 20, "the screen runs past the host's ten rows"
        # The host's terminal grows: the screen starts over at the new size.
        await bob.send(Resize(cols=60, rows=25))
        await bob.send(Input(data=b'print("\\n".join(f"row {n}" for n in range(40)))\r'))
        await screen.wait_screen(r"(?m)^row 39\n>>>")
        shown = screen.display()
        assert "row 39" in shown[:25]
        assert shown[25:] == [""] * 5
        screen.keys(b"\x1d")  # Ctrl-]
        assert await screen.wait_exit() == 0
