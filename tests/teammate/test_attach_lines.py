"""What a typed line does in `tunnel attach`: a viewer is told in one line why it cannot drive,
a blank line is Enter for a terminal agent, and a replay prints only its last items."""

from __future__ import annotations

import io
from typing import Any, cast

import pytest
from rich.console import Console

from tests.teammate.feeding import show
from tunnel.app.host_messages import Ready, Snapshot, encode
from tunnel.app.requests import Input, Prompt, decode_request
from tunnel.e2e.crypto import ShareLink, new_secret
from tunnel.teammate.attach import VIEW_ONLY, Attachment, AttachSettings

pytestmark = pytest.mark.anyio


class Channel:
    """Keeps what attach sends."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def send(self, plaintext: bytes) -> None:
        self.sent.append(decode_request(plaintext))


def _attachment(role: str, *, history: int | None = None) -> tuple[Attachment, io.StringIO]:
    out = io.StringIO()
    link = ShareLink(
        relay_url="http://127.0.0.1:1", host_id="a" * 26, role=role, secret=new_secret()
    )
    console = Console(file=out, width=500, color_system=None)
    attachment = Attachment(
        AttachSettings(link=link, name="me", history=history),
        console=console,
        stdin=io.StringIO(),
        status=console,
    )
    return attachment, out


def _ready(role: str, kind: str = "chat") -> bytes:
    return encode(Ready(conversation_id="c", role=role, name="me", agent_name="a", agent_kind=kind))


async def _typed(attachment: Attachment, *lines: str) -> list[Any]:
    channel = Channel()
    for line in lines:
        await attachment._lines_send.send(line)
    attachment._lines_send.close()
    await attachment._forward_lines(cast(Any, channel))
    return channel.sent


async def test_a_viewer_typing_a_prompt_is_told_why_in_one_line_and_nothing_is_sent() -> None:
    attachment, out = _attachment("view")
    show(attachment, _ready("view"))
    sent = await _typed(attachment, "please do it", "/allow", "/cancel", "/mode plan")
    assert sent == []
    lines = out.getvalue().splitlines()
    # /allow says there is nothing to answer; each driving line says why, once.
    assert lines.count(VIEW_ONLY) == 3
    assert "Traceback" not in out.getvalue()


async def test_only_the_host_revokes_and_a_driver_prompt_is_sent() -> None:
    attachment, out = _attachment("drive")
    show(attachment, _ready("drive"))
    sent = await _typed(attachment, "/revoke", "hello")
    assert sent == [Prompt(text="hello")]
    assert "only the host can revoke the links" in out.getvalue()


async def test_a_blank_line_is_enter_for_a_terminal_agent_and_nothing_for_a_chat() -> None:
    terminal, _ = _attachment("drive")
    show(terminal, _ready("drive", "terminal"))
    assert await _typed(terminal, "\n", "ls\n") == [Input(data=b"\r"), Prompt(text="ls")]
    chat, _ = _attachment("drive")
    show(chat, _ready("drive"))
    assert await _typed(chat, "\n") == []


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "text": text}


def test_a_replay_prints_its_last_items_and_says_how_many_it_left_out() -> None:
    attachment, out = _attachment("view", history=2)
    show(attachment, _ready("view"))
    items = [
        {
            "seq": n,
            "type": "message",
            "created_by": "bob",
            "data": {"role": "user", "text": f"p{n}"},
        }
        for n in range(5)
    ]
    show(attachment, encode(Snapshot(items=items[:3], last_seq=4, more=True)))
    show(attachment, encode(Snapshot(items=items[3:], last_seq=4, more=False)))
    printed = out.getvalue()
    assert "3 earlier items not shown" in printed
    assert "bob: p3\nbob: p4\n" in printed
    assert "bob: p2" not in printed
    assert attachment.view.last_seq == 4  # every item was taken in, shown or not
