"""`tunnel attach` prints nothing a teammate, the host or the agent chose as terminal control:
names, prompts, items, tool content, errors and its own notes are escaped, and a terminal agent's
screen is written as it is only with `--raw`.

The last tests run the real command on a pseudo-terminal with a hostile agent and hostile
teammates, and read every byte the terminal received: on a dumb terminal (lines only), and on
one that moves its cursor (the prompt line, replies streamed and rendered as markdown), whose
screen a terminal emulator shows.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from rich.console import Console

from tests.host.teammate import attached
from tests.support import RelayProcess, read_line
from tests.teammate.feeding import show
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
from tunnel.app.host_messages import (
    Error,
    EventMessage,
    ItemMessage,
    Member,
    PresenceMessage,
    Ready,
    SandboxInfo,
    Snapshot,
    encode,
)
from tunnel.app.requests import Prompt
from tunnel.e2e.crypto import ShareLink, new_secret
from tunnel.teammate.attach import Attachment, AttachSettings
from tunnel.terminal.sanitize import printable

ROOT = Path(__file__).resolve().parents[2]
TUNNEL = (sys.executable, "-m", "tunnel.cli")


def _attachment(*, raw: bool = False) -> tuple[Attachment, io.StringIO]:
    out = io.StringIO()
    link = ShareLink(
        relay_url="http://127.0.0.1:1", host_id="a" * 26, role="drive", secret=new_secret()
    )
    attachment = Attachment(
        AttachSettings(link=link, name="me", raw=raw),
        console=Console(file=out, width=10_000, color_system=None),
        stdin=io.StringIO(),
        status=Console(file=out, width=10_000, color_system=None),
    )
    return attachment, out


def _ready(kind: str = "chat", name: str = WIRE) -> bytes:
    sandbox = SandboxInfo(enabled=True, writable=[WIRE], network=False)
    return encode(
        Ready(
            conversation_id="c",
            name=name,
            role="drive",
            agent_name=WIRE,
            agent_kind=kind,
            sandbox=sandbox,
        )
    )


def _item(seq: int, kind: str, **data: Any) -> dict[str, Any]:
    return {"seq": seq, "type": kind, "created_by": WIRE, "data": data}


def test_names_items_events_and_errors_are_printed_escaped() -> None:
    attachment, out = _attachment()
    show(attachment, _ready())
    members = [Member(name=n, role="drive") for n in NAMES]
    show(attachment, encode(PresenceMessage(members=members, count=len(NAMES))))
    show(
        attachment,
        encode(
            Snapshot(
                items=[
                    _item(1, "message", role="user", text=WIRE),
                    _item(2, "tool_call", title=WIRE, input={WIRE: WIRE}),
                ],
                last_seq=2,
                more=False,
            )
        ),
    )
    request = {"request_id": "r1", "title": WIRE, "options": []}
    request["options"] = [{"option_id": WIRE, "name": WIRE, "kind": "allow_once"}]
    show(attachment, encode(ItemMessage(item=_item(3, "permission_request", **request))))
    show(attachment, encode(EventMessage(event={"kind": "status", "data": {"state": WIRE}})))
    show(attachment, encode(Error(code="forbidden", message=WIRE)))
    printed = out.getvalue()
    assert dangerous(printed) == []
    assert f"attached as {printable(WIRE)} (drive)" in printed
    assert f"refused: {printable(WIRE)}" in printed
    assert printable(NAMES[2]) in printed


@pytest.mark.anyio
async def test_a_said_text_that_echoes_the_agents_option_names_is_escaped() -> None:
    attachment, out = _attachment()
    request = {"request_id": "r1", "title": "t", "options": []}
    request["options"] = [{"option_id": WIRE, "name": WIRE, "kind": "reject_once"}]
    show(attachment, encode(ItemMessage(item=_item(1, "permission_request", **request))))
    out.seek(0)
    out.truncate()
    for line in ("/allow nope", "/allow", "/help", "/mode"):
        await attachment._lines_send.send(line)
    attachment._lines_send.close()
    await attachment._forward_lines(channel=cast(Any, None))  # each line only says something
    printed = out.getvalue()
    assert dangerous(printed) == []
    assert f"has no option 'nope'; its options: 1. {printable(WIRE)}" in printed


def test_why_attach_stops_is_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    attachment, _ = _attachment()
    attachment._stop(f"the host closed the channel: {WIRE}")
    assert dangerous(capsys.readouterr().err) == []


def test_a_terminal_agents_screen_is_escaped_without_raw() -> None:
    attachment, out = _attachment()
    show(attachment, _ready("terminal", name="me"))
    show(attachment, encode(ItemMessage(item=_item(1, "terminal", text="$ " + WIRE))))
    printed = out.getvalue()
    assert dangerous(printed) == []
    assert "--raw shows it as it is" in printed
    assert printed.endswith("$ " + printable(WIRE))  # chunks follow each other: no line break


def test_raw_passes_only_the_terminal_agents_own_screen_through() -> None:
    attachment, out = _attachment(raw=True)
    show(attachment, _ready("terminal", name="me"))
    show(attachment, encode(ItemMessage(item=_item(1, "message", role="user", text=WIRE))))
    show(
        attachment, encode(PresenceMessage(members=[Member(name=NAMES[0], role="drive")], count=1))
    )
    assert dangerous(out.getvalue()) == []
    screen = "\x1b[2J\x1b[Hhello\r\n"
    show(attachment, encode(ItemMessage(item=_item(2, "terminal", text=screen))))
    assert out.getvalue().endswith(screen)


def test_raw_does_not_pass_terminal_items_of_a_chat_session() -> None:
    attachment, out = _attachment(raw=True)
    show(attachment, _ready("chat", name="me"))
    show(attachment, encode(ItemMessage(item=_item(1, "terminal", text=WIRE))))
    assert dangerous(out.getvalue()) == []


# -- the real command on a real terminal ---------------------------------------------------------


def _start_host(relay: RelayProcess, tmp_path: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        hostile_host_argv(relay.url, tmp_path, "--no-interactive"),
        cwd=ROOT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


async def _drive_link(host: subprocess.Popen[bytes]) -> str:
    for _ in range(20):
        line = await anyio.to_thread.run_sync(read_line, host)
        match = re.search(r"drive link: (\S+)", line)
        if match:
            return match.group(1)
    raise AssertionError("the host printed no drive link")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_tunnel_attach_on_a_terminal_receives_no_control_sequence(
    relay: RelayProcess, tmp_path: Path
) -> None:
    host = _start_host(relay, tmp_path)
    try:
        link = await _drive_link(host)
        env = dict(os.environ, PYTHONUNBUFFERED="1", TUNNEL_LINK=link, **TERMINAL_ENV)
        argv = [*TUNNEL, "attach", "--name", "alice"]
        with pty_process(argv, env=env, cwd=ROOT) as attach:
            await attach.wait_for(r"attached as alice \(drive\)")
            async with (
                attached(link, NAMES[0]) as first,
                attached(link, NAMES[1]),
                attached(link, NAMES[2]) as third,
            ):
                await attach.wait_for(re.escape(printable(NAMES[2])))
                await first.send(Prompt(text=f"<prompt>{WIRE} ask"))
                await attach.wait_for(r"/allow \(allow once\)")
                for line, expect in hostile_commands(refused="refused: the agent refused"):
                    attach.type(line)
                    await attach.wait_for(expect)
                await attach.wait_for(r"turn over")
                await third.send(Prompt(text="fail"))
                await attach.wait_for(r"the agent failed the prompt: <failure>")
            attach.type("/quit")
            await attach.wait_for(r"/quit")
            assert await attach.wait_exit() == 0
        received = attach.received
    finally:
        _stop(host)

    text = received.decode("utf-8")  # strict: no stray byte a terminal could read as C1
    assert b"\x1b" not in received
    # One bell, ours, for the one permission request; none of the BELs the agent sent.
    assert bells(received) == 1
    assert dangerous(text.replace("\r\n", "\n").replace("\x07", "", 1)) == []
    # Each surface showed its hostile text, escaped (so the check above checked something).
    assert_every_label_shown_escaped(text)
    for name in NAMES:
        assert printable(name) in text


@pytest.mark.anyio
@pytest.mark.timeout(120)
async def test_tunnel_attach_with_a_prompt_line_receives_no_control_sequence_from_the_wire(
    relay: RelayProcess, tmp_path: Path
) -> None:
    host = _start_host(relay, tmp_path)
    try:
        link = await _drive_link(host)
        env = dict(
            os.environ, PYTHONUNBUFFERED="1", TUNNEL_LINK=link, TERM="xterm-256color", NO_COLOR="1"
        )
        argv = [*TUNNEL, "attach", "--name", "alice"]
        # Wide enough that a hostile string, escaped, stays on one line of the screen.
        with screen_process(argv, env=env, cwd=ROOT, rows=60, columns=1500) as attach:
            await attach.wait_screen(r"attached as alice \(drive\)")
            async with (
                attached(link, NAMES[0]) as first,
                attached(link, NAMES[1]),
                attached(link, NAMES[2]) as third,
            ):
                await attach.wait_screen(re.escape(printable(NAMES[2])))
                await first.send(Prompt(text=f"<prompt>{WIRE} ask"))
                await attach.wait_screen(r"/allow \(allow once\)")
                for line, expect in hostile_commands(refused="refused: the agent refused"):
                    attach.keys(line.encode() + b"\r")
                    await attach.wait_screen(expect)
                await attach.wait_screen(r"turn over")
                await third.send(Prompt(text="fail"))
                await attach.wait_screen(r"the agent failed the prompt: <failure>")
            attach.keys(b"/quit\r")
            assert await attach.wait_exit() == 0
            screen = "\n".join(attach.lines())
        received = attach.received
    finally:
        _stop(host)

    text = received.decode("utf-8")  # strict: no stray byte a terminal could read as C1
    # Ours: one bell for the one permission request, and the title saying how many wait.
    assert bells(received) == 1
    assert set(titles(received)) == {"[1 waiting] tunnel attach", "tunnel attach", ""}
    ours = re.sub(r"\x1b\]2;[^\x07\x1b]*\x07", "", text).replace("\x07", "", 1)
    assert dangerous(without_drawing(ours)) == []
    # Each surface showed its hostile text, escaped; the reply as markdown, beside its label.
    assert_every_label_shown_escaped(screen, markdown=("message",))
    assert re.search(r"^agent +echo: <prompt>", screen, re.MULTILINE)
    for name in NAMES:
        assert printable(name) in screen
