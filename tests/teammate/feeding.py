"""Host messages into a `tunnel attach` attachment as its session hands them on: through a
follower (`tunnel.app.follower`), one per attachment."""

from __future__ import annotations

from tunnel.app.follower import Follower
from tunnel.app.host_messages import decode_host_message
from tunnel.teammate.attach import Attachment

_followers: dict[int, tuple[Attachment, Follower]] = {}


def show(attachment: Attachment, plaintext: bytes) -> None:
    """Show one encoded host message as `receive()` would have handed on its events."""
    _, follower = _followers.setdefault(id(attachment), (attachment, Follower(host_id="host")))
    for event in follower.receive_message(decode_host_message(plaintext)):
        attachment._show(event)
