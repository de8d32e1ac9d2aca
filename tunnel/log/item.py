"""The values of the conversation log: stored `Item`s, the `NewItem`s callers append, and
ephemeral `Event`s, with their wire form (docs/application.md, "Items" and "Events").

Everything here is a pure value: no I/O. `prepare()` is the one place that checks what a caller
wants to append, so every store accepts and refuses exactly the same things.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

__all__ = [
    "CORRUPT_TYPE",
    "MAX_DEPTH",
    "MAX_ID_CHARS",
    "CorruptItem",
    "Event",
    "Item",
    "NewItem",
    "PreparedItem",
    "check_conversation_id",
    "check_data",
    "format_time",
    "micros_to_time",
    "parse_time",
    "prepare",
    "time_to_micros",
]


MAX_DEPTH: Final = 64
"""How deeply `data` may nest: deeper values are refused instead of exhausting the stack."""

MAX_ID_CHARS: Final = 256
"""Longest conversation id, type, status, response id or author accepted."""

CORRUPT_TYPE: Final = "corrupt"
"""The type of a `CorruptItem`: the placeholder for a stored item that could not be read."""

_INT_MIN: Final = -(2**63)
_INT_MAX: Final = 2**64 - 1  # msgpack's integer range: anything wider would not survive the wire.
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)

_WIRE_KEYS: Final = frozenset(
    {
        "id",
        "conversation_id",
        "seq",
        "type",
        "status",
        "response_id",
        "created_at",
        "created_by",
        "data",
    }
)
_EVENT_KEYS: Final = frozenset({"conversation_id", "kind", "data"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Item:
    """One stored entry of a conversation. Items are never mutated once stored.

    `data` is shared by every reader of the item (all subscribers get the same object): treat it
    as read-only.
    """

    conversation_id: str
    """The conversation this item belongs to."""
    seq: int
    """Position in the conversation: 0, 1, 2, ... with no gap, assigned by the store."""
    type: str
    """What the item is: `message`, `tool_call`, ... (docs/application.md, "Items") or any other
    non-empty string."""
    status: str | None
    """`completed`, `in_progress`, `action_required`, another string, or None."""
    response_id: str | None
    """Groups the items of one agent response (and the `delta` events streamed before them)."""
    created_at: datetime
    """When the item was stored (or the time the caller gave), timezone-aware, in UTC."""
    created_by: str
    """Who made it: "host", a teammate's name, "agent", ..."""
    data: Mapping[str, Any]
    """String keys, JSON-safe values; the shape depends on `type`."""

    @property
    def id(self) -> str:
        """The stable id `"<conversation_id>:<seq>"`."""
        return f"{self.conversation_id}:{self.seq}"

    def to_wire(self) -> dict[str, Any]:
        """The item as a string-keyed map that survives msgpack and JSON unchanged.

        `created_at` becomes an ISO 8601 string in UTC. The `data` value is the item's own map,
        not a copy: do not mutate it.
        """
        return {
            "id": self.id,
            "conversation_id": self.conversation_id,
            "seq": self.seq,
            "type": self.type,
            "status": self.status,
            "response_id": self.response_id,
            "created_at": format_time(self.created_at),
            "created_by": self.created_by,
            "data": self.data,
        }

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> Item:
        """Parse and check a map made by `to_wire()` (after msgpack or JSON).

        Raises `ValueError` naming the first field that is missing, unknown or wrong.
        """
        if not isinstance(wire, Mapping):
            raise ValueError(f"an item must be a map, not {type(wire).__name__}")
        unknown = [str(k) for k in wire if k not in _WIRE_KEYS]
        if unknown:
            raise ValueError(f"unknown item field(s): {', '.join(sorted(unknown))}")
        missing = sorted(_WIRE_KEYS - {"id"} - wire.keys())
        if missing:
            raise ValueError(f"item field(s) missing: {', '.join(missing)}")
        conversation_id = check_conversation_id(wire["conversation_id"])
        seq = wire["seq"]
        if type(seq) is not int or seq < 0:
            raise ValueError(f"item seq must be an integer >= 0, not {seq!r}")
        created_at = wire["created_at"]
        if not isinstance(created_at, str):
            raise ValueError("item created_at must be an ISO 8601 string")
        data = wire["data"]
        if not isinstance(data, Mapping):
            raise ValueError(f"item data must be a map, not {type(data).__name__}")
        item = cls(
            conversation_id=conversation_id,
            seq=seq,
            type=_check_name("type", wire["type"]),
            status=_check_optional_name("status", wire["status"]),
            response_id=_check_optional_name("response_id", wire["response_id"]),
            created_at=parse_time(created_at),
            created_by=_check_name("created_by", wire["created_by"]),
            data=check_data(data),
        )
        if "id" in wire and wire["id"] != item.id:
            raise ValueError(f"item id {wire['id']!r} does not match {item.id!r}")
        return item


