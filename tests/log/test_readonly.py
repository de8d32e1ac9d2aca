"""Read-only opening: `tunnel log list/show/export/check` (and `SQLiteStore(readonly=True)`) never
create a file, switch a journal mode or write a schema, refuse what is not a log with an error
that names what is wrong, and can inspect an archived log in a read-only directory."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import anyio
import pytest

from tunnel.log import SchemaError, SQLiteStore, StoreError
from tunnel.log.sqlite import SCHEMA_VERSION
from tunnel.process.exit_codes import EXIT_CONFIG

from .helpers import ROOT, new, news, tunnel

pytestmark = pytest.mark.anyio

READ_COMMANDS = [("list",), ("show", "c"), ("export", "c"), ("check",)]


def fingerprint(directory: Path) -> dict[str, str]:
    """Every file in `directory` with a hash of its bytes."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir()}


def make_log(path: Path, count: int = 5) -> None:
    async def fill() -> None:
        store = await SQLiteStore.open(path)
        try:
            await store.append("c", news(count))
        finally:
            await store.aclose()

    anyio.run(fill)


def run_sql(path: Path, *statements: str) -> list[object]:
    """Run statements with plain sqlite3 and close the connection (so no -wal file is left)."""
    with closing(sqlite3.connect(path, isolation_level=None)) as raw:
        return [raw.execute(statement).fetchone() for statement in statements]


def journal_mode(path: Path) -> str:
    (row,) = run_sql(path, "PRAGMA journal_mode")
    assert isinstance(row, tuple)
    return str(row[0])


@pytest.fixture
def foreign(tmp_path: Path) -> Path:
    """Another program's SQLite database, in the default rollback-journal mode."""
    directory = tmp_path / "other"
    directory.mkdir()
    path = directory / "app.db"
    run_sql(path, "CREATE TABLE people (name TEXT)", "INSERT INTO people VALUES ('ada')")
    return path


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", READ_COMMANDS, ids=[c[0] for c in READ_COMMANDS])
def test_a_read_command_leaves_another_programs_database_untouched(
    foreign: Path, command: tuple[str, ...]
) -> None:
    before = fingerprint(foreign.parent)
    result = tunnel("log", *command, "--db", str(foreign))
    assert result.returncode == EXIT_CONFIG, result.stderr
    assert result.stderr == (
        f"tunnel log: {foreign} is not a conversation log: no agent-tunnel schema\n"
    )
    # Same files, same bytes: no WAL switch, no -wal or -shm beside it.
    assert fingerprint(foreign.parent) == before
    assert journal_mode(foreign) == "delete"


def test_a_foreign_wal_database_gets_no_shm_file(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    run_sql(path, "PRAGMA journal_mode = WAL", "CREATE TABLE t (x)")
    assert not Path(f"{path}-wal").exists()
    before = fingerprint(tmp_path)
    with pytest.raises(SchemaError, match="no agent-tunnel schema"):
        SQLiteStore(path, readonly=True)
    assert fingerprint(tmp_path) == before


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", READ_COMMANDS, ids=[c[0] for c in READ_COMMANDS])
def test_an_empty_file_is_refused_and_stays_empty(tmp_path: Path, command: tuple[str, ...]) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    result = tunnel("log", *command, "--db", str(empty))
    assert result.returncode == EXIT_CONFIG, result.stderr
    assert "is not a conversation log: no agent-tunnel schema (an empty file)" in result.stderr
    assert empty.stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]


def test_read_only_opening_never_creates_a_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    with pytest.raises(StoreError, match=r"cannot open .*missing\.db read-only: No such file"):
        SQLiteStore(missing, readonly=True)
    assert not missing.exists()
    result = tunnel("log", "check", "--db", str(missing))
    assert result.returncode == EXIT_CONFIG
    assert result.stderr == f"tunnel log: no log database at {missing}\n"
    assert list(tmp_path.iterdir()) == []


