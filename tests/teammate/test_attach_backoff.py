"""`tunnel attach` starts its reconnect backoff over once an attachment has worked."""

from __future__ import annotations

import io

from rich.console import Console

from tests.teammate.feeding import show
from tunnel.app.host_messages import Ready, encode
from tunnel.e2e.crypto import ShareLink, new_secret
from tunnel.teammate.attach import Attachment, AttachSettings


def test_the_hosts_ready_resets_the_backoff_so_the_next_outage_starts_short() -> None:
    link = ShareLink(
        relay_url="http://127.0.0.1:1", host_id="a" * 26, role="view", secret=new_secret()
    )
    attachment = Attachment(
        AttachSettings(link=link, name="me"),
        console=Console(file=io.StringIO(), color_system=None),
        stdin=io.StringIO(),
    )
    backoff = attachment._backoff
    for _ in range(6):
        backoff.next_delay()  # six outages in a row: the next wait would be the cap
    assert backoff.next_delay() > backoff.initial
    show(
        attachment,
        encode(
            Ready(conversation_id="c", role="view", name="me", agent_name="demo", agent_kind="chat")
        ),
    )
    assert backoff.attempt == 0
    assert backoff.next_delay() <= backoff.initial
