"""`tunnel host --log-db FILE` with a database it cannot use: one line naming the file and what is
wrong with it, exit status 2, no traceback, and the file left as it was. The log is opened before
the relay is dialed, so no relay is needed (the URL points where nothing listens)."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from tunnel.log import SQLiteStore
from tunnel.log.sqlite import SCHEMA_VERSION
from tunnel.process.exit_codes import EXIT_CONFIG

from .helpers import tunnel


def junk(path: Path) -> None:
    path.write_bytes(b"definitely not sqlite\n" * 200)


def foreign(path: Path) -> None:
    with closing(sqlite3.connect(path)) as raw:
        raw.execute("CREATE TABLE people (name TEXT)")


def newer(path: Path) -> None:
    SQLiteStore(path).close()
    with closing(sqlite3.connect(path)) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")


def directory(path: Path) -> None:
    path.mkdir()


def read_only(path: Path) -> None:
    SQLiteStore(path).close()
    path.chmod(0o444)


def read_only_directory(path: Path) -> None:
    SQLiteStore(path).close()
    path.parent.chmod(0o555)


# (how the file is spoiled, what the one line says after the file's name, run unprivileged)
UNUSABLE: dict[str, tuple[Callable[[Path], None], str, bool]] = {
    "junk": (junk, "is not a conversation log: not a SQLite database", False),
    "foreign": (foreign, "is not a conversation log: no agent-tunnel schema", False),
    "newer": (newer, "newer than this version understands", False),
    "directory": (directory, "it is a directory", False),
    "read-only": (read_only, "cannot write to the log at {db}: the file is read-only", True),
    "read-only-directory": (read_only_directory, "its directory {dir} is read-only", True),
}


def fingerprint(path: Path) -> str:
    return "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", list(UNUSABLE))
def test_an_unusable_log_database_is_one_line_and_exit_2(tmp_path: Path, case: str) -> None:
    spoil, says, unprivileged = UNUSABLE[case]
    db = tmp_path / "logs" / "log.db"
    db.parent.mkdir()
    spoil(db)
    before = fingerprint(db)
    env = {
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "TERMINAL_WIDTH": "80",
    }
    try:
        result = tunnel(
            "host",
            "--relay",
            "http://127.0.0.1:9",
            "--log-db",
            str(db),
            env=env,
            unprivileged=unprivileged,
        )
    finally:
        db.parent.chmod(0o755)
    assert result.returncode == EXIT_CONFIG, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tunnel host: cannot use the log database: "), lines[0]
    assert str(db) in lines[0]
    assert says.format(db=db, dir=db.parent) in lines[0]
    assert "Traceback" not in result.stderr
    assert fingerprint(db) == before
