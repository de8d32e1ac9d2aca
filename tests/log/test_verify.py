"""`tunnel log verify` through real processes: an export verifies; a flipped byte, a reordered
item, a missing signature and a truncated file are each reported; a log written before the
chain existed verifies as unsigned; mistakes on the command line are one line, exit 2."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

from tunnel.e2e.identity import HostIdentity
from tunnel.host.audit import sign_head
from tunnel.log import SQLiteStore
from tunnel.log.chain import Chain
from tunnel.log.verify import verify_lines
from tunnel.process.exit_codes import EXIT_CONFIG, EXIT_CORRUPT

from .helpers import news, tunnel

IDENTITY = HostIdentity.from_seed(bytes(range(32)))
OTHER = HostIdentity.from_seed(bytes(32))


def make_signed_log(path: Path, *, count: int = 10, signed_at: tuple[int, ...] = (4, 9)) -> None:
    """`count` items in conversation `main`, the host's signature after each seq in `signed_at`."""

    async def fill() -> None:
        store = await SQLiteStore.open(path)
        try:
            items = await store.append("main", news(count))
            chain = Chain("main")
            for item in items:
                head = chain.add(item)
                if item.seq in signed_at:
                    signed = sign_head(IDENTITY, "main", item.seq, head, now=datetime.now(UTC))
                    await store.add_signatures([signed])
        finally:
            await store.aclose()

    anyio.run(fill)


def export(tmp_path: Path, db: Path) -> Path:
    result = tunnel("log", "export", "main", "--db", str(db))
    assert result.returncode == 0, result.stderr
    out = tmp_path / "main.ndjson"
    out.write_text(result.stdout)
    return out


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


@pytest.fixture
def exported(tmp_path: Path) -> Path:
    db = tmp_path / "log.db"
    make_signed_log(db)
    return export(tmp_path, db)


def test_an_export_carries_the_chain_and_the_signatures_and_verifies(exported: Path) -> None:
    records = [json.loads(line) for line in lines(exported)]
    kinds = [r.get("kind", r.get("seq")) for r in records]
    assert kinds == [0, 1, 2, 3, 4, "head_signature", 5, 6, 7, 8, 9, "head_signature"]
    assert records[0]["prev"] is None
    assert records[1]["prev"] == records[0]["hash"]
    result = tunnel("log", "verify", str(exported), "--host-id", IDENTITY.host_id)
    assert result.returncode == 0, result.stderr
    assert f"main: items 0..9, chain intact; signed by host {IDENTITY.host_id} up to seq 9" in (
        result.stdout
    )
    assert tunnel("log", "verify", str(exported), "--all-signed").returncode == 0


def test_a_flipped_byte_in_one_item_names_that_item(exported: Path) -> None:
    text = lines(exported)
    assert '"n":3' in text[3]
    text[3] = text[3].replace('"n":3', '"n":7')
    exported.write_text("".join(text))
    result = tunnel("log", "verify", str(exported))
    assert result.returncode == EXIT_CORRUPT
    first = result.stdout.splitlines()[0]
    assert first == (
        "line 4: item main:3: its content does not match its hash (the item was changed)"
    )
    assert "chain holds up to seq 2" in result.stdout


def test_an_item_changed_with_its_hash_fails_the_signature_over_it(exported: Path) -> None:
    """One who rewrites an item and its hash breaks the next item's prev."""
    text = lines(exported)
    record = json.loads(text[3])
    record["data"]["n"] = 7
    from tunnel.log.chain import item_hash
    from tunnel.log.item import Item

    wire = {k: v for k, v in record.items() if k not in ("prev", "hash")}
    record["hash"] = item_hash(Item.from_wire(wire), bytes.fromhex(record["prev"])).hex()
    text[3] = json.dumps(record, separators=(",", ":")) + "\n"
    exported.write_text("".join(text))
    result = tunnel("log", "verify", str(exported))
    assert result.returncode == EXIT_CORRUPT
    assert result.stdout.splitlines()[0].startswith(
        "line 5: item main:4: its prev is not the hash of item main:3"
    )


def test_a_reordered_item_is_reported(exported: Path) -> None:
    text = lines(exported)
    text[2], text[3] = text[3], text[2]
    exported.write_text("".join(text))
    result = tunnel("log", "verify", str(exported))
    assert result.returncode == EXIT_CORRUPT
    assert result.stdout.splitlines()[0] == (
        "line 3: item main:3 leaves a gap: seq 2 must come next (an item was moved or removed)"
    )


def test_a_missing_signature_leaves_the_items_after_the_last_one_unsigned(exported: Path) -> None:
    text = lines(exported)
    assert '"head_signature"' in text[-1]
    exported.write_text("".join(text[:-1]))
    result = tunnel("log", "verify", str(exported))
    assert result.returncode == 0
    assert "signed by host" in result.stdout
    assert "up to seq 4; unsigned after it (seq 5..9)" in result.stdout
    strict = tunnel("log", "verify", str(exported), "--all-signed")
    assert strict.returncode == EXIT_CORRUPT
    assert "not every item is signed" in strict.stderr


def test_a_signature_by_another_host_or_forged_is_reported(exported: Path) -> None:
    result = tunnel("log", "verify", str(exported), "--host-id", OTHER.host_id)
    assert result.returncode == EXIT_CORRUPT
    assert f"line 6: the signature of main:4 is by host {IDENTITY.host_id}, not" in result.stdout
    text = lines(exported)
    record = json.loads(text[5])
    record["seq"] = 3
    text[5] = json.dumps(record) + "\n"
    exported.write_text("".join(text))
    forged = tunnel("log", "verify", str(exported))
    assert forged.returncode == EXIT_CORRUPT
    assert "line 6: the signature of main:3 is not valid" in forged.stdout


