"""The command line on damaged input: `tunnel log check`, corrupt rows in `show` and `export`
(placeholders by default, `--strict` to refuse), and NDJSON nested too deeply to import."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from tunnel.log import SQLiteStore
from tunnel.log.cli import log_app
from tunnel.log.item import MAX_DEPTH
from tunnel.log.ndjson import MAX_LINE_DEPTH, read_items
from tunnel.process.exit_codes import EXIT_CONFIG, EXIT_CORRUPT

from .helpers import news, tunnel

runner = CliRunner()

SECRET = "s3cr3t-payload"


def make_log(path: Path, conversations: dict[str, int]) -> None:
    async def fill() -> None:
        store = await SQLiteStore.open(path)
        try:
            for cid, count in conversations.items():
                for start in range(0, count, 500):
                    await store.append(cid, news(min(500, count - start), start=start))
        finally:
            await store.aclose()

    anyio.run(fill)


def damage(path: Path, sql: str) -> None:
    with closing(sqlite3.connect(path)) as raw, raw:
        assert raw.execute(sql).rowcount == 1


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """Conversation `big` (600 items, seq 300 corrupt) and `small` (3 intact items)."""
    path = tmp_path / "log.db"
    make_log(path, {"big": 600, "small": 3})
    damage(
        path,
        f"UPDATE items SET data = '{{\"{SECRET}\": tru' "
        "WHERE conversation_id = 'big' AND seq = 300",
    )
    return path


def test_check_says_a_clean_log_is_clean(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    make_log(path, {"a": 3, "b": 2})
    result = runner.invoke(log_app, ["check", "--db", str(path)])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert result.stderr == "checked 5 items in 2 conversation(s): no problem found\n"


def test_check_lists_each_corrupt_item_and_exits_with_the_corrupt_code(db: Path) -> None:
    result = runner.invoke(log_app, ["check", "--db", str(db)])
    assert result.exit_code == EXIT_CORRUPT
    assert result.stdout.splitlines() == [
        "big:300: column data is not JSON (Expecting value: line 1 column 20 (char 19))"
    ]
    assert SECRET not in result.output
    assert result.stderr == "checked 603 items in 2 conversation(s): 1 problem(s)\n"
    only_small = runner.invoke(log_app, ["check", "small", "--db", str(db)])
    assert only_small.exit_code == 0
    assert "checked 3 items in 1 conversation(s)" in only_small.stderr
    unknown = runner.invoke(log_app, ["check", "nope", "--db", str(db)])
    assert unknown.exit_code == EXIT_CONFIG
    assert unknown.stderr == "tunnel log: no conversation 'nope'\n"


def test_show_puts_a_placeholder_where_the_corrupt_item_is(db: Path) -> None:
    result = runner.invoke(
        log_app, ["show", "big", "--after", "298", "--limit", "3", "--db", str(db)]
    )
    assert result.exit_code == 0, result.output
    headers = [line.split()[0::3] for line in result.stdout.splitlines() if line.startswith("#")]
    assert headers == [["#299", "message"], ["#300", "corrupt"], ["#301", "message"]]
    assert "    this item could not be read: column data is not JSON" in result.stdout
    assert SECRET not in result.stdout
    assert "1 item(s) could not be read" in result.stderr


def test_export_writes_every_item_and_a_placeholder_and_imports_again(
    db: Path, tmp_path: Path
) -> None:
    result = runner.invoke(log_app, ["export", "big", "--db", str(db)])
    assert result.exit_code == 0, result.output
    wires = [json.loads(line) for line in result.stdout_bytes.splitlines()]
    assert [w["seq"] for w in wires] == list(range(600))
    assert wires[300]["type"] == "corrupt"
    assert wires[300]["data"]["columns"] == ["data"]
    assert wires[300]["data"]["stored_type"] == "message"
    assert SECRET not in result.stdout
    assert "exported 600 items of big" in result.stderr
    assert "1 item(s) could not be read and were exported as placeholders" in result.stderr
    dump = tmp_path / "big.ndjson"
    dump.write_bytes(result.stdout_bytes)
    copy = tmp_path / "copy.db"
    imported = runner.invoke(log_app, ["import", str(dump), "--db", str(copy)])
    assert imported.exit_code == 0, imported.output
    # The copy holds the placeholder as an ordinary item: nothing in it is corrupt.
    assert runner.invoke(log_app, ["check", "--db", str(copy)]).exit_code == 0


def test_export_strict_writes_nothing_when_an_item_cannot_be_read(db: Path) -> None:
    result = runner.invoke(log_app, ["export", "big", "--strict", "--db", str(db)])
    assert result.exit_code == EXIT_CORRUPT
    assert result.stdout == ""
    assert result.stderr.startswith(
        "tunnel log: not exported, nothing was written: 1 problem(s), the first big:300: "
    )
    assert len(result.stderr.splitlines()) == 1
    intact = runner.invoke(log_app, ["export", "small", "--strict", "--db", str(db)])
    assert intact.exit_code == 0
    assert len(intact.stdout.splitlines()) == 3


@pytest.mark.timeout(120)
def test_the_real_commands_on_a_corrupt_log(db: Path, tmp_path: Path) -> None:
    checked = tunnel("log", "check", "--db", str(db))
    assert checked.returncode == EXIT_CORRUPT, checked.stderr
    assert checked.stdout.startswith("big:300: column data is not JSON")
    exported = tunnel("log", "export", "big", "--db", str(db))
    assert exported.returncode == 0, exported.stderr
    assert len(exported.stdout.splitlines()) == 600
    assert "Traceback" not in exported.stderr


# -- NDJSON nested too deeply -------------------------------------------------------------------


def wire_with_data(data: object, seq: int = 0) -> str:
    return json.dumps(
        {
            "id": f"deep:{seq}",
            "conversation_id": "deep",
            "seq": seq,
            "type": "message",
            "status": None,
            "response_id": None,
            "created_at": "2025-03-01T09:30:00.000000Z",
            "created_by": "host",
            "data": data,
        }
    )


def nested_data(containers: int) -> dict[str, object]:
    """A `data` map that, counting itself, nests `containers` maps and lists deep."""
    value: list[object] = []
    for _ in range(containers - 2):
        value = [value]
    return {"a": value}


@pytest.mark.timeout(120)
def test_a_file_nested_a_thousand_levels_is_refused_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "deep.ndjson"
    line = wire_with_data("HERE").replace('"HERE"', "[" * 1000 + "]" * 1000)
    path.write_text(wire_with_data({"text": "fine"}) + "\n" + line + "\n", encoding="utf-8")
    db = tmp_path / "log.db"
    result = tunnel("log", "import", str(path), "--db", str(db))
    assert result.returncode == EXIT_CONFIG, result.stderr
    assert "Traceback" not in result.stderr
    assert "RecursionError" not in result.stderr
    assert f"line 2: nested deeper than {MAX_LINE_DEPTH} levels" in result.stderr
    assert "nothing was written" in result.stderr


def test_the_deepest_item_data_imports_and_one_level_more_is_refused(tmp_path: Path) -> None:
    deepest = tmp_path / "deepest.ndjson"
    deepest.write_text(wire_with_data(nested_data(MAX_DEPTH)) + "\n", encoding="utf-8")
    assert [item.seq for _, item in read_items(deepest)] == [0]
    too_deep = tmp_path / "too-deep.ndjson"
    too_deep.write_text(wire_with_data(nested_data(MAX_DEPTH + 1)) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=f"^line 1: nested deeper than {MAX_LINE_DEPTH} levels"):
        list(read_items(too_deep))


def test_brackets_inside_strings_do_not_count_as_nesting(tmp_path: Path) -> None:
    path = tmp_path / "text.ndjson"
    text = '[{"\\"' * 500 + "]}" * 500
    path.write_text(wire_with_data({"text": text}) + "\n", encoding="utf-8")
    ((_, item),) = read_items(path)
    assert item.data["text"] == text
