"""A corrupt row never hides the rest of its conversation: it is read as a `CorruptItem` at its
seq, by query and by subscription, and `SQLiteStore.check()` names it. Rows are damaged the way
they would be in the wild: plain sqlite3 writing garbage into a column, or cutting a value short.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import anyio
import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tunnel.log import Item, Log, SQLiteStore
from tunnel.log.item import CORRUPT_TYPE, MAX_DEPTH, CorruptItem

from .helpers import new, news

pytestmark = pytest.mark.anyio

SECRET = "s3cr3t-payload"
"""Put into every garbage value: it must never come back in a placeholder or a report."""


@pytest.fixture
async def db(tmp_path: Path) -> Path:
    """A log with conversation `c` holding seqs 0..9, closed again."""
    path = tmp_path / "log.db"
    store = await SQLiteStore.open(path)
    try:
        await store.append("c", news(10))
    finally:
        await store.aclose()
    return path


def damage(path: Path, sql: str, *params: object) -> None:
    """Run one statement on the file with plain sqlite3, as another program would."""
    with sqlite3.connect(path) as raw:
        changed = raw.execute(sql, params).rowcount
    assert changed == 1, sql


NOT_UTF8 = b'{"text": "\xff' + SECRET.encode() + b'"}'

# (what is done to seq 3, the column named, a phrase of the reason)
DAMAGE = {
    "broken-json": (
        f"UPDATE items SET data = '{{\"{SECRET}\": ' WHERE seq = 3",
        "data",
        "is not JSON",
    ),
    "truncated": (
        "UPDATE items SET data = substr(data, 1, length(data) - 2) WHERE seq = 3",
        "data",
        "is not JSON",
    ),
    "not-utf8": (
        f"UPDATE items SET data = CAST(X'{NOT_UTF8.hex()}' AS TEXT) WHERE seq = 3",
        "data",
        "not valid UTF-8",
    ),
    "blob": (f"UPDATE items SET data = CAST('{SECRET}' AS BLOB) WHERE seq = 3", "data", "bytes"),
    "array": (f"UPDATE items SET data = '[\"{SECRET}\"]' WHERE seq = 3", "data", "one JSON object"),
    "nan": (f"UPDATE items SET data = '{{\"{SECRET}\": NaN}}' WHERE seq = 3", "data", "NaN"),
    "huge-int": (
        "UPDATE items SET data = '{\"n\": 123456789012345678901234567890}' WHERE seq = 3",
        "data",
        "64-bit",
    ),
    "huge-float": ("UPDATE items SET data = '{\"n\": 1e999}' WHERE seq = 3", "data", "too large"),
    "lone-surrogate": (
        'UPDATE items SET data = \'{"text": "\\ud800"}\' WHERE seq = 3',
        "data",
        "lone surrogate",
    ),
    "nested-100": (
        "UPDATE items SET data = '{\"a\":' || replace(hex(zeroblob(100)), '00', '[') "
        "|| replace(hex(zeroblob(100)), '00', ']') || '}' WHERE seq = 3",
        "data",
        "deeper than 64",
    ),
    "nested-5000": (
        "UPDATE items SET data = '{\"a\":' || replace(hex(zeroblob(5000)), '00', '[') "
        "|| replace(hex(zeroblob(5000)), '00', ']') || '}' WHERE seq = 3",
        "data",
        "deeper than 64",
    ),
    "time-as-text": (
        f"UPDATE items SET created_at = '{SECRET}' WHERE seq = 3",
        "created_at",
        "not an integer",
    ),
    "time-out-of-range": (
        "UPDATE items SET created_at = 9223372036854775807 WHERE seq = 3",
        "created_at",
        "out of range",
    ),
    "empty-type": ("UPDATE items SET type = '' WHERE seq = 3", "type", "empty"),
    "author-blob": (
        f"UPDATE items SET created_by = CAST('{SECRET}' AS BLOB) WHERE seq = 3",
        "created_by",
        "bytes",
    ),
    "status-blob": ("UPDATE items SET status = X'00' WHERE seq = 3", "status", "bytes"),
}


@pytest.mark.parametrize("kind", list(DAMAGE))
async def test_a_corrupt_row_is_a_placeholder_at_its_seq_and_the_rest_reads(
    db: Path, kind: str
) -> None:
    sql, column, phrase = DAMAGE[kind]
    damage(db, sql)
    store = await SQLiteStore.open(db, readonly=True)
    try:
        items = await store.query("c", limit=100)
        assert [i.seq for i in items] == list(range(10))
        bad = items[3]
        assert isinstance(bad, CorruptItem)
        assert bad.type == CORRUPT_TYPE
        assert bad.id == "c:3"
        assert bad.data["columns"] == [column]
        assert phrase in bad.data["reason"]
        assert not any(isinstance(i, CorruptItem) for i in items[:3] + items[4:])
        assert [i.data["n"] for i in items[:3] + items[4:]] == [0, 1, 2, 4, 5, 6, 7, 8, 9]
        # What it says is safe to send anywhere, and never the garbage itself.
        wire = bad.to_wire()
        assert SECRET not in json.dumps(wire)
        assert Item.from_wire(json.loads(json.dumps(wire))) == Item.from_wire(wire)
        msgpack.packb(wire)
        newest_first = await store.query("c", order="desc", limit=100)
        assert [i.seq for i in newest_first] == list(range(9, -1, -1))
        assert newest_first[6] == bad
        report = await store.check()
        assert [(p.conversation_id, p.seq) for p in report.problems] == [("c", 3)]
        assert report.problems[0].message == bad.data["reason"]
        assert SECRET not in str(report.problems[0])
    finally:
        await store.aclose()


async def test_intact_items_with_escapes_or_brackets_read_back_unchanged(tmp_path: Path) -> None:
    # The JSON of these holds \\u escapes (control characters) or many brackets: the reader's
    # fast path leaves them to the full check, which must find nothing wrong.
    store = await SQLiteStore.open(tmp_path / "log.db")
    try:
        stored = await store.append(
            "c",
            [
                new(text="\x1b[31mred\x1b[0m \x00 \U0001f600 ✓"),
                new(text="[" * 500 + "{" * 500),
                new(grid=[[[i] for i in range(30)] for _ in range(5)]),
                new(deep=nested(MAX_DEPTH - 1)),
            ],
        )
        assert await store.query("c") == stored
        assert not any(isinstance(i, CorruptItem) for i in stored)
    finally:
        await store.aclose()


def nested(containers: int) -> object:
    value: object = []
    for _ in range(containers - 1):
        value = [value]
    return value


async def test_the_placeholder_keeps_what_was_readable(db: Path) -> None:
    damage(db, "UPDATE items SET data = '{' WHERE seq = 2")
    damage(db, "UPDATE items SET created_by = '', type = X'00' WHERE seq = 5")
    store = await SQLiteStore.open(db)
    try:
        items = await store.query("c", limit=100)
        intact, two, five = items[0], items[2], items[5]
        assert isinstance(two, CorruptItem)
        assert isinstance(five, CorruptItem)
        assert two.created_at == intact.created_at
        assert two.created_by == "host"
        assert two.data["stored_type"] == "message"
        assert five.created_by == "unknown"
        assert "stored_type" not in five.data
        assert five.data["columns"] == ["type", "created_by"]
    finally:
        await store.aclose()


async def test_a_subscriber_receives_the_placeholder_and_the_live_tail(db: Path) -> None:
    damage(db, "UPDATE items SET data = 'garbage' WHERE seq = 4")
    async with Log(await SQLiteStore.open(db), page_size=3) as log:
        async with log.subscribe("c") as sub:
            (appended,) = await log.append("c", new(text="after"))
            got: list[Item] = []
            with anyio.fail_after(5):
                while len(got) < 11:
                    entry = await sub.receive()
                    assert isinstance(entry, Item)
                    got.append(entry)
        assert [i.seq for i in got] == list(range(11))
        assert isinstance(got[4], CorruptItem)
        assert got[10] == appended


async def test_appending_goes_on_after_corrupt_rows(db: Path) -> None:
    damage(db, "UPDATE items SET data = 'garbage' WHERE seq = 9")
    store = await SQLiteStore.open(db)
    try:
        (item,) = await store.append("c", [new()])
        assert item.seq == 10
    finally:
        await store.aclose()


async def test_a_row_without_an_integer_seq_is_left_out_and_reported(db: Path) -> None:
    with sqlite3.connect(db) as raw:
        raw.execute("PRAGMA ignore_check_constraints = ON")
        raw.execute("UPDATE items SET seq = 'x' WHERE seq = 9")
    store = await SQLiteStore.open(db, readonly=True)
    try:
        assert [i.seq for i in await store.query("c", limit=100)] == list(range(9))
        assert [i.seq for i in await store.query("c", order="desc", limit=2)] == [8, 7]
        messages = [str(p) for p in (await store.check()).problems]
        assert "c: a row's seq holds text, not an integer" in messages
        assert "c: item 9 is missing" in messages
    finally:
        await store.aclose()


async def test_check_reports_missing_items_and_heads_that_disagree(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    store = await SQLiteStore.open(path)
    try:
        for cid in ("gap", "short-head", "long-head", "no-head", "clean"):
            await store.append(cid, news(6))
        assert (await store.check()).clean
    finally:
        await store.aclose()
    with sqlite3.connect(path) as raw:
        raw.execute("DELETE FROM items WHERE conversation_id = 'gap' AND seq IN (2, 3)")
        raw.execute("UPDATE conversations SET last_seq = 3 WHERE conversation_id = 'short-head'")
        raw.execute("UPDATE conversations SET last_seq = 9 WHERE conversation_id = 'long-head'")
        raw.execute("DELETE FROM conversations WHERE conversation_id = 'no-head'")
    store = await SQLiteStore.open(path, readonly=True)
    try:
        report = await store.check()
        assert report.conversations == 5
        assert report.items == 28
        assert sorted(str(p) for p in report.problems) == [
            "gap: items 2 to 3 are missing",
            "long-head: items 6 to 9 are missing",
            "no-head: has items but no head in the conversations table (not listed)",
            "short-head: its head says seq 3 is the newest, but items go up to 5 "
            "(appending would collide)",
        ]
        only = await store.check("gap")
        assert only.conversations == 1
        assert only.problem_count == 1
    finally:
        await store.aclose()


async def test_an_unreadable_head_is_recomputed_from_the_items(db: Path) -> None:
    damage(db, "UPDATE conversations SET last_seq = 'x', updated_at = X'00'")
    store = await SQLiteStore.open(db)
    try:
        (info,) = await store.list_conversations()
        assert (info.last_seq, info.item_count, info.updated_at) == (9, 10, None)
        (item,) = await store.append("c", [new()])
        assert item.seq == 10  # and the head row is whole again
        info_after = await store.get_conversation("c")
        assert info_after is not None
        assert info_after.updated_at == item.created_at
    finally:
        await store.aclose()


async def test_a_damaged_file_is_a_problem_in_the_report_not_an_exception(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.db"
    store = await SQLiteStore.open(path)
    try:
        await store.append("c", [new(text="x" * 500) for _ in range(200)])
    finally:
        await store.aclose()
    # Garbage over the middle of the file: b-tree pages SQLite itself must notice.
    data = bytearray(path.read_bytes())
    page = 4096
    middle = len(data) // page // 2 * page
    data[middle : middle + page] = b"\xa5" * page
    path.write_bytes(bytes(data))
    store = await SQLiteStore.open(path, readonly=True)
    try:
        report = await store.check()
    finally:
        await store.aclose()
    assert not report.clean
    assert str(report.problems[0]).startswith("database: "), report.problems


# -- every value a damaged data column can hold reads as a valid item or a placeholder --------

_json_atoms = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    # Surrogates, alone or (by chance) paired: JSON can escape them, UTF-8 cannot hold them.
    st.text(
        alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, exclude_categories=()),
        min_size=1,
        max_size=2,
    ),
)
_json_values = st.recursive(
    _json_atoms,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=20,
)


_garbage = st.one_of(
    # Raw text (a lone surrogate is then stored as bytes that are not UTF-8) ...
    _json_values.map(lambda v: json.dumps(v, ensure_ascii=False)),
    # ... or every non-ASCII character escaped, lone surrogates as \udXXX.
    _json_values.map(lambda v: json.dumps({"v": v})),
    st.integers(1, 3 * MAX_DEPTH).map(lambda n: '{"a":' + "[" * n + "]" * n + "}"),
    st.text(max_size=40),
    st.binary(max_size=40),
)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(value=_garbage)
def test_any_data_value_reads_as_a_wire_safe_item_or_a_placeholder(
    tmp_path: Path, value: str | bytes
) -> None:
    path = tmp_path / "prop.db"
    if not path.exists():
        SQLiteStore(path).close()
        with sqlite3.connect(path) as raw:
            raw.execute("INSERT INTO items VALUES ('c', 0, 'message', NULL, NULL, 0, 'host', '{}')")
    with sqlite3.connect(path) as raw:
        if isinstance(value, str):
            # Through bytes: a lone surrogate cannot be bound as text, but a bad writer can
            # store its UTF-8-style encoding.
            raw.execute(
                "UPDATE items SET data = CAST(? AS TEXT)",
                (value.encode("utf-8", "surrogatepass"),),
            )
        else:
            raw.execute("UPDATE items SET data = ?", (value,))

    async def read() -> Item:
        store = await SQLiteStore.open(path, readonly=True)
        try:
            (item,) = await store.query("c")
            return item
        finally:
            await store.aclose()

    item = anyio.run(read)
    wire = item.to_wire()
    # Whatever it is, every surface can carry it: JSON, msgpack, and the teammate's parser.
    assert Item.from_wire(msgpack.unpackb(msgpack.packb(wire), raw=False)).data == item.data
    assert Item.from_wire(json.loads(json.dumps(wire, allow_nan=False))).data == item.data
    if not isinstance(item, CorruptItem):
        assert isinstance(value, str)
        assert json.loads(value) == item.data
