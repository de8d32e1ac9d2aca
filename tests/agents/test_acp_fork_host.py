"""A fork made by a teammate through a real relay and a real `tunnel host` process, whose agent is
the fake ACP agent: the fork's agent continues from the fork point in a session of its own (the
agent's fork of the source's session, or a new one given the transcript), never the source's, and
resumes that one after the host restarts."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.host.host_process import HostProcess
from tests.host.teammate import Teammate, attached
from tests.support import RelayProcess
from tunnel.app.requests import Fork, Prompt

from .test_acp import FAKE_AGENT
from .test_acp_fork import calls

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


def _said(teammate: Teammate, text: str) -> bool:
    return any(
        i["type"] == "message" and i["data"].get("role") == "agent" and i["data"]["text"] == text
        for i in teammate.items
    )


def _own_starts(teammate: Teammate, boundary: int) -> list[dict[str, Any]]:
    return [
        i["data"]
        for i in teammate.items
        if i["seq"] > boundary
        and i["type"] == "session_event"
        and i["data"].get("what") == "agent_started"
    ]


@pytest.mark.parametrize("fork_offered", [True, False], ids=["session-fork", "transcript"])
async def test_a_forked_conversations_agent_continues_from_the_fork_in_its_own_session(
    tmp_path: Path, fork_offered: bool
) -> None:
    state = tmp_path / "agent-state"
    state.mkdir()
    journal = tmp_path / "journal.jsonl"
    variables = [f"FAKE_ACP_STATE={state}", f"FAKE_ACP_JOURNAL={journal}"]
    if fork_offered:
        variables.append("FAKE_ACP_FORK=1")
    command = shlex.join(["env", *variables, sys.executable, str(FAKE_AGENT)])
    workspace = tmp_path / "ws"
    workspace.mkdir()
    relay = RelayProcess(tmp_path).start()
    host = HostProcess(
        relay.url,
        tmp_path,
        agent=f"fake=acp:{command}",
        workspace=workspace,
        log_db=tmp_path / "log.db",
        interactive=False,
    )
    try:
        host.start()
        async with attached(host.drive_link, "ann", conversation="main") as ann:
            await ann.wait_for(lambda t: t.snapshot_done)
            for text in ("one", "two"):
                await ann.send(Prompt(text=text))
                await ann.wait_for(lambda t, text=text: _said(t, f"echo: {text}"))
            main_session = ann.item_of("session_event", what="agent_started")
            assert main_session is not None
            source_session = main_session["data"]["session_id"]
            upto = max(ann.seqs())
            await ann.send(Fork(conversation="main", upto=upto))
            await ann.wait_for(lambda t: t.started)
            fork = ann.started[0]

        async with attached(host.drive_link, "bo", conversation=fork, after=-1) as bo:
            boundary = upto + 1
            await bo.wait_for(lambda t: _own_starts(t, boundary))
            started = _own_starts(bo, boundary)[0]
            own = started["session_id"]
            assert own != source_session
            assert started["forked_from"] == "main"
            await bo.send(Prompt(text="remember"))
            if fork_offered:
                assert started["forked"] == "session_fork"
                assert started["forked_session"] == source_session
                # The agent's own fork remembers the source's two prompts.
                await bo.wait_for(lambda t: _said(t, "I remember 2 prompts"))
                assert [c["sessionId"] for c in calls(journal, "session/fork")] == [source_session]
            else:
                assert started["forked"] == "transcript"
                await bo.wait_for(lambda t: _said(t, "I remember 0 prompts"))
                (prompt,) = [c for c in calls(journal, "session/prompt") if c["sessionId"] == own]
                transcript = prompt["blocks"][-1]["resource"]["text"]
                assert "ann: one\nagent: echo: one\nann: two\nagent: echo: two" in transcript
        # Nobody loaded or resumed the source's session: its own agent still runs it.
        assert calls(journal, "session/load") == []

        host.stop()
        host.start()
        async with attached(host.drive_link, "bo", conversation=fork, after=-1) as bo:
            await bo.wait_for(lambda t: len(_own_starts(t, boundary)) == 2)
            again = _own_starts(bo, boundary)[1]
            assert (again["session_id"], again["resumed"]) == (own, True)
            await bo.send(Prompt(text="remember"))
            remembered = 3 if fork_offered else 1
            await bo.wait_for(lambda t: _said(t, f"I remember {remembered} prompts"))
        # Each conversation loaded its own session once: the fork never the source's.
        loaded = sorted(c["sessionId"] for c in calls(journal, "session/load"))
        assert loaded == sorted([source_session, own])
    finally:
        host.stop()
        relay.stop()
