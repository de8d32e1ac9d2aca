"""`tunnel attach` shows whatever names and texts others choose as text, never as markup."""

from __future__ import annotations

import io

from rich.console import Console

from tunnel.app.messages import error_message, pack, presence_message
from tunnel.e2e.crypto import ShareLink, new_secret
from tunnel.teammate.attach import Attachment, AttachSettings


def _attachment() -> tuple[Attachment, io.StringIO]:
    out = io.StringIO()
    link = ShareLink(
        relay_url="http://127.0.0.1:1", host_id="a" * 26, role="view", secret=new_secret()
    )
    attachment = Attachment(
        AttachSettings(link=link, name="me"),
        console=Console(file=out, width=200, color_system=None),
        stdin=io.StringIO(),
    )
    return attachment, out


def test_markup_in_names_and_messages_is_shown_literally() -> None:
    attachment, out = _attachment()
    attachment._show(presence_message([{"name": "[/x] alice [laptop]", "role": "view"}]))
    attachment._show(error_message("forbidden", "[bold]no[/bold]"))
    attachment._show(
        pack({"op": "ready", "name": "[/oops]", "role": "view", "agent": {"kind": "chat"}})
    )
    text = out.getvalue()
    assert "[/x] alice [laptop] (view)" in text
    assert "[bold]no[/bold]" in text
    assert "attached as [/oops] (view)" in text
