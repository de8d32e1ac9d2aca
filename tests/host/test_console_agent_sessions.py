"""The host console lists an ACP agent's own past sessions (`/sessions NAME`) and starts a
conversation that resumes one (`/resume NAME SESSION_ID`); a teammate attached to it sees it
resumed, and mistakes are one line each.

A real `tunnel host --interactive` of two agents (the fake ACP agent keeping its sessions on
disk and offering `session/list`, and the demo), its console typed into through stdin, a real
relay, and a scripted teammate.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import anyio
import pytest

from tests.host import host_process
from tests.host.conftest import FAKE_ACP_AGENT
from tests.host.host_process import HostProcess
from tests.host.teammate import attached
from tests.support import RelayProcess

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

ID = r"c-[0-9a-f]{8}"


async def _output(host: HostProcess, pattern: str) -> re.Match[str]:
    return await anyio.to_thread.run_sync(host.wait_output, pattern)


def _journal(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def test_the_host_resumes_a_past_session_of_the_agents_in_a_new_conversation(
    relay: RelayProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    journal = tmp_path / "journal"
    monkeypatch.setitem(host_process.ENV, "FAKE_ACP_STATE", str(state))
    monkeypatch.setitem(host_process.ENV, "FAKE_ACP_LIST", "1")
    monkeypatch.setitem(host_process.ENV, "FAKE_ACP_JOURNAL", str(journal))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    fake = shlex.join([sys.executable, str(FAKE_ACP_AGENT)])
    host = HostProcess(
        relay.url,
        tmp_path,
        agent=f"fake=acp:{fake}",
        workspace=workspace,
        log_db=tmp_path / "log.db",
        extra=("--agent", "demo=demo"),
    ).start()
    try:
        # The first conversation makes a session the agent keeps.
        host.type("one")
        await _output(host, r"echo: one")
        (first,) = [e["sessionId"] for e in _journal(journal) if e["method"] == "session/new"]

        host.type("/sessions fake")
        await _output(host, r"1 past sessions of fake here \(/resume fake ID resumes one\):")
        await _output(host, rf"{first}  one, updated 2026-01-02T03:04:05Z")
        listed = [e for e in _journal(journal) if e["method"] == "session/list"]
        assert [e["cwd"] for e in listed] == [str(workspace.resolve())]

        # Mistakes: one line each, and no conversation started.
        host.type("/sessions demo")
        await _output(host, r"(?m)^demo is not an ACP agent: it keeps no sessions to resume$")
        host.type("/resume demo x")
        await _output(host, r"(?s)keeps no sessions to resume.*keeps no sessions to resume")
        host.type("/sessions nobody")
        await _output(host, r"(?m)^no agent nobody here; this host offers fake, demo$")
        host.type("/resume fake s-nope")
        refused = await _output(
            host,
            r"(?m)^the agent fake could not start: it did not resume session s-nope: (.+)$",
        )
        assert "s-nope" in refused.group(1)
        host.type("/list")
        await _output(host, r"1 conversations open")

        # The past session, resumed in a new conversation that the console then shows.
        host.type(f"/resume fake {first}")
        found = await _output(
            host, rf"started conversation ({ID}) with fake, resuming its session {first}"
        )
        resumed = found.group(1)
        await _output(host, rf"showing conversation {resumed} \(fake\)")
        await _output(
            host,
            rf"hannah started this conversation with fake, resuming the agent's session {first}",
        )
        loads = [e for e in _journal(journal) if e["method"] == "session/load"]
        assert [e["sessionId"] for e in loads] == ["s-nope", first]
        host.type("remember")
        # The agent remembers the first conversation's prompt: its own session, loaded.
        await _output(host, r"I remember 1 prompts")
        prompts = [e for e in _journal(journal) if e["method"] == "session/prompt"]
        assert [e["sessionId"] for e in prompts] == [first, first]
        assert prompts[0]["pid"] != prompts[1]["pid"]

        async with attached(host.drive_link, "ann", conversation=resumed, after=-1) as ann:
            await ann.wait_for(lambda t: t.item_of("message", role="agent") is not None)
            started = ann.item_of("session_event", what="conversation_started")
            assert started is not None
            assert started["data"]["resume"] == first
            assert started["created_by"] == "hannah"
            agent = ann.item_of("session_event", what="agent_started")
            assert agent is not None
            assert agent["data"]["session_id"] == first
            assert agent["data"]["resumed"] is True
            assert agent["data"]["resumed_with"] == "session/load"
            # The replay of the load is not recorded: the first prompt is not in this log.
            texts = [i["data"].get("text") for i in ann.items if i["type"] == "message"]
            assert "one" not in texts
            assert "echo: one" not in texts
    finally:
        host.stop()


async def test_past_sessions_need_a_running_conversation_of_an_agent_that_lists_them(
    relay: RelayProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An agent that offers no session/list, and another declared agent that runs nowhere yet.
    monkeypatch.delitem(host_process.ENV, "FAKE_ACP_LIST", raising=False)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    fake = shlex.join([sys.executable, str(FAKE_ACP_AGENT)])
    host = HostProcess(
        relay.url,
        tmp_path,
        agent=f"fake=acp:{fake}",
        workspace=workspace,
        log_db=tmp_path / "log.db",
        extra=("--agent", f"other=acp:{fake}", "--max-conversations", "1"),
    ).start()
    try:
        host.type("/sessions fake")
        await _output(host, r"(?m)^fake-agent does not list its sessions \(no session/list\)$")
        host.type("/sessions other")
        await _output(host, r"(?m)^start a conversation with other first \(/new other\)$")
        host.type("/resume other s-1")
        await _output(host, r"(?m)^1 conversations are open, the most this host runs")
    finally:
        host.stop()
