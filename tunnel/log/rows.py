"""How a row of the SQLite log's `items` table becomes an `Item`, and what a row that cannot be
read becomes instead: a `CorruptItem` at the same seq that says what could not be read.

The store only ever writes rows that `prepare()` checked, so a row is corrupt when a column holds
something the store never writes: text that is not UTF-8, a value of the wrong type, an empty or
overlong name, a time out of range, or `data` that is not one JSON object the wire can carry
(NaN or an infinity, an integer outside 64 bits, a lone surrogate, nesting deeper than
`MAX_DEPTH`). Readers then get the placeholder instead of an error, so one bad row never hides
the rest of a conversation (docs/log.md, "Faults").
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final

from tunnel.log.item import (
    CORRUPT_TYPE,
    MAX_DEPTH,
    MAX_ID_CHARS,
    CorruptItem,
    Item,
    check_data,
    micros_to_time,
)

__all__ = ["COLUMNS", "NOT_UTF8", "decode_row", "decode_text", "describe", "fetch_rows"]

COLUMNS: Final = "conversation_id, seq, type, status, response_id, created_at, created_by, data"
"""The columns of a row, in the order `decode_row` reads them."""

_INT_MIN: Final = -(2**63)
_INT_MAX: Final = 2**64 - 1
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_UNKNOWN_AUTHOR: Final = "unknown"


class _NotUTF8:
    """What `decode_text` returns for a TEXT value that is not UTF-8 (a marker, never shown)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_UTF8"


NOT_UTF8: Final = _NotUTF8()