@pytest.mark.parametrize("cut", ["mid-line", "after-signed-item"])
def test_a_truncated_export_is_reported(exported: Path, cut: str) -> None:
    data = exported.read_bytes()
    text = lines(exported)
    if cut == "mid-line":
        exported.write_bytes(data[: len(data) - len(text[-1]) - 20])
        result = tunnel("log", "verify", str(exported))
        assert result.returncode == EXIT_CORRUPT
        assert "line 11: the item after main:8 cannot be read" in result.stdout
    else:
        # Cut after item 9, before its signature: the signature that would cover it is gone.
        exported.write_text("".join(text[:-1]))
        result = tunnel("log", "verify", str(exported))
        assert "unsigned after it (seq 5..9)" in result.stdout


def test_a_signature_past_the_end_says_the_file_is_truncated(exported: Path) -> None:
    text = lines(exported)
    # Items 8 and 9 gone, the last signature kept: it covers items the file does not hold.
    exported.write_text("".join(text[:9] + text[11:]))
    result = tunnel("log", "verify", str(exported))
    assert result.returncode == EXIT_CORRUPT
    assert "covers items the file does not hold (it ends at seq 7: truncated)" in result.stdout


def make_old_log(path: Path, count: int) -> None:
    """A log as version 1 wrote it: its tables, user_version 1, no signatures table."""
    with closing(sqlite3.connect(path)) as raw:
        raw.executescript(
            """
            CREATE TABLE items (
                conversation_id TEXT NOT NULL, seq INTEGER NOT NULL CHECK (seq >= 0),
                type TEXT NOT NULL, status TEXT, response_id TEXT,
                created_at INTEGER NOT NULL, created_by TEXT NOT NULL, data TEXT NOT NULL,
                PRIMARY KEY (conversation_id, seq));
            CREATE INDEX items_by_type ON items (conversation_id, type, seq);
            CREATE TABLE conversations (conversation_id TEXT PRIMARY KEY,
                last_seq INTEGER NOT NULL, updated_at INTEGER NOT NULL) WITHOUT ROWID;
            CREATE INDEX conversations_by_time ON conversations (updated_at);
            PRAGMA application_id = 1635019879;
            PRAGMA user_version = 1;
            """
        )
        raw.executemany(
            "INSERT INTO items VALUES ('main', ?, 'message', NULL, NULL, ?, 'host', ?)",
            [(n, 1_700_000_000_000_000 + n, json.dumps({"n": n})) for n in range(count)],
        )
        raw.execute("INSERT INTO conversations VALUES ('main', ?, 1)", (count - 1,))
        raw.commit()


def test_a_log_written_before_the_chain_verifies_as_unsigned(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    make_old_log(db, 6)
    exported = export(tmp_path, db)
    result = tunnel("log", "verify", str(exported))
    assert result.returncode == 0, result.stderr
    assert "main: items 0..5, chain intact; unsigned up to seq 5" in result.stdout
    # An export made before the chain existed (no prev, no hash) reads the same.
    bare = tmp_path / "bare.ndjson"
    bare.write_text(
        "".join(
            json.dumps({k: v for k, v in json.loads(line).items() if k not in ("prev", "hash")})
            + "\n"
            for line in lines(exported)
        )
    )
    again = tunnel("log", "verify", str(bare))
    assert again.returncode == 0
    assert "unsigned up to seq 5" in again.stdout


def test_an_old_log_migrates_and_a_signature_then_covers_it(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    make_old_log(db, 3)

    async def sign() -> None:
        store = await SQLiteStore.open(db)
        try:
            chain = Chain("main")
            for item in await store.query("main", limit=10):
                head = chain.add(item)
            now = datetime.now(UTC)
            await store.add_signatures([sign_head(IDENTITY, "main", 2, head, now=now)])
        finally:
            await store.aclose()

    anyio.run(sign)
    with closing(sqlite3.connect(db)) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == 2
    result = tunnel("log", "verify", str(export(tmp_path, db)))
    assert result.returncode == 0
    assert f"signed by host {IDENTITY.host_id} up to seq 2" in result.stdout


def test_import_keeps_the_signatures(tmp_path: Path, exported: Path) -> None:
    target = tmp_path / "copy.db"
    imported = tunnel("log", "import", str(exported), "--db", str(target))
    assert imported.returncode == 0, imported.stderr
    again = tmp_path / "again"
    again.mkdir()
    assert export(again, target).read_text() == exported.read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.ndjson"], "tunnel log: cannot read missing.ndjson: No such file or directory"),
        (["x", "--host-id", "nope"], "tunnel log: --host-id 'nope' is not a host id"),
    ],
)
def test_a_mistake_on_the_command_line_is_one_line_and_exit_2(
    args: list[str], message: str
) -> None:
    result = tunnel("log", "verify", *args)
    assert result.returncode == EXIT_CONFIG
    assert result.stderr.startswith(message)
    assert len(result.stderr.splitlines()) == 1


def test_verify_never_raises_on_garbage() -> None:
    report = verify_lines([b"\xff\n", b"[]\n", b'{"kind":"head_signature"}\n', b"{}\n"])
    assert not report.ok
    assert report.problem_count == 5  # and: the file holds no item
