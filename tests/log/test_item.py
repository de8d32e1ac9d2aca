"""Items, new items and events: checks on input and the wire round trip (JSON and msgpack)."""

from __future__ import annotations

import enum
import json
import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunnel.log import Event, Item, NewItem
from tunnel.log.item import format_time, micros_to_time, parse_time, prepare, time_to_micros

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
names = st.text(min_size=1, max_size=40)  # hypothesis never generates lone surrogates
times = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)


def make_item(**overrides: Any) -> Item:
    fields: dict[str, Any] = {
        "conversation_id": "conv",
        "seq": 3,
        "type": "message",
        "status": "completed",
        "response_id": "r1",
        "created_at": datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
        "created_by": "host",
        "data": {"role": "user", "text": "hello"},
    }
    fields.update(overrides)
    return Item(**fields)


def test_id_joins_conversation_and_seq() -> None:
    assert make_item(conversation_id="a:b", seq=7).id == "a:b:7"


def test_wire_form_is_documented_shape() -> None:
    wire = make_item().to_wire()
    assert wire == {
        "id": "conv:3",
        "conversation_id": "conv",
        "seq": 3,
        "type": "message",
        "status": "completed",
        "response_id": "r1",
        "created_at": "2025-01-02T03:04:05.678901Z",
        "created_by": "host",
        "data": {"role": "user", "text": "hello"},
    }


@settings(max_examples=200, deadline=None)
@given(
    data=st.dictionaries(st.text(max_size=10), json_values, max_size=6),
    type_=names,
    status=st.none() | names,
    response_id=st.none() | names,
    by=names,
    seq=st.integers(min_value=0, max_value=2**40),
    created_at=times,
)
def test_wire_round_trip_survives_json_and_msgpack(
    data: dict[str, Any],
    type_: str,
    status: str | None,
    response_id: str | None,
    by: str,
    seq: int,
    created_at: datetime,
) -> None:
    item = make_item(
        data=data,
        type=type_,
        status=status,
        response_id=response_id,
        created_by=by,
        seq=seq,
        created_at=created_at,
    )
    via_json = Item.from_wire(json.loads(json.dumps(item.to_wire())))
    via_msgpack = Item.from_wire(msgpack.unpackb(msgpack.packb(item.to_wire()), raw=False))
    assert via_json == item
    assert via_msgpack == item


def test_unknown_type_and_unknown_data_keys_round_trip_unchanged() -> None:
    item = make_item(type="future_thing", data={"brand_new": {"nested": [1, "x", None]}})
    assert Item.from_wire(json.loads(json.dumps(item.to_wire()))) == item


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"seq": -1}, "seq"),
        ({"seq": "3"}, "seq"),
        ({"seq": True}, "seq"),
        ({"type": ""}, "type"),
        ({"type": 5}, "type"),
        ({"created_by": None}, "created_by"),
        ({"status": 1}, "status"),
        ({"created_at": "yesterday"}, "created_at"),
        ({"created_at": "2025-01-02T03:04:05"}, "UTC offset"),
        ({"data": [1, 2]}, "data must be a map"),
        ({"data": {"b": float("nan")}}, "finite"),
        ({"conversation_id": ""}, "conversation_id"),
        ({"id": "other:3"}, "does not match"),
        ({"extra": 1}, "unknown item field"),
    ],
)
def test_from_wire_names_the_bad_field(change: dict[str, Any], complaint: str) -> None:
    wire = make_item().to_wire()
    wire.update(change)
    with pytest.raises(ValueError, match=complaint):
        Item.from_wire(wire)


def test_from_wire_names_missing_fields() -> None:
    wire = make_item().to_wire()
    del wire["created_by"], wire["data"]
    with pytest.raises(ValueError, match="missing: created_by, data"):
        Item.from_wire(wire)


def test_from_wire_refuses_a_non_map() -> None:
    with pytest.raises(ValueError, match="must be a map"):
        Item.from_wire(["not", "a", "map"])  # type: ignore[arg-type]


