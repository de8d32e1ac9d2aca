"""`tunnel demo` as a user runs it: a subprocess, its printed link, a teammate attaching; its
own directory, fresh each run unless --keep."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import read_line
from tunnel.app.requests import PermissionAnswer, Prompt
from tunnel.process.exit_codes import EXIT_INTERRUPTED

from .conftest import wait_online
from .teammate import attached

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

ROOT = Path(__file__).resolve().parents[2]


def _env(tmp_path: Path) -> dict[str, str]:
    """The user's directories, all inside tmp_path."""
    return dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        COLUMNS="500",
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_DATA_HOME=str(tmp_path / "data"),
    )


def _start_demo(tmp_path: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tunnel.cli", "demo", "--port", "0", "--delay", "0", *args],
        cwd=tmp_path,
        env=_env(tmp_path),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _interrupt(proc: subprocess.Popen[bytes]) -> int:
    """Ctrl-C, as a user stops the demo; returns its exit code."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
    return proc.returncode


def _demo_run(tmp_path: Path, *args: str) -> tuple[str, str]:
    """Run the demo until it shows its links, then Ctrl-C it: (its directory, its host id)."""
    proc = _start_demo(tmp_path, *args)
    directory = host_id = None
    try:
        for _ in range(20):
            line = read_line(proc, timeout=30)
            if found := re.match(r"demo directory: (\S+) ", line):
                directory = found.group(1)
            if found := re.search(r"drive: http://127\.0\.0\.1:\d+/h/(\w+)#", line):
                host_id = found.group(1)
                break
    finally:
        code = _interrupt(proc)
    assert code == EXIT_INTERRUPTED, proc.stderr.read().decode() if proc.stderr else ""
    assert directory is not None
    assert host_id is not None
    return directory, host_id


def test_the_demo_has_its_own_directory_fresh_unless_kept(tmp_path: Path) -> None:
    directory, first = _demo_run(tmp_path)
    assert Path(directory) == tmp_path / "cache" / "agent-tunnel" / "demo"
    assert {p.name for p in Path(directory).iterdir()} >= {"host_key", "log.db"}
    # Nothing in the user's real config and data directories.
    assert not (tmp_path / "config").exists()
    assert not (tmp_path / "data").exists()
    (Path(directory) / "left-over").write_text("from the first run")

    again, second = _demo_run(tmp_path)
    assert again == directory
    assert second != first  # a new key: new links, and an empty conversation
    assert not (Path(directory) / "left-over").exists()
    (Path(directory) / "left-over").write_text("from the second run")

    kept, third = _demo_run(tmp_path, "--keep")
    assert kept == directory
    assert third == second
    assert (Path(directory) / "left-over").read_text() == "from the second run"


async def test_tunnel_demo_prints_a_link_that_shows_the_demo_reply(tmp_path: Path) -> None:
    proc = _start_demo(tmp_path)
    try:
        drive_link = None
        for _ in range(20):
            line = read_line(proc, timeout=30)
            match = re.search(r"drive: (http://127\.0\.0\.1:\d+/h/\S+)", line)
            if match:
                drive_link = match.group(1)
                break
        assert drive_link is not None, "tunnel demo printed no drive link"
        (tmp_path / "README.md").write_text("one\ntwo\nthree\n")
        await wait_online(drive_link)
        async with attached(drive_link, "alice") as alice:
            await alice.send(Prompt(text="hello demo"))
            await alice.wait_for(lambda t: t.item_of("permission_request") is not None)
            request = alice.item_of("permission_request")
            assert request is not None
            allow = request["data"]["options"][0]["option_id"]
            await alice.send(
                PermissionAnswer(request_id=request["data"]["request_id"], option_id=allow)
            )
            await alice.wait_for(lambda t: t.item_of("tool_result") is not None)
            await alice.wait_for(
                lambda t: any(
                    i["type"] == "message"
                    and i["data"]["role"] == "agent"
                    and "Done" in i["data"]["text"]
                    for i in t.items
                )
            )
        result = alice.item_of("tool_result")
        assert result is not None
        assert result["data"]["ok"] is True
        # The streamed reply arrived as deltas before its final message item.
        assert any(event["kind"] == "delta" for event in alice.events)
        assert alice.item_of("message", role="user", text="hello demo")["created_by"] == "alice"  # type: ignore[index]
    finally:
        code = _interrupt(proc)
    assert code == EXIT_INTERRUPTED, proc.stderr.read().decode() if proc.stderr else ""
