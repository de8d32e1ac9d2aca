"""The host console prints nothing a joiner, a teammate or the agent chose as terminal control:
the `--approve` question, who is attached, prompts, items, tool content, said texts and errors
are all escaped.

The last tests run `tunnel host --approve` on a pseudo-terminal with a hostile agent and hostile
joiners, and read every byte the host user's terminal received: a dumb terminal (lines only),
and one that moves its cursor (the prompt line, replies rendered as markdown), whose screen a
terminal emulator shows.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from rich.console import Console

from tests.support import RelayProcess
from tests.terminal.hostile import (
    NAMES,
    WIRE,
    assert_every_label_shown_escaped,
    dangerous,
    hostile_commands,
    hostile_host_argv,
    without_drawing,
)
from tests.terminal.pty_process import (
    TERMINAL_ENV,
    bells,
    pty_process,
    screen_process,
    titles,
)
from tunnel.app.requests import Prompt
from tunnel.host.console import HostConsole
from tunnel.host.presence import Member, Presence
from tunnel.process.groups import unwrap_group
from tunnel.teammate.client import RefusedError
from tunnel.terminal.sanitize import printable

from .teammate import attached

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


def _console(presence: Presence | None = None) -> tuple[HostConsole, io.StringIO]:
    out = io.StringIO()
    console = HostConsole(
        # The question and who is attached need neither the session nor the log.
        session=cast(Any, None),
        log=cast(Any, None),
        presence=presence or Presence(),
        host_name="hannah",
        console=Console(file=out, width=10_000, color_system=None),
        stdin=io.StringIO(),
    )
    return console, out


@pytest.mark.parametrize("answer", ["y", "n"])
async def test_the_approve_question_shows_a_hostile_name_escaped(answer: str) -> None:
    console, out = _console()
    admitted: list[bool] = []

    async def ask() -> None:
        admitted.append(await console.approve_join(NAMES[0], "drive"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask)
        with anyio.fail_after(5):
            while "Admit?" not in out.getvalue():
                await anyio.sleep(0.01)
        await console._handle_line(answer)
    printed = out.getvalue()
    assert admitted == [answer == "y"]
    assert dangerous(printed) == []
    assert f"{printable(NAMES[0])} wants to drive. Admit? [y/N]" in printed
    verdict = "admitted" if answer == "y" else "refused"
    assert f"{printable(NAMES[0])} {verdict}" in printed


async def test_who_is_attached_is_shown_escaped() -> None:
    presence = Presence()
    console, out = _console(presence)
    async with anyio.create_task_group() as tg:
        tg.start_soon(console._show_presence, presence)
        await anyio.sleep(0)
        for name in NAMES:
            presence.join(Member(name=name, role="drive"))
        with anyio.fail_after(5):
            while printable(NAMES[-1]) not in out.getvalue():
                await anyio.sleep(0.01)
        tg.cancel_scope.cancel()
    assert dangerous(out.getvalue()) == []


# -- the real command on a real terminal ---------------------------------------------------------


@pytest.mark.timeout(120)
async def test_the_host_console_on_a_terminal_receives_no_control_sequence(
    relay: RelayProcess, tmp_path: Path
) -> None:
    argv = hostile_host_argv(relay.url, tmp_path, "--name", "hannah", "--approve")
    env = dict(os.environ, PYTHONUNBUFFERED="1", **TERMINAL_ENV)
    with pty_process(argv, env=env, cwd=ROOT) as host:
        link = (await host.wait_for(r"drive link: (\S+)")).group(1)
        async with contextlib.AsyncExitStack() as stack:
            joined = []
            for name in NAMES[:2]:
                teammate = await stack.enter_async_context(attached(link, name, subscribe=False))
                await host.wait_for(re.escape(f"{printable(name)} wants to drive. Admit? [y/N]"))
                host.type("y")
                await teammate.wait_for(lambda t: t.ready is not None)
                joined.append(teammate)

            async def refused_joiner() -> None:
                async with unwrap_group(), attached(link, NAMES[2], subscribe=False) as refused:
                    await host.wait_for(re.escape(f"{printable(NAMES[2])} wants to drive."))
                    host.type("n")
                    await refused.wait_for(lambda t: t.ready is not None)

            with pytest.raises(RefusedError):
                await refused_joiner()
            await host.wait_for(re.escape(f"{printable(NAMES[2])} refused"))

            await joined[0].send(Prompt(text=f"<prompt>{WIRE} ask"))
            await host.wait_for(r"/allow \(allow once\)")
            for line, expect in hostile_commands():
                host.type(line)
                await host.wait_for(expect)
            await host.wait_for(r"turn over")
            await joined[1].send(Prompt(text="fail"))
            await host.wait_for(r"the agent failed the prompt: <failure>")
        host.type("/quit")
        assert await host.wait_exit(within=20) == 0
    received = host.received

    text = received.decode("utf-8")  # strict: no stray byte a terminal could read as C1
    assert b"\x1b" not in received
    # One bell, ours, for the one permission request; none of the BELs the agent sent.
    assert bells(received) == 1
    assert dangerous(text.replace("\r\n", "\n").replace("\x07", "", 1)) == []
    assert_every_label_shown_escaped(text, extra=("refusal",))
    presence = [line for line in text.splitlines() if line.rstrip().endswith(") joined")]
    for name in NAMES[:2]:
        assert any(printable(name) in line for line in presence), name


@pytest.mark.timeout(120)
async def test_the_host_console_with_a_prompt_line_receives_no_control_sequence_from_the_wire(
    relay: RelayProcess, tmp_path: Path
) -> None:
    argv = hostile_host_argv(relay.url, tmp_path, "--name", "hannah", "--approve")
    env = dict(os.environ, PYTHONUNBUFFERED="1", TERM="xterm-256color", NO_COLOR="1")
    # Wide enough that a hostile string, escaped, stays on one line of the screen.
    with screen_process(argv, env=env, cwd=ROOT, rows=60, columns=1500) as host:
        link = (await host.wait_screen(r"drive link: (\S+)")).group(1)
        async with contextlib.AsyncExitStack() as stack:
            joined = []
            for name in NAMES[:2]:
                teammate = await stack.enter_async_context(attached(link, name, subscribe=False))
                await host.wait_screen(re.escape(f"{printable(name)} wants to drive. Admit? [y/N]"))
                # The prompt line asks the question too.
                await host.wait_screen(r"^admit\? \[y/N\]", where="cursor")
                host.keys(b"y\r")
                await teammate.wait_for(lambda t: t.ready is not None)
                joined.append(teammate)

            await joined[0].send(Prompt(text=f"<prompt>{WIRE} ask"))
            await host.wait_screen(r"/allow \(allow once\)")
            for line, expect in hostile_commands():
                host.keys(line.encode() + b"\r")
                await host.wait_screen(expect)
            await host.wait_screen(r"turn over")
            await joined[1].send(Prompt(text="fail"))
            await host.wait_screen(r"the agent failed the prompt: <failure>")
        host.keys(b"/quit\r")
        assert await host.wait_exit(within=20) == 0
        screen = "\n".join(host.lines())
    received = host.received

    text = received.decode("utf-8")  # strict: no stray byte a terminal could read as C1
    # Ours: one bell for the one permission request, and the title saying how many wait.
    assert bells(received) == 1
    assert set(titles(received)) == {"[1 waiting] tunnel host", "tunnel host", ""}
    ours = re.sub(r"\x1b\]2;[^\x07\x1b]*\x07", "", text).replace("\x07", "", 1)
    assert dangerous(without_drawing(ours)) == []
    assert_every_label_shown_escaped(screen, extra=("refusal",), markdown=("message",))
    presence = [line for line in screen.splitlines() if line.rstrip().endswith(") joined")]
    for name in NAMES[:2]:
        assert any(printable(name) in line for line in presence), name
