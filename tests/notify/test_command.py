"""`CommandRunner`: a command that hangs is killed after its time and the next event still runs;
the command line is an argv, never a shell's."""

from __future__ import annotations

import logging
import shlex
import sys
from pathlib import Path

import anyio
import pytest

from tunnel.notify.command import CommandRunner, command_environment, parse_command
from tunnel.notify.events import Decided, TurnEnded, Waiting
from tunnel.notify.settings import NotifySettings

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

SCRIPT = """\
import os, sys, time
if os.environ["TUNNEL_EVENT"] == "waiting":
    time.sleep(60)
open(os.path.join(sys.argv[1], os.environ["TUNNEL_EVENT"]), "w").close()
"""


async def test_a_hanging_command_is_killed_and_the_next_event_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    script = tmp_path / "hook.py"
    script.write_text(SCRIPT)
    settings = NotifySettings(send_timeout=0.5, max_sends=1)
    runner = CommandRunner(
        shlex.join([sys.executable, str(script), str(tmp_path)]),
        settings,
        conversation_id="main",
        host_id="h",
    )
    waiting = Waiting(
        request_id="perm_1", title="t", kind="read", command=None, options=(), answer=("drivers",)
    )
    with caplog.at_level(logging.WARNING, logger="tunnel.notify"):
        async with anyio.create_task_group() as tg:
            await tg.start(runner.run)
            runner.notify_nowait(waiting)
            runner.notify_nowait(
                Decided(request_id="perm_1", outcome="selected", option_kind="", by="x")
            )
            runner.notify_nowait(TurnEnded())
            with anyio.fail_after(20):
                while not (tmp_path / "turn_ended").exists():
                    await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
    assert (tmp_path / "decided").exists()
    assert not (tmp_path / "waiting").exists()
    assert [r.getMessage() for r in caplog.records] == [
        "--notify-command failed (timed out; killed); said once until it works"
    ]


def gone(pid: int) -> bool:
    """Whether `pid` has ended (a zombie nobody reaped yet counts as ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


async def test_a_timed_out_command_dies_with_its_children(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pid_file = tmp_path / "child"
    command = shlex.join(["sh", "-c", 'sleep 60 & echo $! > "$0"; wait', str(pid_file)])
    runner = CommandRunner(
        command, NotifySettings(send_timeout=2, max_sends=1), conversation_id="main", host_id="h"
    )
    with caplog.at_level(logging.WARNING, logger="tunnel.notify"):
        async with anyio.create_task_group() as tg:
            await tg.start(runner.run)
            runner.notify_nowait(TurnEnded())
            with anyio.fail_after(20):
                while not caplog.records:
                    await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
    assert "timed out; killed" in caplog.records[0].getMessage()
    child = int(pid_file.read_text())
    with anyio.fail_after(10):
        while not gone(child):
            await anyio.sleep(0.05)


def test_the_command_line_is_split_never_interpreted() -> None:
    assert parse_command("notify-send 'needs you' $(rm -rf ~)") == [
        "notify-send",
        "needs you",
        "$(rm",
        "-rf",
        "~)",
    ]
    with pytest.raises(ValueError, match="--notify-command"):
        parse_command("   ")
    env = command_environment({"v": 1, "event": "waiting", "answer": ["a", "b"], "title": "x\0y"})
    assert env == {"TUNNEL_EVENT": "waiting", "TUNNEL_ANSWER": "a,b", "TUNNEL_TITLE": "xy"}