@dataclass(frozen=True, slots=True, kw_only=True)
class CorruptItem(Item):
    """The placeholder a store returns for a stored item it cannot read (docs/log.md, "Faults").

    It keeps the item's conversation and seq, so readers see no gap and export and import keep
    their numbering. `type` is `CORRUPT_TYPE`; `data` says what could not be read, never what the
    unreadable bytes were: `{"reason": "column data is not JSON (...)", "columns": ["data"]}`,
    plus `"stored_type"` when the stored type was readable. `created_at` and `created_by` are
    the stored ones when they were readable (else the epoch and `"unknown"`). On the wire it is
    an ordinary item of type `corrupt`.
    """


@dataclass(frozen=True, slots=True, kw_only=True)
class NewItem:
    """What a caller appends: the store assigns `seq`, and `created_at` when it is None."""

    type: str
    """What the item is: `message`, `tool_call`, ... (docs/application.md, "Items") or any other
    non-empty string."""
    data: Mapping[str, Any]
    """String keys, JSON-safe values (no bytes: text goes in `str`); copied when appended."""
    created_by: str
    """Who made it: "host", a teammate's name, "agent", ..."""
    status: str | None = None
    """`completed`, `in_progress`, `action_required`, another string, or None."""
    response_id: str | None = None
    """Groups the items of one agent response."""
    created_at: datetime | None = None
    """A timezone-aware time to record instead of the time of the append."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Something ephemeral (a text delta, status, plan, presence): sent live, never stored."""

    conversation_id: str
    """The conversation whose subscribers receive it."""
    kind: str
    """`delta`, `status`, `plan`, `usage`, ... (docs/application.md, "Events")."""
    data: Mapping[str, Any]
    """String keys, values that msgpack can carry; shared by every subscriber: do not mutate."""

    def to_wire(self) -> dict[str, Any]:
        """The event as a string-keyed map: `{"conversation_id", "kind", "data"}`."""
        return {"conversation_id": self.conversation_id, "kind": self.kind, "data": self.data}

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any]) -> Event:
        """Parse a map made by `to_wire()`; raises `ValueError` naming what is wrong."""
        if not isinstance(wire, Mapping):
            raise ValueError(f"an event must be a map, not {type(wire).__name__}")
        if wire.keys() != _EVENT_KEYS:
            raise ValueError("an event has exactly the fields conversation_id, kind and data")
        data = wire["data"]
        if not isinstance(data, Mapping):
            raise ValueError(f"event data must be a map, not {type(data).__name__}")
        return cls(
            conversation_id=check_conversation_id(wire["conversation_id"]),
            kind=_check_name("kind", wire["kind"]),
            data=data,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedItem:
    """A `NewItem` after `prepare()`: checked, with its data copied and encoded as JSON."""

    type: str
    status: str | None
    response_id: str | None
    created_by: str
    created_at: datetime | None
    data: dict[str, Any]
    data_json: str

    def stored(self, conversation_id: str, seq: int, now: datetime) -> Item:
        """The `Item` this becomes once the store gave it `seq` at time `now`."""
        return Item(
            conversation_id=conversation_id,
            seq=seq,
            type=self.type,
            status=self.status,
            response_id=self.response_id,
            created_at=self.created_at or now,
            created_by=self.created_by,
            data=self.data,
        )


def prepare(new: NewItem) -> PreparedItem:
    """Check one `NewItem` and copy its data; raises `ValueError` saying what is wrong.

    The copy makes the stored item independent of the caller's map, and the JSON text is what
    the SQLite store writes, so both stores refuse exactly the same input.
    """
    if not isinstance(new, NewItem):
        raise ValueError(f"append takes NewItem values, not {type(new).__name__}")
    if not isinstance(new.data, Mapping):
        raise ValueError(f"item data must be a map, not {type(new.data).__name__}")
    created_at = new.created_at
    if created_at is not None:
        created_at = _check_time(created_at)
    data = check_data(new.data)
    return PreparedItem(
        type=_check_name("type", new.type),
        status=_check_optional_name("status", new.status),
        response_id=_check_optional_name("response_id", new.response_id),
        created_by=_check_name("created_by", new.created_by),
        created_at=created_at,
        data=data,
        data_json=json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False),
    )


