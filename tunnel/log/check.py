"""What `tunnel log check` finds in a log database, by reading every row: items that cannot be
read, seqs missing or without a place, heads that disagree with the items, and what SQLite's own
`PRAGMA quick_check` says about the file. It only reads; nothing is repaired.

Messages name the conversation, the seq and the column, never the unreadable bytes.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any, Final

from tunnel.log.item import CorruptItem
from tunnel.log.rows import COLUMNS, decode_row, decode_text, describe

__all__ = ["MAX_PROBLEMS", "CheckReport", "Problem", "check_rows"]

MAX_PROBLEMS: Final = 1000
"""Problems a report lists; it counts every one."""

_ROWS: Final = f"SELECT {COLUMNS} FROM items WHERE conversation_id = ? ORDER BY seq"  # noqa: S608
_HEAD: Final = "SELECT last_seq, updated_at FROM conversations WHERE conversation_id = ?"
_IDS: Final = "SELECT conversation_id FROM conversations UNION SELECT conversation_id FROM items"


@dataclass(frozen=True, slots=True, kw_only=True)
class Problem:
    """One thing wrong in the database."""

    conversation_id: str | None
    """The conversation, or None for the database as a whole."""
    seq: int | None
    """The item's seq when the problem is one item's."""
    message: str
    """What is wrong: "column data is not JSON (...)", "items 3 to 5 are missing", ..."""

    def __str__(self) -> str:
        if self.conversation_id is None:
            return f"database: {self.message}"
        if self.seq is None:
            return f"{self.conversation_id}: {self.message}"
        return f"{self.conversation_id}:{self.seq}: {self.message}"


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckReport:
    """What a check read and found."""

    conversations: int
    """Conversations checked."""
    items: int
    """Item rows read (readable or not)."""
    problems: tuple[Problem, ...]
    """The problems found, in the order found (at most `MAX_PROBLEMS`)."""
    problem_count: int
    """Every problem found, listed or not."""

    @property
    def clean(self) -> bool:
        """True when nothing is wrong."""
        return self.problem_count == 0


class _Found:
    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.count = 0

    def add(self, conversation_id: str | None, seq: int | None, message: str) -> None:
        self.count += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(Problem(conversation_id=conversation_id, seq=seq, message=message))


def check_rows(
    conn: sqlite3.Connection, *, conversation_id: str | None = None, quick_check: bool = True
) -> CheckReport:
    """Worker thread: check one conversation (or all) on a read connection.

    A database too damaged to read to the end is a problem too ("reading stopped: ..."), so the
    report always comes back; only a connection that cannot read at all raises.
    """
    found = _Found()
    conversations = items = 0
    # Text that is not UTF-8 must not stop the scan: read it as a marker, row by row.
    conn.text_factory = decode_text
    try:
        if quick_check:
            for (line,) in conn.execute("PRAGMA quick_check"):
                if line != "ok":
                    found.add(None, None, f"SQLite quick_check: {line}")
        ids = [conversation_id] if conversation_id else _conversation_ids(conn, found)
        for cid in ids:
            conversations += 1
            items += _check_conversation(conn, cid, found)
    except sqlite3.DatabaseError as exc:
        found.add(None, None, f"reading stopped: {exc}")
    finally:
        conn.text_factory = str
    return CheckReport(
        conversations=conversations,
        items=items,
        problems=tuple(found.problems),
        problem_count=found.count,
    )


def _conversation_ids(conn: sqlite3.Connection, found: _Found) -> list[str]:
    ids: list[str] = []
    for (cid,) in conn.execute(_IDS):
        if type(cid) is str:
            ids.append(cid)
        else:
            found.add(None, None, f"a conversation id holds {describe(cid)}, not text")
    return ids


def _check_conversation(conn: sqlite3.Connection, cid: str, found: _Found) -> int:
    """Check one conversation's rows in seq order, then its head; returns the rows read."""
    expected = 0  # the next seq, if nothing is missing
    rows = 0
    for row in conn.execute(_ROWS, (cid,)):
        rows += 1
        seq: Any = row[1]
        if type(seq) is not int:
            found.add(cid, None, f"a row's seq holds {describe(seq)}, not an integer")
            continue
        if seq < 0:
            found.add(cid, None, f"a row has the negative seq {seq}")
            continue
        if seq > expected:
            found.add(cid, None, _missing(expected, seq - 1))
        expected = seq + 1
        item = decode_row(row)
        if isinstance(item, CorruptItem):
            found.add(cid, seq, str(item.data["reason"]))
    newest = expected - 1
    head_rows = conn.execute(_HEAD, (cid,)).fetchall()
    if not head_rows:
        if rows:
            found.add(cid, None, "has items but no head in the conversations table (not listed)")
        return rows
    last_seq, updated_at = head_rows[0]
    if type(updated_at) is not int:
        found.add(cid, None, f"its head's updated_at holds {describe(updated_at)}, not an integer")
    if type(last_seq) is not int:
        found.add(cid, None, f"its head's last_seq holds {describe(last_seq)}, not an integer")
    elif last_seq > newest:
        found.add(cid, None, _missing(newest + 1, last_seq))
    elif last_seq < newest:
        found.add(
            cid,
            None,
            f"its head says seq {last_seq} is the newest, but items go up to {newest} "
            f"(appending would collide)",
        )
    return rows


def _missing(first: int, last: int) -> str:
    if first == last:
        return f"item {first} is missing"
    return f"items {first} to {last} are missing"
