"""`Broadcaster` in process: what its `broadcast` message holds, and that it always fits."""

from __future__ import annotations

from tunnel.app.host_messages import BroadcastStart, parse
from tunnel.e2e.crypto import TAG_SIZE
from tunnel.e2e.identity import HostIdentity
from tunnel.handshake import MAX_NAME_LENGTH
from tunnel.host.broadcast import MAX_LISTED_MEMBERS, Broadcaster
from tunnel.host.presence import Member, Presence
from tunnel.log import Log, MemoryStore
from tunnel.proto import DEFAULT_LIMITS


def broadcaster(presence: Presence, identity: HostIdentity | None = None) -> Broadcaster:
    return Broadcaster(
        identity=identity or HostIdentity.generate(),
        log=Log(MemoryStore()),
        conversation_id="main",
        presence=presence,
        link=lambda: None,
    )


def test_the_broadcast_message_of_the_largest_room_fits_one_message() -> None:
    presence = Presence()
    widest = "\U0001f600" * MAX_NAME_LENGTH  # four UTF-8 bytes each
    for _ in range(MAX_LISTED_MEMBERS + 50):
        presence.join(Member(name=widest, role="drive"))
    message = broadcaster(presence).start_message(you=MAX_LISTED_MEMBERS + 10)
    # What a channel's `send_built` accepts: one `data` frame minus the AEAD tag.
    assert len(message) <= DEFAULT_LIMITS.largest_data - TAG_SIZE
    start = parse(message)
    assert isinstance(start, BroadcastStart)
    assert [m.id for m in start.members] == list(range(MAX_LISTED_MEMBERS))
    assert start.you == MAX_LISTED_MEMBERS + 10


def test_the_broadcast_message_says_the_next_cast_and_the_host_key() -> None:
    presence = Presence()
    host = presence.join(Member(name="host", role="host"))
    identity = HostIdentity.generate()
    cast = broadcaster(presence, identity)
    start = parse(cast.start_message(you=host))
    assert isinstance(start, BroadcastStart)
    assert start.counter == 0
    assert start.public_key == identity.public_key
    assert [(m.id, m.name, m.role) for m in start.members] == [(host, "host", "host")]
    cast.new_epoch()
    again = parse(cast.start_message(you=host))
    assert isinstance(again, BroadcastStart)
    assert (again.epoch, again.key) != (start.epoch, start.key)
