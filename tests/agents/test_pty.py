"""Terminal agents: real programs in a pseudo-terminal."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import anyio
import pytest

from tunnel.agents import PtySession, SessionError, create_session
from tunnel.agents.pty_agent import MAX_ITEM_CHARS
from tunnel.log import Log

from .conftest import Recording, process_exists, running

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

PYTHON = shlex.quote(sys.executable)


def pty_session(log: Log, workspace: Path, command: str) -> PtySession:
    session = create_session(f"pty:{command}", log, workspace=workspace, conversation_id="c1")
    assert isinstance(session, PtySession)
    return session


def output(rec: Recording) -> str:
    return "".join(i.data["text"] for i in rec.of_type("terminal"))


async def wait_output(rec: Recording, text: str) -> None:
    await rec.wait_until(lambda: text in output(rec))


async def test_typed_input_runs_and_its_output_comes_back(log: Log, workspace: Path) -> None:
    session = pty_session(log, workspace, f"{PYTHON} -i -q")
    assert session.info.kind == "terminal"
    async with running(session, log) as rec:
        await wait_output(rec, ">>> ")
        await session.input(b"print(6*7)\n", by="alice")
        await wait_output(rec, "42")
        assert all(i.created_by == "agent" for i in rec.of_type("terminal"))

        await session.resize(100, 30, by="alice")
        await session.input(b"import os; print(os.get_terminal_size())\n", by="bob")
        await wait_output(rec, "os.terminal_size(columns=100, lines=30)")

        await session.input(b"exit(5)\n", by="alice")
        exit_item = await rec.wait_item("terminal_exit")
        assert exit_item.data["code"] == 5
        with pytest.raises(SessionError) as gone:
            await session.input(b"x", by="alice")
        assert gone.value.code == "agent_unavailable"


async def test_a_prompt_is_typed_with_enter_and_restarts_an_exited_program(
    log: Log, workspace: Path
) -> None:
    session = pty_session(log, workspace, f"{PYTHON} -i -q")
    async with running(session, log) as rec:
        await wait_output(rec, ">>> ")
        await session.prompt("print('hi ' * 2)", by="alice")
        await wait_output(rec, "hi hi")
        user = rec.of_type("message")[0]
        assert (user.created_by, user.data["text"]) == ("alice", "print('hi ' * 2)")

        await session.input(b"exit(0)\n", by="alice")
        await rec.wait_item("terminal_exit")
        await session.prompt("print('back' + 'again')", by="bob")
        await wait_output(rec, "backagain")
        whats = [i.data["what"] for i in rec.of_type("session_event")]
        assert whats == ["agent_started", "agent_started"]


async def test_cancel_sends_ctrl_c_to_the_program(log: Log, workspace: Path) -> None:
    session = pty_session(log, workspace, f"{PYTHON} -i -q")
    async with running(session, log) as rec:
        await wait_output(rec, ">>> ")
        await session.input(b"import time; time.sleep(60)\n", by="alice")
        await anyio.sleep(0.3)
        await session.cancel(by="bob")
        await wait_output(rec, "KeyboardInterrupt")
        cancelled = rec.of_type("session_event")[-1]
        assert (cancelled.data["what"], cancelled.created_by) == ("cancelled", "bob")


async def test_a_multibyte_character_split_across_writes_is_kept_whole(
    log: Log, workspace: Path
) -> None:
    script = workspace / "split.py"
    script.write_text(
        "import sys, time\n"
        "data = 'h\\u00e9llo \\u20ac!'.encode()\n"
        "for i in range(len(data)):\n"
        "    sys.stdout.buffer.write(data[i:i+1]); sys.stdout.flush(); time.sleep(0.02)\n"
    )
    session = pty_session(log, workspace, f"{PYTHON} split.py")
    async with running(session, log) as rec:
        await rec.wait_item("terminal_exit")
        assert output(rec) == "h\u00e9llo \u20ac!"


async def test_fast_output_is_coalesced_into_bounded_items(log: Log, workspace: Path) -> None:
    lines = 4000
    session = pty_session(
        log, workspace, f"{PYTHON} -c 'for i in range({lines}): print(str(i).zfill(60))'"
    )
    async with running(session, log) as rec:
        exit_item = await rec.wait_item("terminal_exit")
        assert exit_item.data["code"] == 0
        chunks = [i.data["text"] for i in rec.of_type("terminal")]
        text = "".join(chunks)
        assert text.split("\r\n")[:-1] == [str(i).zfill(60) for i in range(lines)]
        assert all(len(c) <= MAX_ITEM_CHARS for c in chunks)
        # ~250 KB in far fewer items than lines.
        assert len(chunks) < lines / 10


async def test_a_missing_program_exits_with_127(log: Log, workspace: Path) -> None:
    session = pty_session(log, workspace, "/nonexistent/program")
    async with running(session, log) as rec:
        exit_item = await rec.wait_item("terminal_exit")
        assert exit_item.data["code"] == 127
        assert "/nonexistent/program" in output(rec)


async def test_resize_and_input_are_checked(log: Log, workspace: Path) -> None:
    session = pty_session(log, workspace, f"{PYTHON} -i -q")
    async with running(session, log) as rec:
        await wait_output(rec, ">>> ")
        for cols, rows in ((0, 24), (80, 0), (5000, 24)):
            with pytest.raises(SessionError) as bad:
                await session.resize(cols, rows, by="alice")
            assert bad.value.code == "bad_request"
        with pytest.raises(SessionError) as big:
            await session.input(b"x" * (1 << 20), by="alice")
        assert big.value.code == "bad_request"
        assert session.pending_permissions() == []
        with pytest.raises(SessionError) as unknown:
            await session.answer_permission("perm_x", "allow_once", by="alice")
        assert unknown.value.code == "unknown_request"


async def test_stopping_the_session_stops_the_program(log: Log, workspace: Path) -> None:
    session = pty_session(log, workspace, f"{PYTHON} -i -q")
    async with running(session, log) as rec:
        await wait_output(rec, ">>> ")
        pid = session.program_pid
        assert pid is not None
    assert session.program_pid is None
    assert not await process_exists(pid)