def decode_text(raw: bytes) -> str | _NotUTF8:
    """A connection's `text_factory` that reads a TEXT value that is not UTF-8 as `NOT_UTF8`
    instead of failing the whole query (BLOB values stay bytes)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return NOT_UTF8


def fetch_rows(conn: sqlite3.Connection, sql: str, params: Sequence[object]) -> list[Any]:
    """All rows of a query; a TEXT value that is not UTF-8 comes back as `NOT_UTF8`.

    The fast path uses sqlite3's own decoding; one undecodable value aborts it, and then the
    query runs again with `decode_text` (the connection is used by one thread at a time).
    """
    try:
        return conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError:
        # "Could not decode to UTF-8 column ...": read again, decoding value by value. Any other
        # operational error happens again below and reaches the caller.
        conn.text_factory = decode_text
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.text_factory = str


class _Unsafe(ValueError):
    """JSON that decodes but that the wire cannot carry; the message completes "column data"."""


def _parse_constant(name: str) -> float:
    raise _Unsafe(f"holds {name}, which JSON and msgpack readers refuse")


def _parse_int(text: str) -> int:
    value = int(text)
    if not _INT_MIN <= value <= _INT_MAX:
        raise _Unsafe("holds an integer outside the 64-bit range")
    return value


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Unsafe("holds a number too large for a float")
    return value


_DECODER: Final = json.JSONDecoder(
    parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant
)


def _decode_data(text: str) -> dict[str, Any] | str:
    """The `data` column as a map, or what is wrong with it (a phrase after "column data")."""
    try:
        # raw_decode: what json.loads does minus its whitespace scans (the store writes none).
        decoded, end = _DECODER.raw_decode(text)
    except _Unsafe as exc:
        return str(exc)
    except RecursionError:
        return f"nests deeper than {MAX_DEPTH} levels"
    except ValueError as exc:
        return f"is not JSON ({exc})"
    if end != len(text) or not isinstance(decoded, dict):
        return "is not one JSON object"
    # Cheap tests first: only data that could nest too deeply or hold an escaped lone surrogate
    # pays for the full check (valid data never has more brackets than MAX_DEPTH allows to nest,
    # and the store writes non-ASCII text unescaped).
    deep = len(text) > 2 * MAX_DEPTH and text.count("[") + text.count("{") > MAX_DEPTH
    if deep or "\\ud" in text or "\\uD" in text:
        try:
            check_data(decoded)
        except ValueError as exc:
            # "data.a[0]...: what": the path to the value, which is long when it nests deeply.
            path, _, what = str(exc).rpartition(": ")
            if what.startswith("nested deeper"):
                return f"nests deeper than {MAX_DEPTH} levels"
            return f"cannot go on the wire ({path[:80]}: {what})"
    return decoded


def describe(value: object) -> str:
    """What kind of value a column holds, for a message that must not repeat the value."""
    if value is NOT_UTF8:
        return "text that is not UTF-8"
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return "bytes"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a real number"
    return "text"


def decode_row(row: Sequence[Any]) -> Item | None:
    """The `Item` a row of `COLUMNS` holds, a `CorruptItem` if any column cannot be read, or None
    when the row has no place in a conversation (its conversation id is not text or its seq is
    not an integer: `tunnel log check` reports those)."""
    cid, seq, type_, status, response_id, created_at, created_by, data = row
    if type(seq) is not int or type(cid) is not str:
        return None
    # The fast path, for rows as the store writes them: every check inline (this runs for every
    # item read). No escape and few brackets mean no lone surrogate and no deep nesting; the
    # decoder's hooks refuse the numbers the wire cannot carry.
    if (
        type(type_) is str
        and 0 < len(type_) <= MAX_ID_CHARS
        and type(created_by) is str
        and 0 < len(created_by) <= MAX_ID_CHARS
        and (status is None or (type(status) is str and 0 < len(status) <= MAX_ID_CHARS))
        and (
            response_id is None
            or (type(response_id) is str and 0 < len(response_id) <= MAX_ID_CHARS)
        )
        and type(created_at) is int
        and type(data) is str
        and "\\u" not in data
        and (len(data) <= 2 * MAX_DEPTH or data.count("[") + data.count("{") <= MAX_DEPTH)
    ):
        try:
            decoded, end = _DECODER.raw_decode(data)
            when = micros_to_time(created_at)
        except (ValueError, RecursionError, OverflowError):
            pass
        else:
            if end == len(data) and type(decoded) is dict:
                return Item(
                    conversation_id=cid,
                    seq=seq,
                    type=type_,
                    status=status,
                    response_id=response_id,
                    created_at=when,
                    created_by=created_by,
                    data=decoded,
                )
    return _decode_slowly(cid, seq, row)


def _decode_slowly(cid: str, seq: int, row: Sequence[Any]) -> Item:
    """A row the fast path did not take: its item after the full checks (data with escapes, say),
    or its placeholder naming every column that cannot be read."""
    _, _, type_, status, response_id, created_at, created_by, data = row
    problems: dict[str, str] = {}
    for column, value, optional in (
        ("type", type_, False),
        ("status", status, True),
        ("response_id", response_id, True),
        ("created_by", created_by, False),
    ):
        if value is None and optional:
            continue
        if value is NOT_UTF8:
            problems[column] = f"column {column} is not valid UTF-8"
        elif type(value) is not str:
            problems[column] = f"column {column} holds {describe(value)}, not text"
        elif not value:
            problems[column] = f"column {column} is empty"
        elif len(value) > MAX_ID_CHARS:
            problems[column] = f"column {column} is longer than {MAX_ID_CHARS} characters"
    when = _EPOCH
    if type(created_at) is not int:
        problems["created_at"] = f"column created_at holds {describe(created_at)}, not an integer"
    else:
        try:
            when = micros_to_time(created_at)
        except OverflowError:
            problems["created_at"] = "column created_at is out of range for a time"
    decoded: dict[str, Any] | str = {}
    if data is NOT_UTF8:
        problems["data"] = "column data is not valid UTF-8"
    elif type(data) is not str:
        problems["data"] = f"column data holds {describe(data)}, not text"
    else:
        decoded = _decode_data(data)
        if isinstance(decoded, str):
            problems["data"] = f"column data {decoded}"
    if not problems:
        assert isinstance(decoded, dict)
        return Item(
            conversation_id=cid,
            seq=seq,
            type=type_,
            status=status,
            response_id=response_id,
            created_at=when,
            created_by=created_by,
            data=decoded,
        )
    placeholder: dict[str, Any] = {
        "reason": "; ".join(problems.values()),
        "columns": list(problems),
    }
    if "type" not in problems:
        placeholder["stored_type"] = type_
    return CorruptItem(
        conversation_id=cid,
        seq=seq,
        type=CORRUPT_TYPE,
        status=None,
        response_id=None,
        created_at=when,
        created_by=_UNKNOWN_AUTHOR if "created_by" in problems else created_by,
        data=placeholder,
    )
