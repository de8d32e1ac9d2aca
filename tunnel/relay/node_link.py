"""The node link's wire: teammates of one entry node multiplexed over one WebSocket to their
host's node, and a host's cast sent once for all of them (docs/cluster.md, "The node link").

Every message on a node link is one binary WebSocket message, an *envelope*: a type byte, then
big-endian fields, then the bytes it carries. A *slot* names one teammate connection the entry
node carries (the entry node picks it). No I/O here: `pack_*` build envelopes, `unpack` reads one
into an `Envelope`, and `merge` turns what the owner's teammate links wrote into envelopes, one
`CAST` for every cast that several of them carry.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from tunnel.proto import Outgoing, Payload
from tunnel.proto.frames import cast_channel

__all__ = [
    "ATTACH",
    "CAST",
    "CLOSE",
    "MAX_OVERHEAD",
    "MAX_RECIPIENTS",
    "MESSAGE",
    "TEXT",
    "Envelope",
    "EnvelopeError",
    "Written",
    "merge",
    "pack_attach",
    "pack_close",
    "pack_message",
    "unpack",
]

MESSAGE = 1
"""Either way: one WebSocket binary message of a slot's teammate link, as it is."""
TEXT = 2
"""Either way: one text message of a slot (not the link protocol: passed on for the owner to
refuse, as the per-teammate hop does)."""
CAST = 3
"""Owner to entry: one cast for several slots: (slot, channel) pairs, then the cast's bytes. The
entry node writes each slot a `cast` frame on its channel, which is what the owner's link would
have written."""
ATTACH = 4
"""Entry to owner: a new slot: the teammate's address, then its hello (its first message)."""
CLOSE = 5
"""Either way: a slot ended, with the close code and reason its teammate gets or gave."""

MAX_OVERHEAD = 1 + 4 + 1 + 255
"""Bytes an envelope adds at most to the message it carries (an attach's: type, slot, address):
a node link takes messages this much larger than a teammate's link does."""

MAX_RECIPIENTS = 0xFFFF
"""(slot, channel) pairs one `CAST` carries at most; a larger fan-out takes several."""

_SLOT = struct.Struct(">I")
_CLOSE = struct.Struct(">IH")
_PAIR = struct.Struct(">II")
_COUNT = struct.Struct(">H")


class EnvelopeError(ValueError):
    """An envelope that is not one: the node link is broken (close it with 1002)."""


@dataclass(frozen=True, slots=True)
class Envelope:
    """One node link message, read."""

    type: int
    slot: int = 0
    """The slot (every type but `CAST`)."""
    body: bytes | str = b""
    """`MESSAGE`: the message; `TEXT`: the text; `CAST`: the cast's bytes; `ATTACH`: the hello;
    `CLOSE`: the reason."""
    code: int = 0
    """`CLOSE`: the close code."""
    client: str = ""
    """`ATTACH`: the teammate's address, as the entry node saw it."""
    recipients: tuple[tuple[int, int], ...] = ()
    """`CAST`: (slot, channel) of every copy."""


def pack_message(slot: int, message: bytes | str) -> bytes:
    """A `MESSAGE` (or `TEXT`, for a str) envelope."""
    if isinstance(message, str):
        return bytes((TEXT,)) + _SLOT.pack(slot) + message.encode()
    return bytes((MESSAGE,)) + _SLOT.pack(slot) + message


def pack_attach(slot: int, client: str, hello: bytes) -> bytes:
    """An `ATTACH` envelope: a teammate from `client` that said `hello`."""
    address = client.encode()[:255]
    return bytes((ATTACH,)) + _SLOT.pack(slot) + bytes((len(address),)) + address + hello


def pack_close(slot: int, code: int, reason: str) -> bytes:
    """A `CLOSE` envelope (`code` a WebSocket close code, `reason` already clipped)."""
    return bytes((CLOSE,)) + _CLOSE.pack(slot, code) + reason.encode()


