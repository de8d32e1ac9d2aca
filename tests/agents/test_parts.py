"""The pieces under the sessions: spec parsing and the recorder (workspace: test_workspace.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunnel.agents import (
    AcpSession,
    DemoSession,
    PtySession,
    Recorder,
    create_session,
    parse_spec,
)
from tunnel.agents.recorder import MAX_STREAM_CHARS
from tunnel.log import Log

from .conftest import Recording


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("demo", ("demo", [])),
        (" demo ", ("demo", [])),
        ("acp:claude-code-acp", ("acp", ["claude-code-acp"])),
        ("acp:npx -y 'my agent' --x=1", ("acp", ["npx", "-y", "my agent", "--x=1"])),
        ("pty:bash -l", ("pty", ["bash", "-l"])),
    ],
)
def test_specs_are_split_like_a_shell_would(spec: str, expected: tuple[str, list[str]]) -> None:
    assert parse_spec(spec) == expected


@pytest.mark.parametrize(
    "spec", ["", "demo:fast", "ACP:x", "acp:", "pty:   ", "acp:'unclosed", "bash", "ssh:host"]
)
def test_junk_specs_are_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="agent"):
        parse_spec(spec)


@pytest.mark.anyio
async def test_create_session_builds_each_kind(log: Log, tmp_path: Path) -> None:
    demo = create_session("demo", log, workspace=tmp_path, conversation_id="c")
    acp = create_session("acp:/usr/bin/my-agent --a", log, workspace=tmp_path, conversation_id="c")
    pty = create_session("pty:bash", log, workspace=tmp_path, conversation_id="c")
    assert isinstance(demo, DemoSession)
    assert isinstance(acp, AcpSession)
    assert isinstance(pty, PtySession)
    assert (acp.info.name, acp.info.kind) == ("my-agent", "chat")
    assert (pty.info.name, pty.info.kind) == ("bash", "terminal")
    assert demo.conversation_id == "c"
    with pytest.raises(ValueError, match="not a directory"):
        create_session("demo", log, workspace=tmp_path / "missing", conversation_id="c")


@pytest.mark.anyio
async def test_a_long_stream_is_stored_in_bounded_items(log: Log) -> None:
    recorder = Recorder(log, "c")
    chunk = "x" * 1000
    total = MAX_STREAM_CHARS * 2 + 500
    for _ in range(total // 1000):
        await recorder.delta("message", chunk)
    await recorder.delta("message", "y" * (total % 1000))
    await recorder.flush()
    items = await log.query("c", limit=10)
    assert len(items) == 3
    assert all(len(i.data["text"]) <= MAX_STREAM_CHARS for i in items)
    assert "".join(i.data["text"] for i in items) == chunk * (total // 1000) + "y" * (total % 1000)
    assert len({i.response_id for i in items}) == 3


@pytest.mark.anyio
async def test_a_new_channel_or_message_key_ends_the_stream(log: Log) -> None:
    rec = Recording(log, "c")
    recorder = Recorder(log, "c")
    await recorder.delta("reasoning", "hmm")
    await recorder.delta("message", "a")
    await recorder.delta("message", "b", key="m2")
    await recorder.delta("message", "c", key="m2")
    await recorder.flush()
    await recorder.flush()  # nothing open: nothing more stored
    items = await log.query("c")
    assert [(i.type, i.data["text"]) for i in items] == [
        ("reasoning", "hmm"),
        ("message", "a"),
        ("message", "bc"),
    ]
    assert rec.entries == []  # nothing subscribed, nothing received


@pytest.mark.anyio
async def test_an_unchanged_plan_is_published_but_not_stored_again(log: Log) -> None:
    recorder = Recorder(log, "c")
    entries = [{"content": "a", "status": "pending", "priority": "high"}]
    await recorder.plan(entries)
    await recorder.plan(entries)
    changed = [{"content": "a", "status": "completed", "priority": "high"}]
    await recorder.plan(changed)
    assert [i.data["entries"] for i in await log.query("c")] == [entries, changed]
