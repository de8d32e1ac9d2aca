"""Host -> teammate messages (docs/application.md, "Host to teammate"): typed, encoded, decoded.

The host builds them as dataclasses and `encode`s them; a Python teammate `parse`s what arrives
into the same dataclasses. Items and events travel as the log's wire maps (`Item.to_wire()`),
which the receiver reads field by field: the item type set is open.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from tunnel.app.errors import ERROR_CODES, BadRequest, ErrorCode

__all__ = [
    "Error",
    "EventMessage",
    "HostMessage",
    "ItemMessage",
    "Member",
    "PresenceMessage",
    "Ready",
    "SandboxInfo",
    "Snapshot",
    "decode_host_message",
    "encode",
    "pack",
    "parse",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxInfo:
    """Where the agent's process may reach, so a teammate knows the boundary before driving."""

    enabled: bool
    """Whether the agent runs in the host's sandbox (`tunnel host --sandbox`); if not, it can
    do whatever the host's user can."""
    writable: Sequence[str] = ()
    """Sandboxed: the host paths where the agent's writes are kept (the workspace first)."""
    network: bool = True
    """Sandboxed: whether the agent has a network (False: `--sandbox-net none`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Ready:
    """The host's first message on a channel, once the keys work."""

    conversation_id: str
    role: str
    """The teammate's role: "view" or "drive"."""
    name: str
    """The teammate's display name, as the host bound it into the keys."""
    agent_name: str
    agent_kind: str
    """"chat" or "terminal": whether to show a conversation or a terminal."""
    sandbox: SandboxInfo | None = None
    """None only from a host too old to say."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """One page of stored items after the subscriber's `after`; `more=False` ends the snapshot."""

    items: Sequence[Mapping[str, Any]]
    last_seq: int
    more: bool
    reset: bool = False
    """First page only: the log does not reach the subscriber's `after`; start over."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ItemMessage:
    """One newly appended item (the live tail), in seq order."""

    item: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class EventMessage:
    """An ephemeral event: never stored, no seq."""

    event: Mapping[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class Member:
    """One attached person."""

    name: str
    role: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PresenceMessage:
    """Who is attached; sent whenever it changes."""

    members: Sequence[Member]


@dataclass(frozen=True, slots=True, kw_only=True)
class Error:
    """A request was refused; nothing happened."""

    code: ErrorCode
    message: str


HostMessage = Ready | Snapshot | ItemMessage | EventMessage | PresenceMessage | Error


def pack(message: Mapping[str, Any]) -> bytes:
    """Encode one application message map."""
    packed: bytes = msgpack.packb(message, use_bin_type=True)
    return packed


def encode(message: HostMessage) -> bytes:
    """Return the plaintext of `message`."""
    wire: dict[str, Any]
    match message:
        case Ready():
            wire = {
                "op": "ready",
                "conversation_id": message.conversation_id,
                "role": message.role,
                "name": message.name,
                "agent": {"name": message.agent_name, "kind": message.agent_kind},
            }
            if message.sandbox is not None:
                wire["sandbox"] = {
                    "enabled": message.sandbox.enabled,
                    "writable": list(message.sandbox.writable),
                    "network": message.sandbox.network,
                }
        case Snapshot():
            wire = {
                "op": "snapshot",
                "items": list(message.items),
                "last_seq": message.last_seq,
                "more": message.more,
                "reset": message.reset,
            }
        case ItemMessage():
            wire = {"op": "item", "item": message.item}
        case EventMessage():
            wire = {"op": "event", "event": message.event}
        case PresenceMessage():
            members = [{"name": m.name, "role": m.role} for m in message.members]
            wire = {"op": "presence", "members": members}
        case Error():
            wire = {"op": "error", "code": message.code, "message": message.message}
    return pack(wire)


def decode_host_message(plaintext: bytes) -> dict[str, Any]:
    """Decode a host message into its map; `BadRequest` if it is not a map with an `op`."""
    try:
        message = msgpack.unpackb(plaintext, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises many types
        raise BadRequest("not a msgpack map") from exc
    if not isinstance(message, dict) or not isinstance(message.get("op"), str):
        raise BadRequest("not an application message")
    return message


def parse(plaintext: bytes) -> HostMessage:
    """Decode a host message into its dataclass; `BadRequest` (only) if it is not one.

    Fields a newer host adds are ignored; an unknown op is a `BadRequest` the caller may skip.
    """
    message = decode_host_message(plaintext)
    op = message["op"]
    if op == "ready":
        agent = _get(message, "agent", dict)
        return Ready(
            conversation_id=_get(message, "conversation_id", str),
            role=_get(message, "role", str),
            name=_get(message, "name", str),
            agent_name=_get(agent, "name", str),
            agent_kind=_get(agent, "kind", str),
            sandbox=_sandbox(message.get("sandbox")),
        )
    if op == "snapshot":
        return Snapshot(
            items=[item for item in _get(message, "items", list) if isinstance(item, dict)],
            last_seq=_get(message, "last_seq", int),
            more=_get(message, "more", bool),
            reset=message.get("reset") is True,
        )
    if op == "item":
        return ItemMessage(item=_get(message, "item", dict))
    if op == "event":
        return EventMessage(event=_get(message, "event", dict))
    if op == "presence":
        members = [
            Member(name=_get(m, "name", str), role=_get(m, "role", str))
            for m in _get(message, "members", list)
            if isinstance(m, dict)
        ]
        return PresenceMessage(members=members)
    if op == "error":
        code = _get(message, "code", str)
        if code not in ERROR_CODES:
            raise BadRequest("unknown error code")
        return Error(code=code, message=_get(message, "message", str))
    raise BadRequest("unknown op")


def _sandbox(value: Any) -> SandboxInfo | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest("field 'sandbox' must be dict")
    writable = _get(value, "writable", list)
    if not all(isinstance(path, str) for path in writable):
        raise BadRequest("field 'writable' must be a list of str")
    return SandboxInfo(
        enabled=_get(value, "enabled", bool),
        writable=writable,
        network=_get(value, "network", bool),
    )


def _get(message: Mapping[str, Any], name: str, kind: type) -> Any:
    value = message.get(name)
    # bool is an int subclass; a boolean where a number belongs is a bug, not a number.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadRequest(f"field {name!r} must be {kind.__name__}")
    return value
