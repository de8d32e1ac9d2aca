"""`tunnel log list/show/export/import`, through typer's runner and once as a real process."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from tunnel.log import Item, NewItem, SQLiteStore, default_db_path
from tunnel.log.cli import log_app
from tunnel.process.exit_codes import EXIT_CONFIG

runner = CliRunner()
ROOT = Path(__file__).parents[2]
T0 = datetime(2025, 3, 1, 9, 30, tzinfo=UTC)


def make_db(path: Path, conversations: dict[str, list[NewItem]]) -> None:
    async def fill() -> None:
        store = await SQLiteStore.open(path)
        try:
            for cid, items in conversations.items():
                await store.append(cid, items)
        finally:
            await store.aclose()

    anyio.run(fill)


def read_all(path: Path) -> dict[str, list[Item]]:
    async def read() -> dict[str, list[Item]]:
        store = await SQLiteStore.open(path)
        try:
            infos = await store.list_conversations()
            return {
                i.conversation_id: await store.query(i.conversation_id, limit=1000) for i in infos
            }
        finally:
            await store.aclose()

    return anyio.run(read)


def item(type: str = "message", text: str = "hi", **extra: object) -> NewItem:
    return NewItem(type=type, data={"text": text, **extra}, created_by="host", created_at=T0)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "log.db"
    make_db(
        path,
        {
            "alpha": [
                item(text="hello"),
                item("tool_call", "run ls"),
                item("reasoning", "thinking"),
                item("tool_call", "run cat"),
            ],
            "beta": [item(text="é ✓ \x1b[31mred\x1b[0m")],
        },
    )
    return path


def test_default_db_path_is_in_the_user_data_dir() -> None:
    path = default_db_path()
    assert path.name == "log.db"
    assert path.parent.name == "agent-tunnel"


def test_list_shows_each_conversation_with_its_size(db: Path) -> None:
    result = runner.invoke(log_app, ["list", "--db", str(db)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["CONVERSATION", "ITEMS", "UPDATED"]
    rows = {line.split()[0]: line.split()[1] for line in lines[1:]}
    assert rows == {"alpha": "4", "beta": "1"}


def test_list_without_a_database_says_so_and_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "none.db"
    result = runner.invoke(log_app, ["list"], env={"TUNNEL_LOG_DB": str(path)})
    assert result.exit_code == 0
    assert "no log database" in result.stderr
    assert not path.exists()


def test_show_prints_items_with_filters(db: Path) -> None:
    result = runner.invoke(log_app, ["show", "alpha", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert "#0  2025-03-01T09:30:00.000000Z  host  message" in result.stdout
    assert "    run cat" in result.stdout
    only_tools = runner.invoke(
        log_app, ["show", "alpha", "--type", "tool_call", "--type", "reasoning", "--db", str(db)]
    )
    headers = [line for line in only_tools.stdout.splitlines() if line.startswith("#")]
    assert [h.split()[0] for h in headers] == ["#1", "#2", "#3"]
    paged = runner.invoke(
        log_app, ["show", "alpha", "--after", "0", "--limit", "2", "--db", str(db)]
    )
    headers = [line for line in paged.stdout.splitlines() if line.startswith("#")]
    assert [h.split()[0] for h in headers] == ["#1", "#2"]


def test_show_escapes_terminal_control_characters(db: Path) -> None:
    result = runner.invoke(log_app, ["show", "beta", "--db", str(db)])
    assert result.exit_code == 0
    assert "\x1b" not in result.stdout
    assert "é ✓ \\x1b[31mred\\x1b[0m" in result.stdout


def test_show_and_export_of_an_unknown_conversation_fail_clearly(db: Path) -> None:
    for command in ("show", "export"):
        result = runner.invoke(log_app, [command, "gamma", "--db", str(db)])
        assert result.exit_code == EXIT_CONFIG
        assert result.stderr == "tunnel log: no conversation 'gamma'\n"


def test_a_foreign_database_is_reported_not_a_traceback(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as raw:
        raw.execute("CREATE TABLE t (x)")
    result = runner.invoke(log_app, ["list", "--db", str(other)])
    assert result.exit_code == EXIT_CONFIG
    said = f"tunnel log: {other} is not a conversation log: no agent-tunnel schema\n"
    assert result.stderr == said


def test_import_refuses_a_db_in_a_missing_directory_and_creates_none(
    db: Path, tmp_path: Path
) -> None:
    dump = runner.invoke(log_app, ["export", "alpha", "--db", str(db)])
    path = tmp_path / "alpha.ndjson"
    path.write_bytes(dump.stdout_bytes)
    missing = tmp_path / "no" / "such" / "log.db"
    result = runner.invoke(log_app, ["import", str(path), "--db", str(missing)])
    assert result.exit_code == EXIT_CONFIG
    assert result.stderr == f"tunnel log: the log's directory {missing.parent} does not exist\n"
    assert not (tmp_path / "no").exists()


def test_export_then_import_reproduces_the_conversation(db: Path, tmp_path: Path) -> None:
    exported = runner.invoke(log_app, ["export", "alpha", "--db", str(db)])
    assert exported.exit_code == 0, exported.output
    lines = exported.stdout_bytes.splitlines()
    assert len(lines) == 4
    wires = [json.loads(line) for line in lines]
    assert [w["id"] for w in wires] == ["alpha:0", "alpha:1", "alpha:2", "alpha:3"]
    dump = tmp_path / "alpha.ndjson"
    dump.write_bytes(exported.stdout_bytes)

    target = tmp_path / "copy.db"
    imported = runner.invoke(log_app, ["import", str(dump), "--db", str(target)])
    assert imported.exit_code == 0, imported.output
    assert "imported 4 items in 1 conversation(s)" in imported.stderr
    assert read_all(target)["alpha"] == read_all(db)["alpha"]
    again = runner.invoke(log_app, ["export", "alpha", "--db", str(target)])
    assert again.stdout_bytes == exported.stdout_bytes


def ndjson(
    path: Path, wires: list[dict[str, object]], raw_lines: dict[int, str] | None = None
) -> Path:
    lines = [json.dumps(w) for w in wires]
    for index, text in (raw_lines or {}).items():
        lines.insert(index, text)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def wire(cid: str, seq: int) -> dict[str, object]:
    return Item(
        conversation_id=cid,
        seq=seq,
        type="message",
        status=None,
        response_id=None,
        created_at=T0,
        created_by="host",
        data={"text": f"{cid} {seq}"},
    ).to_wire()


@pytest.mark.parametrize(
    ("wires", "raw_lines", "complaint"),
    [
        ([wire("new", 0), wire("new", 1)], {1: "{not json"}, "line 2: not JSON"),
        ([wire("new", 0), {**wire("new", 1), "seq": -1}], None, "line 2: item new:1: item seq"),
        ([wire("new", 0), wire("new", 2)], None, "line 2: item new:2 leaves a gap"),
        ([wire("new", 0), wire("new", 0)], None, "line 2: item new:0 repeats"),
        ([wire("new", 1)], None, "line 1: item new:1 leaves a gap"),
        ([wire("new", 0), wire("alpha", 2)], None, "line 2: item alpha:2 collides"),
        ([wire("alpha", 5)], None, "line 1: item alpha:5 leaves a gap"),
    ],
    ids=[
        "corrupt-line",
        "bad-field",
        "gap-in-file",
        "repeat",
        "new-not-at-0",
        "collision",
        "gap-after-db",
    ],
)
def test_import_refuses_a_bad_file_and_writes_nothing(
    db: Path,
    tmp_path: Path,
    wires: list[dict[str, object]],
    raw_lines: dict[int, str] | None,
    complaint: str,
) -> None:
    before = read_all(db)
    path = ndjson(tmp_path / "bad.ndjson", wires, raw_lines)
    result = runner.invoke(log_app, ["import", str(path), "--db", str(db)])
    assert result.exit_code == EXIT_CONFIG
    assert "nothing was written" in result.stderr
    assert complaint in result.stderr
    assert read_all(db) == before


def test_import_continues_an_existing_conversation(db: Path, tmp_path: Path) -> None:
    path = ndjson(tmp_path / "more.ndjson", [wire("alpha", 4), wire("gamma", 0), wire("alpha", 5)])
    result = runner.invoke(log_app, ["import", str(path)], env={"TUNNEL_LOG_DB": str(db)})
    assert result.exit_code == 0, result.output
    after = read_all(db)
    assert [i.seq for i in after["alpha"]] == list(range(6))
    assert [i.seq for i in after["gamma"]] == [0]


@pytest.mark.timeout(60)
def test_the_real_command_line_exports_and_imports(db: Path, tmp_path: Path) -> None:
    python = ROOT / ".venv" / "bin" / "python"
    command = [str(python if python.exists() else sys.executable), "-m", "tunnel.cli", "log"]
    dump = tmp_path / "alpha.ndjson"
    with dump.open("wb") as out:
        export = subprocess.run(
            [*command, "export", "alpha", "--db", str(db)],
            stdout=out,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            timeout=30,
            check=False,
        )
    assert export.returncode == 0, export.stderr
    assert len(dump.read_bytes().splitlines()) == 4
    target = tmp_path / "copy.db"
    env = {"TUNNEL_LOG_DB": str(target), "PATH": "/usr/bin:/bin"}
    imported = subprocess.run(
        [*command, "import", str(dump)],
        capture_output=True,
        cwd=ROOT,
        env=env,
        timeout=30,
        check=False,
    )
    assert imported.returncode == 0, imported.stderr
    listed = subprocess.run(
        [*command, "list"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=30,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[1].split()[:2] == ["alpha", "4"]
    rejected = subprocess.run(
        [*command, "import", str(dump)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=30,
        check=False,
    )
    assert rejected.returncode == EXIT_CONFIG
    assert "item alpha:0 collides" in rejected.stderr