def pack_cast(recipients: Sequence[tuple[int, int]], data: Payload) -> list[bytes | Payload]:
    """A `CAST` envelope as pieces to join or write in order: the header, then `data` uncopied."""
    if not 1 <= len(recipients) <= MAX_RECIPIENTS:
        raise ValueError(f"a cast goes to 1 to {MAX_RECIPIENTS} slots")
    pairs = b"".join(_PAIR.pack(slot, channel) for slot, channel in recipients)
    return [bytes((CAST,)) + _COUNT.pack(len(recipients)) + pairs, data]


def unpack(message: bytes) -> Envelope:
    """The envelope `message` holds; EnvelopeError for anything else."""
    if not message:
        raise EnvelopeError("an empty envelope")
    kind = message[0]
    try:
        if kind in (MESSAGE, TEXT):
            (slot,) = _SLOT.unpack_from(message, 1)
            body = message[5:]
            return Envelope(kind, slot, body if kind == MESSAGE else body.decode())
        if kind == CAST:
            (count,) = _COUNT.unpack_from(message, 1)
            end = 3 + count * _PAIR.size
            if count == 0 or len(message) <= end:
                raise EnvelopeError("a cast envelope without recipients or bytes")
            pairs = tuple(_PAIR.iter_unpack(message[3:end]))
            return Envelope(CAST, body=message[end:], recipients=pairs)
        if kind == ATTACH:
            (slot,) = _SLOT.unpack_from(message, 1)
            size = message[5]
            if len(message) < 6 + size:
                raise EnvelopeError("a truncated attach envelope")
            client = message[6 : 6 + size].decode()
            return Envelope(ATTACH, slot, message[6 + size :], client=client)
        if kind == CLOSE:
            slot, code = _CLOSE.unpack_from(message, 1)
            return Envelope(CLOSE, slot, message[7:].decode(), code=code)
    except (struct.error, IndexError, UnicodeDecodeError):
        raise EnvelopeError("a malformed envelope") from None
    raise EnvelopeError("an unknown envelope type")


Written: TypeAlias = tuple[int, Sequence[Outgoing | str]]
"""What one teammate link wrote: its slot and its messages, in order."""


def merge(written: Iterable[Written]) -> list[bytes | list[bytes | Payload]]:
    """The envelopes that carry `written` (in the order written, slot by slot): each slot's
    messages keep their order, and a cast several slots carry, the same bytes object queued
    for each, becomes one `CAST` envelope at the place it holds in each of them.

    A `CAST` is returned as its pieces (`pack_cast`); every other envelope as bytes.
    """
    queues: dict[int, deque[Outgoing | str]] = {}
    for slot, messages in written:
        queues.setdefault(slot, deque()).extend(messages)
    out: list[bytes | list[bytes | Payload]] = []
    while queues:
        # Each slot's messages up to its next cast go out as they are.
        for slot, queue in list(queues.items()):
            while queue:
                head = queue[0]
                if isinstance(head, tuple) and cast_channel(head[0]) is not None:
                    break
                queue.popleft()
                out.append(_message(slot, head))
            if not queue:
                del queues[slot]
        if not queues:
            break
        # Every slot left waits at a cast: those that wait at the same bytes take one envelope.
        first = next(iter(queues.values()))[0]
        assert isinstance(first, tuple)
        data = first[1]
        recipients: list[tuple[int, int]] = []
        for slot, queue in queues.items():
            # A teammate with several channels that take the cast has its copies one behind
            # the other (the switch copies a cast to every channel before the next message).
            while queue and len(recipients) < MAX_RECIPIENTS:
                head = queue[0]
                if not isinstance(head, tuple) or head[1] is not data:
                    break
                channel = cast_channel(head[0])
                if channel is None:
                    break
                recipients.append((slot, channel))
                queue.popleft()
        for slot in [slot for slot, queue in queues.items() if not queue]:
            del queues[slot]
        out.append(pack_cast(recipients, data))
    return out


def _message(slot: int, message: Outgoing | str) -> bytes:
    if isinstance(message, tuple):
        head, data = message
        return b"".join((bytes((MESSAGE,)), _SLOT.pack(slot), head, data))
    return pack_message(slot, message)
