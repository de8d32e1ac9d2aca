"""`read_file`: a viewer reads a window of a workspace file, and every way out of the workspace
is refused in words while the channel goes on serving: `..`, absolute paths, symlinks leading
out, /proc, the host's key (by name, through a symlink, by a hard link), oversized and binary
files; and the rate bound. The handler is real, the channel scripted (as test_session_history);
the last test shares through a real relay, where the host's own key file is the one hidden."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support import RelayProcess
from tunnel.agents import DemoSession
from tunnel.agents.workspace import Workspace
from tunnel.app.file_view import (
    FILE_READ_BURST,
    FILE_WINDOW_LINES,
    MAX_FILE_VIEW_BYTES,
    FileWindow,
)
from tunnel.app.requests import ListPaths, ReadFile, Subscribe
from tunnel.host.files import FileReader
from tunnel.host.presence import Presence
from tunnel.host.session import SessionChannelHandler
from tunnel.log import Log, MemoryStore

from .conftest import sharing
from .teammate import attached
from .test_session_history import ScriptedChannel

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace with a source file, and beside it the host's key, outside."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "src").mkdir()
    (workspace / "src" / "main.py").write_text("".join(f"line {n}\n" for n in range(1, 501)))
    key = tmp_path / "host.key"
    key.write_text("SECRET-KEY-MATERIAL\n")
    return workspace, key


@pytest.fixture
async def viewer(places: tuple[Path, Path], tmp_path: Path) -> AsyncIterator[ScriptedChannel]:
    workspace, key = places
    log = Log(MemoryStore())
    session = DemoSession(log=log, workspace=workspace, conversation_id="c1", delay=0)
    channel = ScriptedChannel("view")
    files = FileReader(Workspace(workspace), hidden=[key])
    handler = SessionChannelHandler(
        channel, session=session, log=log, presence=Presence(), files=files
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(handler.run)
        await channel.request(Subscribe(after=None))
        await channel.wait_for(channel.snapshot_done)
        yield channel
        tg.cancel_scope.cancel()


async def read(channel: ScriptedChannel, path: str, line: int | None = None) -> dict[str, Any]:
    answered = len(channel.of("file"))
    await channel.request(ReadFile(path=path, line=line))
    await channel.wait_for(lambda: len(channel.of("file")) > answered)
    answer = channel.of("file")[answered]
    assert answer["path"] == path
    return answer


async def test_a_viewer_reads_a_window_around_the_line(viewer: ScriptedChannel) -> None:
    answer = await read(viewer, "src/main.py", 300)
    assert answer["shown"] == "src/main.py"
    assert answer["total"] == 500
    assert answer["first"] <= 300 < answer["first"] + len(answer["lines"])
    assert answer["lines"][300 - answer["first"]] == "line 300"
    assert len(answer["lines"]) == FILE_WINDOW_LINES
    start = await read(viewer, "./src/../src/main.py")
    assert (start["first"], start["lines"][0]) == (1, "line 1")


async def test_every_way_out_of_the_workspace_is_refused_and_the_channel_goes_on(
    viewer: ScriptedChannel, places: tuple[Path, Path]
) -> None:
    workspace, key = places
    (workspace / "key-link").symlink_to(key)
    (workspace / "up").symlink_to("..")
    (workspace / "environ").symlink_to("/proc/self/environ")
    os.link(key, workspace / "key-copy")  # a hard link: the same file by another name
    (workspace / "big.txt").write_bytes(b"a\n" * (MAX_FILE_VIEW_BYTES // 2 + 1))
    (workspace / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    (workspace / "latin1.txt").write_bytes(b"caf\xe9\n")
    attacks = {
        "../host.key": "outside the workspace",
        str(key): "outside the workspace",
        "/etc/passwd": "outside the workspace",
        "/proc/self/environ": "outside the workspace",
        "environ": "outside the workspace",
        "up/host.key": "outside the workspace",
        "key-link": "outside the workspace",
        "key-copy": "the host keeps it private",
        "big.txt": "larger than",
        "image.png": "binary",
        "latin1.txt": "not UTF-8",
        "src": "directory",
        "missing.txt": "no such file",
    }
    for path, why in attacks.items():
        answer = await read(viewer, path)
        assert why in answer["refused"], (path, answer)
        assert "lines" not in answer
        assert "SECRET" not in str(answer)
    # Still served: the same channel reads a file of the workspace.
    assert (await read(viewer, "src/main.py", 2))["lines"][1] == "line 2"


def test_a_hidden_path_inside_the_workspace_is_refused(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / ".tunnel").mkdir(parents=True)
    (workspace / ".tunnel" / "host.key").write_text("SECRET\n")
    reader = FileReader(Workspace(workspace), hidden=[workspace / ".tunnel"])
    refused = reader.read_now(".tunnel/host.key", None).refused
    assert refused is not None
    assert "private" in refused


async def test_reads_beyond_the_burst_are_refused_not_queued(viewer: ScriptedChannel) -> None:
    answers = [await read(viewer, "src/main.py", 1) for _ in range(FILE_READ_BURST + 10)]
    refused = [a for a in answers if "refused" in a]
    assert refused
    assert "too many" in refused[0]["refused"]
    assert all("lines" in a for a in answers[:FILE_READ_BURST])


async def test_a_flood_of_paths_requests_is_answered_within_the_budget(
    viewer: ScriptedChannel, monkeypatch: pytest.MonkeyPatch
) -> None:
    scans = 0

    async def list_paths(self: DemoSession, prefix: str) -> tuple[list[str], bool]:
        nonlocal scans
        scans += 1
        return [f"{prefix}otes.txt"], False

    monkeypatch.setattr(DemoSession, "list_paths", list_paths)
    flood = FILE_READ_BURST * 10
    for _ in range(flood):
        await viewer.request(ListPaths(prefix="n"))
    await viewer.wait_for(lambda: len(viewer.of("paths")) == flood)
    answers = viewer.of("paths")
    # Every request is answered; beyond the budget with no paths, and nothing is scanned.
    assert answers[0] == {"op": "paths", "prefix": "n", "paths": ["notes.txt"], "more": False}
    assert scans < flood
    assert {"op": "paths", "prefix": "n", "paths": [], "more": False} in answers
    # The channel goes on.
    assert (await read(viewer, "src/main.py", 2))["lines"][1] == "line 2"


async def test_a_shared_host_never_shows_its_key_even_hard_linked_into_the_workspace(
    relay: RelayProcess, tmp_path: Path, workspace: Path
) -> None:
    windows: list[FileWindow] = []
    async with (
        sharing(relay.url, tmp_path, agent="demo", workspace=workspace) as shared,
        attached(str(shared.host.view_link), "vera") as vera,
    ):
        got = anyio.Event()

        def take(window: FileWindow) -> None:
            windows.append(window)
            if len(windows) == 3:
                got.set()

        vera.session.on_file = take
        os.link(tmp_path / "host_key", workspace / "innocent.txt")
        for path in ("innocent.txt", "notes.txt", "escape/x"):
            await vera.send(ReadFile(path=path, line=1))
        with anyio.fail_after(20):
            await got.wait()
    private, notes, escape = windows
    assert private.refused is not None
    assert "the host keeps it private" in private.refused
    assert notes.lines == ["remember the milk"]
    assert escape.refused is not None
    assert "outside the workspace" in escape.refused


async def test_a_handler_with_no_files_refuses_with_a_file_answer(tmp_path: Path) -> None:
    log = Log(MemoryStore())
    session = DemoSession(log=log, workspace=tmp_path, conversation_id="c1", delay=0)
    channel = ScriptedChannel("view")
    handler = SessionChannelHandler(channel, session=session, log=log, presence=Presence())
    async with anyio.create_task_group() as tg:
        tg.start_soon(handler.run)
        await channel.request(Subscribe(after=None))
        answer = await read(channel, "notes.txt", 3)
        tg.cancel_scope.cancel()
    assert answer["refused"] == "this host shows no files"
    assert answer["line"] == 3
