"""`tunnel attach` shows whatever names and texts others choose as text, never as markup."""

from __future__ import annotations

import io

from rich.console import Console

from tunnel.app.host_messages import Error, Member, PresenceMessage, Ready, encode
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
    attachment._show(
        encode(PresenceMessage(members=[Member(name="[/x] alice [laptop]", role="view")]))
    )
    attachment._show(encode(Error(code="forbidden", message="[bold]no[/bold]")))
    attachment._show(
        encode(
            Ready(
                conversation_id="c",
                name="[/oops]",
                role="view",
                agent_name="demo",
                agent_kind="chat",
            )
        )
    )
    text = out.getvalue()
    assert "[/x] alice [laptop] (view)" in text
    assert "[bold]no[/bold]" in text
    assert "attached as [/oops] (view)" in text
