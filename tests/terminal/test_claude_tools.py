"""What attach shows of tools reported as Claude Code's adapter reports them: a scripted ACP agent
(claude_tools_acp_agent.py) runs in a real session, and what a subscriber receives is fed to a
`Transcript`, as attach feeds it."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.agents.conftest import Recording, running
from tests.terminal.test_transcript import Screen
from tunnel.agents import create_session
from tunnel.log import Item, Log, MemoryStore
from tunnel.terminal.transcript import Transcript

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

AGENT = Path(__file__).with_name("claude_tools_acp_agent.py")


@pytest.fixture
async def log() -> AsyncIterator[Log]:
    the_log = Log(MemoryStore())
    try:
        yield the_log
    finally:
        await the_log.aclose()


def shown(recording: Recording, *, live: bool) -> str:
    screen = Screen(live=live)
    transcript = Transcript(screen, markdown=False)
    for entry in recording.entries:
        if isinstance(entry, Item):
            transcript.item(entry.to_wire())
        else:
            transcript.event(entry.to_wire())
    return screen.text()


async def turn(log: Log, tmp_path: Path, prompt: str, *, cancel: bool = False) -> Recording:
    session = create_session(
        f"acp:{sys.executable} {AGENT}", log, workspace=tmp_path, conversation_id="c1"
    )
    async with running(session, log) as rec:
        await rec.wait_item("session_event", what="agent_started")
        await session.prompt(prompt, by="alice")
        if prompt == "edit":
            request = await rec.wait_item("permission_request")
            await session.answer_permission(request.data["request_id"], "yes", by="alice")
        if cancel:
            await rec.wait_item("tool_call")
            await session.cancel(by="alice")
            await rec.wait_item("session_event", what="turn_ended")
            # The agent says the call failed after its turn ended, as Claude's adapter does.
            await rec.wait_item("tool_call_update", status="failed")
        else:
            await rec.wait_item("message", text="done")
        await rec.wait_idle()
    return rec


async def test_fenced_read_and_bash_results_show_their_code_without_fences(
    log: Log, tmp_path: Path
) -> None:
    rec = await turn(log, tmp_path, "read")
    for live in (True, False):
        text = shown(rec, live=live)
        assert "```" not in text, text
        assert "2      return '<b>[bold]x[/bold]</b>'" in text
        assert "$ echo hi\nhi" in text


async def test_a_diff_sent_with_the_call_its_request_and_its_end_is_printed_once(
    log: Log, tmp_path: Path
) -> None:
    rec = await turn(log, tmp_path, "edit")
    for live in (True, False):
        text = shown(rec, live=live)
        assert text.count("+y = 2") == 1, text


async def test_after_a_cancel_the_open_tool_reads_failed_as_on_the_page(
    log: Log, tmp_path: Path
) -> None:
    rec = await turn(log, tmp_path, "wait", cancel=True)
    for live in (True, False):
        text = shown(rec, live=live)
        after = text[text.index("the turn was cancelled") :]
        assert "tool sleep 60 · execute · failed" in after, text
        assert "pending" not in after, text
        assert text.count("· failed") == 1, text
