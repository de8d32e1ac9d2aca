"""`tunnel log export --html`: the user's mistakes said in one line with nothing written, and
`read_excerpt`'s cut at a seq (the file in a browser: tests/relay/web/test_web_export.py)."""

from __future__ import annotations

import base64
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from tunnel.e2e.identity import HostIdentity
from tunnel.host.audit import sign_head
from tunnel.log import NewItem, SQLiteStore
from tunnel.log.chain import Chain
from tunnel.log.cli import log_app
from tunnel.log.excerpt import Excerpt, read_excerpt
from tunnel.process.exit_codes import EXIT_CONFIG

runner = CliRunner()
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def fill(path: Path, count: int, *, signed_at: tuple[int, ...] = ()) -> str:
    """A log of `count` messages in `main`, signed at the given seqs; the signer's host id."""
    identity = HostIdentity.generate()

    async def write() -> None:
        store = await SQLiteStore.open(path)
        try:
            items = await store.append(
                "main",
                [
                    NewItem(type="message", data={"role": "user", "text": f"m{n}"}, created_by="a")
                    for n in range(count)
                ],
            )
            chain, heads = Chain("main"), {}
            for item in items:
                heads[item.seq] = chain.add(item)
            await store.add_signatures(
                [sign_head(identity, "main", seq, heads[seq], now=NOW) for seq in signed_at]
            )
        finally:
            await store.aclose()

    anyio.run(write)
    return identity.host_id


def excerpt_of(path: Path, upto: int | None) -> Excerpt:
    async def read() -> Excerpt:
        store = await SQLiteStore.open(path, readonly=True)
        try:
            return await read_excerpt(store, "main", upto=upto, page_size=2)
        finally:
            await store.aclose()

    return anyio.run(read)


def test_an_excerpt_up_to_a_seq_holds_its_items_and_the_signatures_over_them(
    tmp_path: Path,
) -> None:
    db = tmp_path / "log.db"
    host_id = fill(db, 6, signed_at=(1, 3, 5))
    whole = excerpt_of(db, None)
    assert [item.seq for item in whole.items] == [0, 1, 2, 3, 4, 5]
    assert whole.summary == f"main: items 0..5, chain intact; signed by host {host_id} up to seq 5"
    cut = excerpt_of(db, 4)
    assert [item.seq for item in cut.items] == [0, 1, 2, 3, 4]
    assert [signature.seq for signature in cut.signatures] == [1, 3]
    assert cut.report.ok
    assert cut.summary == (
        f"main: items 0..4, chain intact; signed by host {host_id} up to seq 3; "
        "unsigned after it (seq 4..4)"
    )


def test_the_file_embeds_the_items_as_base64_json_and_says_how_far_it_goes(
    tmp_path: Path,
) -> None:
    db = tmp_path / "log.db"
    fill(db, 3, signed_at=(2,))
    out = tmp_path / "main.html"
    result = runner.invoke(
        log_app, ["export", "main", "--db", str(db), "--html", str(out), "--upto", "1"]
    )
    assert result.exit_code == 0, result.output
    assert result.stderr == f"wrote {out}: items 0..1 of main\n"
    page = out.read_text(encoding="utf-8")
    block = re.search(
        r'<script type="application/json" id="transcript-data">([^<]*)</script>', page
    )
    assert block is not None
    data = json.loads(base64.b64decode(block[1]))
    assert [item["seq"] for item in data["items"]] == [0, 1]
    assert data["signatures"] == []
    assert data["verification"]["summary"] == "main: items 0..1, chain intact; unsigned up to seq 1"
    assert not list(tmp_path.glob(".*partial"))


LONG = "x" * 300


def written(directory: Path) -> list[str]:
    """The files in `directory` but the log's own (opening it read-only leaves -wal and -shm)."""
    return sorted(p.name for p in directory.iterdir() if not p.name.startswith("log.db"))


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["main", "--db", "{tmp}/missing.db", "--html", "{tmp}/out.html"],
         "no log database at {tmp}/missing.db"),
        (["gamma", "--db", "{db}", "--html", "{tmp}/out.html"], "no conversation 'gamma'"),
        (["main", "--db", "{db}", "--html", "{tmp}/file/out.html"],
         "cannot write {tmp}/file/out.html: its directory does not exist"),
        (["main", "--db", "{db}", "--html", f"{{tmp}}/{LONG}"],
         f"cannot write {{tmp}}/{LONG}: File name too long"),
        (["main", "--db", "{db}", "--upto", "1"], "--upto needs --html"),
    ],
)  # fmt: skip
def test_a_mistake_is_one_line_exit_2_and_nothing_written(
    tmp_path: Path, args: list[str], said: str
) -> None:
    db = tmp_path / "log.db"
    fill(db, 2)
    (tmp_path / "file").write_text("a file, not a directory")
    before = written(tmp_path)
    args = [arg.replace("{tmp}", str(tmp_path)).replace("{db}", str(db)) for arg in args]
    result = runner.invoke(log_app, ["export", *args])
    assert result.exit_code == EXIT_CONFIG
    assert result.stderr == f"tunnel log: {said}\n".replace("{tmp}", str(tmp_path))
    assert result.stdout == ""
    assert written(tmp_path) == before