def check_conversation_id(value: object) -> str:
    """Return `value` if it is a usable conversation id, else raise `ValueError`."""
    return _check_name("conversation_id", value)


def check_data(data: Mapping[str, Any]) -> dict[str, Any]:
    """A plain copy of `data` if every value survives JSON and msgpack, else `ValueError`.

    Allowed: None, bool, int within msgpack's 64-bit range, finite float, str (valid Unicode),
    lists (tuples become lists) and maps with string keys. Not allowed: bytes (use str), NaN,
    infinities, other objects.
    """
    copied = _copy_value(data, "data", 0)
    if not isinstance(copied, dict):
        raise ValueError(f"item data must be a map, not {type(data).__name__}")
    return copied


def _copy_value(value: object, path: str, depth: int) -> object:
    # Exact type checks: a str or int subclass (an enum) is stored as its plain value.
    if value is None or value is True or value is False:
        return value
    if isinstance(value, str):
        _check_text(value, path)
        return str.__str__(value)
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise ValueError(f"{path}: integer {value} is outside the 64-bit range")
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path}: {value} is not a finite number")
        return float(value)
    if depth >= MAX_DEPTH:
        raise ValueError(f"{path}: nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, Mapping):
        copied: dict[str, object] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{path}: key {key!r} is not a string")
            _check_text(key, path)
            copied[str.__str__(key)] = _copy_value(item, f"{path}.{key}", depth + 1)
        return copied
    if isinstance(value, list | tuple):
        return [_copy_value(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    if isinstance(value, bytes | bytearray | memoryview):
        raise ValueError(f"{path}: bytes are not allowed in item data; store text as str")
    raise ValueError(f"{path}: {type(value).__name__} is not JSON-safe")


def _check_text(value: str, path: str) -> None:
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{path}: string holds a lone surrogate (not valid Unicode)") from None


def _check_name(field: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{field} must be a non-empty string, not {value!r:.80}")
    if len(value) > MAX_ID_CHARS:
        raise ValueError(f"{field} is longer than {MAX_ID_CHARS} characters")
    _check_text(value, field)
    return str.__str__(value)


def _check_optional_name(field: str, value: object) -> str | None:
    return None if value is None else _check_name(field, value)


def _check_time(value: object) -> datetime:
    if not isinstance(value, datetime):
        raise ValueError(f"created_at must be a datetime, not {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("created_at must be timezone-aware (use datetime.now(UTC))")
    return value.astimezone(UTC)


def format_time(value: datetime) -> str:
    """ISO 8601 in UTC with microseconds and a `Z`: `2025-01-31T12:00:00.000000Z`."""
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def parse_time(text: str) -> datetime:
    """Parse an ISO 8601 time with an offset (or `Z`) into an aware UTC datetime."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"created_at {text!r:.60} is not an ISO 8601 time") from None
    if value.tzinfo is None:
        raise ValueError(f"created_at {text!r:.60} has no UTC offset")
    return value.astimezone(UTC)


def time_to_micros(value: datetime) -> int:
    """Microseconds since the Unix epoch: how the SQLite store keeps `created_at`."""
    return (value - _EPOCH) // _MICROSECOND


def micros_to_time(micros: int) -> datetime:
    """The inverse of `time_to_micros()`: an aware UTC datetime."""
    return _EPOCH + timedelta(microseconds=micros)
