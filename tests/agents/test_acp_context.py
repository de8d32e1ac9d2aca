"""Files a prompt names with `@path`, given to the agent with it (tests/agents/fake_acp_agent.py
says what it got): embedded when the agent takes embedded context, linked otherwise, never one
outside the workspace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tunnel.agents import SessionError, acp_context
from tunnel.agents.acp_context import MAX_COMPLETIONS, MAX_MENTIONS, complete, mentions
from tunnel.agents.sandbox import HiddenFiles
from tunnel.agents.workspace import Workspace
from tunnel.app.requests import PromptImage
from tunnel.log import Log
from tunnel.terminal.render import render_item

from .conftest import running
from .test_acp import acp_session

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def test_mentions_are_at_words_without_their_trailing_punctuation() -> None:
    assert mentions("see @notes.txt, and (@src/a.py) @notes.txt.") == ["notes.txt"]
    assert mentions("@a.py then @src/b.py: mail me@host.org") == ["a.py", "src/b.py"]
    assert len(mentions(" ".join(f"@f{i}" for i in range(20)))) == MAX_MENTIONS


def workspace_with_files(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("remember the milk\nand eggs\n")
    (workspace / "logo.bin").write_bytes(b"\x89PNG\0\0")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET\n")
    (workspace / "escape").symlink_to(outside)
    return workspace


async def test_files_inside_the_workspace_go_with_the_prompt_and_no_other(
    log: Log, tmp_path: Path
) -> None:
    workspace = workspace_with_files(tmp_path)
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        await session.prompt(
            "context @notes.txt @logo.bin @escape/secret.txt @../outside/secret.txt"
            f" @{tmp_path}/outside/secret.txt @missing.txt @.",
            by="alice",
        )
        said = await rec.wait_item("message", role="agent")
        attached = next(i for i in rec.items if i.data.get("what") == "context_attached")
    notes, logo = (workspace / "notes.txt").as_uri(), (workspace / "logo.bin").as_uri()
    assert said.data["text"] == f"embedded {notes}: remember the milk; resource_link {logo}"
    assert attached.data["files"] == [
        {"path": "notes.txt", "embedded": True, "size": 27},
        {"path": "logo.bin", "embedded": False, "size": 6},
    ]
    assert attached.data["turn"] == said.data["turn"]
    shown = render_item(attached.to_wire()).plain
    assert "with the prompt: notes.txt (its text), logo.bin (a link)" in shown


async def test_a_host_private_file_is_never_attached_nor_read_even_hard_linked(
    log: Log, tmp_path: Path
) -> None:
    workspace = workspace_with_files(tmp_path)
    key = tmp_path / "host.key"
    key.write_text("SECRET-KEY-MATERIAL\n")
    os.link(key, workspace / "innocent.txt")  # the key by another name, inside the workspace
    hidden = HiddenFiles([key])
    session = acp_session(log, workspace)
    session.set_hidden(hidden)
    async with running(session, log) as rec:
        await session.prompt("context @innocent.txt @notes.txt", by="alice")
        said = await rec.wait_item("message", role="agent")
    assert said.data["text"] == f"embedded {(workspace / 'notes.txt').as_uri()}: remember the milk"
    # The agent's own reads (fs/read_text_file) are refused the same way.
    room = Workspace(workspace)
    with pytest.raises(PermissionError):
        room.read_text("innocent.txt", refuse=hidden.hides_fd)
    assert room.read_text("notes.txt", refuse=hidden.hides_fd).startswith("remember")


async def test_an_agent_without_embedded_context_gets_links(
    log: Log, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ACP_LINKS", "1")
    workspace = workspace_with_files(tmp_path)
    session = acp_session(log, workspace)
    async with running(session, log) as rec:
        await session.prompt("context @notes.txt", by="alice")
        said = await rec.wait_item("message", role="agent")
    assert said.data["text"] == f"resource_link {(workspace / 'notes.txt').as_uri()}"


async def test_images_go_with_the_prompt_and_only_their_size_is_recorded(
    log: Log, tmp_path: Path
) -> None:
    session = acp_session(log, tmp_path)
    png = PromptImage(mime_type="image/png", data=b"\x89PNG" + bytes(96))
    async with running(session, log) as rec:
        await session.prompt("context look", by="alice", images=[png])
        said = await rec.wait_item("message", role="agent")
    asked = next(i for i in rec.items if i.data.get("role") == "user")
    assert said.data["text"] == "image image/png 100 bytes"
    assert asked.data["images"] == [{"mime_type": "image/png", "size": 100}]


async def test_an_agent_that_takes_no_images_refuses_a_prompt_with_one(
    log: Log, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ACP_LINKS", "1")
    session = acp_session(log, tmp_path)
    png = PromptImage(mime_type="image/png", data=b"\x89PNG")
    async with running(session, log) as rec:
        await rec.wait_item("session_event", what="agent_started")
        with pytest.raises(SessionError) as refused:
            await session.prompt("context look", by="alice", images=[png])
        assert refused.value.code == "not_supported"
    assert not any(i.data.get("role") == "user" for i in rec.items)  # nothing recorded


def test_completion_lists_the_workspace_and_nothing_outside_it(tmp_path: Path) -> None:
    workspace = workspace_with_files(tmp_path)
    (workspace / "src").mkdir()
    (workspace / "src" / "app.py").write_text("")
    (workspace / ".env").write_text("")
    room = Workspace(workspace)
    assert complete(room, "") == (["escape", "logo.bin", "notes.txt", "src/"], False)
    assert complete(room, "src/a") == (["src/app.py"], False)
    assert complete(room, ".e") == ([".env"], False)
    # The symlink leads out: listed by its name (as a link), never followed.
    for outside in ("escape/", "../", "../outside/", f"{tmp_path}/outside/", "/"):
        assert complete(room, outside) == ([], False)
    for n in range(MAX_COMPLETIONS + 1):
        (workspace / "src" / f"m{n:03}.py").write_text("")
    listed, more = complete(room, "src/m")
    assert (len(listed), more) == (MAX_COMPLETIONS, True)


def test_completion_stops_at_the_scan_bound_whatever_matches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = tmp_path / "big"
    workspace.mkdir()
    for n in range(30):
        (workspace / f"a{n:02}").write_text("")
    monkeypatch.setattr(acp_context, "MAX_SCANNED", 20)
    # Nothing matches: the scan still stops at the bound, and says there may be more.
    assert complete(Workspace(workspace), "b") == ([], True)
    monkeypatch.setattr(acp_context, "MAX_SCANNED", 40)
    assert complete(Workspace(workspace), "b") == ([], False)
