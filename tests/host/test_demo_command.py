"""`tunnel demo` as a user runs it: a subprocess, its printed link, a teammate attaching."""

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

from .conftest import wait_online
from .teammate import attached

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

ROOT = Path(__file__).resolve().parents[2]


async def test_tunnel_demo_prints_a_link_that_shows_the_demo_reply(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONUNBUFFERED="1", COLUMNS="500")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tunnel.cli",
            "demo",
            "--port",
            "0",
            "--key-file",
            str(tmp_path / "key"),
            "--log-db",
            str(tmp_path / "log.db"),
            "--delay",
            "0",
        ],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
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
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    assert proc.returncode == 0, proc.stderr.read().decode() if proc.stderr else ""