def test_id_is_optional_on_the_wire() -> None:
    wire = make_item().to_wire()
    del wire["id"]
    assert Item.from_wire(wire) == make_item()


class Colour(enum.StrEnum):
    RED = "red"


class Kind(enum.StrEnum):
    """A caller's own vocabulary of item types: stored as the plain strings."""

    MESSAGE = "message"


@pytest.mark.parametrize(
    ("data", "complaint"),
    [
        ({"b": b"bytes"}, "bytes are not allowed"),
        ({"b": bytearray(b"x")}, "bytes are not allowed"),
        ({"f": math.inf}, "finite"),
        ({"f": math.nan}, "finite"),
        ({1: "int key"}, "not a string"),
        ({"big": 2**64}, "64-bit"),
        ({"small": -(2**63) - 1}, "64-bit"),
        ({"s": "\ud800"}, "surrogate"),
        ({"o": object()}, "not JSON-safe"),
        ({"set": {1}}, "not JSON-safe"),
    ],
)
def test_append_refuses_data_that_would_not_survive_the_wire(
    data: dict[Any, Any], complaint: str
) -> None:
    with pytest.raises(ValueError, match=complaint):
        prepare(NewItem(type="message", data=data, created_by="host"))


def test_deep_nesting_is_refused_not_a_crash() -> None:
    deep: Any = "leaf"
    for _ in range(200):
        deep = [deep]
    with pytest.raises(ValueError, match="nested deeper"):
        prepare(NewItem(type="x", data={"d": deep}, created_by="host"))


def test_prepare_copies_data_into_plain_json_shapes() -> None:
    data: dict[str, Any] = {"t": (1, 2), "c": Colour.RED, "n": {"k": [True]}}
    p = prepare(NewItem(type=Kind.MESSAGE, data=data, created_by="host"))
    data["n"]["k"].append(False)  # the caller's map changes later: the prepared copy does not
    assert p.data == {"t": [1, 2], "c": "red", "n": {"k": [True]}}
    assert type(p.data["c"]) is str
    assert type(p.type) is str
    assert p.type == "message"
    assert json.loads(p.data_json) == p.data


def test_naive_created_at_is_refused_and_aware_is_converted_to_utc() -> None:
    naive = datetime(2025, 1, 1, 12, 0)
    with pytest.raises(ValueError, match="timezone-aware"):
        prepare(NewItem(type="m", data={}, created_by="h", created_at=naive))
    paris = datetime(2025, 1, 1, 12, 0, tzinfo=timezone(timedelta(hours=1)))
    p = prepare(NewItem(type="m", data={}, created_by="h", created_at=paris))
    assert p.created_at == datetime(2025, 1, 1, 11, 0, tzinfo=UTC)
    assert p.created_at is not None
    assert p.created_at.tzinfo is UTC


@pytest.mark.parametrize("field", ["type", "created_by", "status", "response_id"])
def test_overlong_names_are_refused(field: str) -> None:
    fields: dict[str, Any] = {"type": "m", "data": {}, "created_by": "h", field: "x" * 257}
    with pytest.raises(ValueError, match=field):
        prepare(NewItem(**fields))


def test_time_helpers_are_exact_inverses() -> None:
    t = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    assert micros_to_time(time_to_micros(t)) == t
    assert parse_time(format_time(t)) == t
    assert parse_time("2031-05-06T09:08:09.123456+02:00") == t


def test_event_wire_round_trip_and_checks() -> None:
    event = Event(conversation_id="c", kind="delta", data={"text": "he"})
    wire = event.to_wire()
    assert wire == {"conversation_id": "c", "kind": "delta", "data": {"text": "he"}}
    assert Event.from_wire(msgpack.unpackb(msgpack.packb(wire))) == event
    with pytest.raises(ValueError, match="exactly the fields"):
        Event.from_wire({**wire, "seq": 1})
    with pytest.raises(ValueError, match="kind"):
        Event.from_wire({**wire, "kind": ""})