def test_junk_and_newer_logs_are_refused_read_only_as_they_are(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not sqlite" * 50)
    with pytest.raises(SchemaError, match="is not a conversation log: not a SQLite database"):
        SQLiteStore(junk, readonly=True)
    newer = tmp_path / "newer.db"
    make_log(newer)
    run_sql(newer, f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    before = fingerprint(tmp_path)
    with pytest.raises(SchemaError, match="newer than this version understands"):
        SQLiteStore(newer, readonly=True)
    assert fingerprint(tmp_path) == before


async def test_a_read_only_store_refuses_writes_and_sees_a_writers_commits(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.db"
    writer = await SQLiteStore.open(path)  # a fresh log: its schema is still in the -wal file
    reader = await SQLiteStore.open(path, readonly=True)
    try:
        assert await reader.list_conversations() == []
        with pytest.raises(StoreError, match="open read-only"):
            await reader.append("c", [new()])
        with pytest.raises(StoreError, match="open read-only"):
            await reader.extend([])
        stored = await writer.append("c", news(3))
        assert await reader.query("c") == stored
        assert (await reader.check()).clean
    finally:
        await reader.aclose()
        await writer.aclose()


# -- a read-only directory ---------------------------------------------------------------------


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory to make read-only; its permissions are restored for cleanup."""
    directory = tmp_path / "archive"
    directory.mkdir()
    try:
        yield directory
    finally:
        for path in [directory, *directory.iterdir()]:
            path.chmod(0o755 if path.is_dir() else 0o644)


def freeze(directory: Path) -> None:
    for path in directory.iterdir():
        path.chmod(0o444)
    directory.chmod(0o555)


@pytest.mark.timeout(120)
def test_an_archived_log_in_a_read_only_directory_can_be_inspected(read_only_dir: Path) -> None:
    path = read_only_dir / "log.db"
    make_log(path)
    freeze(read_only_dir)
    before = fingerprint(read_only_dir)
    listed = tunnel("log", "list", "--db", str(path), unprivileged=True)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[1].split()[:2] == ["c", "5"]
    shown = tunnel("log", "show", "c", "--db", str(path), unprivileged=True)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count("\n#") == 4
    exported = tunnel("log", "export", "c", "--db", str(path), unprivileged=True)
    assert exported.returncode == 0, exported.stderr
    assert len(exported.stdout.splitlines()) == 5
    checked = tunnel("log", "check", "--db", str(path), unprivileged=True)
    assert checked.returncode == 0, checked.stderr
    assert "no problem found" in checked.stderr
    assert fingerprint(read_only_dir) == before


# A log whose process died before its last checkpoint: the commit is only in the -wal file.
CRASH = """
import os, sys, anyio
from tunnel.log import NewItem, SQLiteStore
store = SQLiteStore(sys.argv[1])
anyio.run(store.append, "c", [NewItem(type="message", data={"n": 0}, created_by="host")])
os._exit(0)
"""


def crash_after_one_append(path: Path) -> None:
    subprocess.run([sys.executable, "-c", CRASH, str(path)], cwd=ROOT, check=True, timeout=30)
    assert Path(f"{path}-wal").stat().st_size > 0


@pytest.mark.timeout(120)
def test_commits_only_in_the_wal_are_read_when_the_shm_file_is_there(
    read_only_dir: Path,
) -> None:
    path = read_only_dir / "log.db"
    crash_after_one_append(path)
    freeze(read_only_dir)
    result = tunnel("log", "list", "--db", str(path), unprivileged=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1].split()[:2] == ["c", "1"]


@pytest.mark.timeout(120)
def test_commits_sqlite_cannot_read_in_a_read_only_directory_are_named_not_lost(
    read_only_dir: Path,
) -> None:
    path = read_only_dir / "log.db"
    crash_after_one_append(path)
    Path(f"{path}-shm").unlink()
    freeze(read_only_dir)
    result = tunnel("log", "list", "--db", str(path), unprivileged=True)
    assert result.returncode == EXIT_CONFIG
    assert result.stderr.startswith(f"tunnel log: cannot open {path} read-only: {path}-wal holds")
    assert "not a SQLite database" not in result.stderr
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.timeout(120)
def test_an_unreadable_file_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    make_log(path)
    path.chmod(0)
    try:
        result = tunnel("log", "list", "--db", str(path), unprivileged=True)
    finally:
        path.chmod(0o644)
    assert result.returncode == EXIT_CONFIG
    assert "not readable" in result.stderr or "permission denied" in result.stderr.lower()
    assert "not a SQLite database" not in result.stderr
