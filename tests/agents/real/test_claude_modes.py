"""Claude Code's starting mode and what a restarted Claude is given back, through a real relay.

claude-agent-acp 0.101.0 starts in `auto` (nobody is asked) unless told otherwise: the host's
`--agent-mode` or an approval policy that needs requests asked puts it in a mode that asks, and
every teammate is told whether the mode asks. A killed Claude is restarted in the model and mode
the conversation had chosen, as the model's requests show.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tunnel.app.requests import Prompt, SetMode, SetModel

from .conftest import (
    CLAUDE,
    CLAUDE_AS_INSTALLED,
    StartSession,
    agent_said,
    agent_starts,
    asked,
    decisions,
    drive,
    settings_events,
)
from .model_server import ModelServer, Text, ToolCall, reply

pytestmark = [pytest.mark.anyio, pytest.mark.agents_real, pytest.mark.timeout(120)]

ASKS = {"asks": True, "text": "asks before edits and commands"}


@pytest.mark.parametrize(
    "host_args",
    [("--agent-mode", "default"), ("--approvals", "trust-reads")],
    ids=["agent-mode", "policy"],
)
async def test_a_new_file_asks_everyone_when_the_host_starts_claude_in_a_mode_that_asks(
    share: StartSession, model: ModelServer, workspace: Path, host_args: tuple[str, ...]
) -> None:
    new = workspace / "new.txt"
    model.script(
        "WRITE-NEW",
        reply(ToolCall("Write", {"file_path": str(new), "content": "fresh\n"})),
        reply(Text("WRITE-NEW done.")),
    )
    async with share(CLAUDE_AS_INSTALLED, *host_args) as session, session.teammate() as vera:
        await vera.wait_for(lambda t: bool(settings_events(t)))
        told = settings_events(vera)[-1]
        assert told["modes"]["current"] == "default"
        assert told["approval"] == ASKS
        # Claude would have started in "auto"; it never ran a turn there.
        assert "auto" in [m["id"] for m in told["modes"]["available"]]
        alice = await drive(session)
        await alice.output.wait_for("the agent asks before edits and commands")
        await asked(alice, vera, "WRITE-NEW")
        assert not new.exists()
        alice.type("/allow")
        await vera.wait_for(agent_said("WRITE-NEW done."))
        assert new.read_text() == "fresh\n"
        assert decisions(vera)[0]["option_id"] == "allow-once"


async def test_a_killed_claude_is_restarted_in_the_model_and_mode_the_conversation_chose(
    share: StartSession, model: ModelServer
) -> None:
    model.script("BEFORE-KILL", reply(Text("Before.")))
    model.script("AFTER-KILL", reply(Text("After.")))
    async with share(CLAUDE) as session, session.teammate("alice", drive=True) as alice:
        await alice.wait_for(lambda t: bool(settings_events(t)))
        models = settings_events(alice)[-1]["models"]
        chosen = next(m["id"] for m in models["available"] if m["id"] != models["current"])
        await alice.send(SetModel(model_id=chosen))
        await alice.send(SetMode(mode_id="plan"))
        await alice.wait_for(lambda t: settings_events(t)[-1]["modes"]["current"] == "plan")
        assert settings_events(alice)[-1]["models"]["current"] == chosen
        await alice.send(Prompt(text="BEFORE-KILL"))
        await alice.wait_for(agent_said("Before."))
        before = model.calls("BEFORE-KILL")[-1].body
        assert "Plan mode is active" in json.dumps(before)

        session.host.kill_agent()
        await alice.wait_for(lambda t: t.item_of("session_event", what="agent_exited") is not None)
        # Claude would resume its transcript in the model and mode it had: without one, the
        # restarted agent starts afresh ("default", its default model), and only the host can
        # bring back what the conversation chose.
        shutil.rmtree(session.home / ".claude" / "projects")
        await alice.send(Prompt(text="AFTER-KILL"))
        await alice.wait_for(agent_said("After."))
        assert agent_starts(alice)[1]["resumed"] is False
        after = model.calls("AFTER-KILL")[-1].body
        # The restarted Claude asks the model the conversation chose, in plan mode.
        assert after["model"] == before["model"]
        assert "Plan mode is active" in json.dumps(after)
        latest = settings_events(alice)[-1]
        assert (latest["modes"]["current"], latest["models"]["current"]) == ("plan", chosen)
