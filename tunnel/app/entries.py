"""A log entry as the host's message on a session channel, and the page bounds it fits in.

What the host sends of the log, on a channel (a snapshot page, a catch-up) and in a cast alike:
an item cut to fit a message if it must be, or an event (docs/application.md).
"""

from __future__ import annotations

from typing import Any

from tunnel.app import host_messages as out
from tunnel.log.item import Event, Item

# A snapshot page is one encrypted `d`, at most 256 KiB on the wire; keep well under it so the
# page, its msgpack framing and the AEAD tag always fit.
SNAPSHOT_PAGE_BYTES = 192 * 1024
SNAPSHOT_PAGE_ITEMS = 200
# An item larger than a page (a huge diff) is sent with its data cut down to a note, so the
# sequence still has no gap.
MAX_ITEM_BYTES = SNAPSHOT_PAGE_BYTES


def fit_item(wire: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The item's wire map, with its data replaced by a note if it could never fit a message,
    and its packed size."""
    size = len(out.pack(wire))
    if size <= MAX_ITEM_BYTES:
        return wire, size
    wire = {**wire, "data": {"truncated": True, "note": "item too large to send"}}
    return wire, len(out.pack(wire))


def encode_entry(entry: Item | Event) -> bytes | None:
    """The live-tail message of a log entry: an item (cut to fit if it must be), or an event;
    None for an event too large for a message. An event is ephemeral and its content arrives
    again in the item that follows it, so one too large (a huge streamed chunk) is skipped,
    never allowed to end a channel."""
    if isinstance(entry, Item):
        return out.encode(out.ItemMessage(item=fit_item(entry.to_wire())[0]))
    plaintext = out.encode(out.EventMessage(event=entry.to_wire()))
    return plaintext if len(plaintext) <= MAX_ITEM_BYTES else None
