"""What a restarted Gemini CLI, Codex or Qwen Code is given back, through a real relay.

A killed agent whose own saved session is gone starts afresh, in its own default mode and model:
only the host can bring back the mode and model the conversation chose, as the model's requests
show. (Claude Code: tests/agents/real/test_claude_modes.py.) Qwen Code offers one model, the one
its provider settings name, so only its mode is chosen.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from tunnel.app.requests import Prompt, SetMode, SetModel

from .conftest import (
    CODEX,
    GEMINI,
    QWEN,
    Agent,
    StartSession,
    agent_said,
    agent_starts,
    settings_events,
)
from .model_server import ModelServer, Recorded, Text, reply

pytestmark = [pytest.mark.anyio, pytest.mark.agents_real, pytest.mark.timeout(180)]


@dataclass(frozen=True)
class Case:
    agent: Agent
    mode: str
    """A mode the agent does not start in."""
    in_mode: str
    """What the agent tells the model in that mode, and not in the one it starts in."""
    saved: str
    """Where the agent keeps its sessions, under the home directory."""
    model: str | None = None
    """A model the agent does not start with; None: it offers no other."""
    model_of: Callable[[Recorded], str] = lambda call: str(call.body["model"])
    """The model a request to the fake model asked for."""


CASES = [
    pytest.param(
        Case(
            GEMINI,
            "plan",
            "# Active Approval Mode: Plan",
            ".gemini/tmp",
            "gemini-2.5-pro",
            lambda call: call.path.split("/models/")[1].split(":")[0],
        ),
        id="gemini",
    ),
    pytest.param(
        Case(CODEX, "read-only", "`sandbox_mode` is `read-only`", ".codex/sessions", "gpt-5.4"),
        id="codex",
    ),
    pytest.param(Case(QWEN, "plan", "Plan mode is active", ".qwen/projects"), id="qwen"),
]


@pytest.mark.parametrize("case", CASES)
async def test_a_killed_agent_is_restarted_in_the_mode_and_model_the_conversation_chose(
    share: StartSession, model: ModelServer, case: Case
) -> None:
    model.script("BEFORE-CHOICE", reply(Text("Before the choice.")))
    model.script("BEFORE-KILL", reply(Text("Before.")))
    model.script("AFTER-KILL", reply(Text("After.")))
    async with share(case.agent) as session, session.teammate("alice", drive=True) as alice:
        await alice.wait_for(lambda t: bool(settings_events(t)))
        started_in = settings_events(alice)[-1]
        assert case.mode != started_in["modes"]["current"]
        await alice.send(Prompt(text="BEFORE-CHOICE"))
        await alice.wait_for(agent_said("Before the choice."))
        first = model.calls("BEFORE-CHOICE")[-1]
        assert case.in_mode not in json.dumps(first.body)
        if case.model is not None:
            assert case.model != case.model_of(first)
            await alice.send(SetModel(model_id=case.model))
        await alice.send(SetMode(mode_id=case.mode))
        await alice.wait_for(lambda t: settings_events(t)[-1]["modes"]["current"] == case.mode)
        await alice.send(Prompt(text="BEFORE-KILL"))
        await alice.wait_for(agent_said("Before."))
        before = model.calls("BEFORE-KILL")[-1]
        assert case.in_mode in json.dumps(before.body)

        session.host.kill_agent()
        await alice.wait_for(lambda t: t.item_of("session_event", what="agent_exited") is not None)
        # Without its saved session the restarted agent starts afresh.
        shutil.rmtree(session.home / case.saved)
        await alice.send(Prompt(text="AFTER-KILL"))
        # Gemini CLI loads no session in the minute it was created: the host waits for the
        # next one before trying (docs/agents.md), so this can take a minute.
        await alice.wait_for(agent_said("After."), within=90)
        assert agent_starts(alice)[1]["resumed"] is False
        after = model.calls("AFTER-KILL")[-1]
        assert case.in_mode in json.dumps(after.body)
        latest = settings_events(alice)[-1]
        assert latest["modes"]["current"] == case.mode
        if case.model is not None:
            assert case.model_of(before) == case.model_of(after) == case.model
            assert latest["models"]["current"] == case.model
