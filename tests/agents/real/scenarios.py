"""What every real agent must do when shared, each written once and run by each agent's tests.

The agent's own tests script the model's turns (each agent has its own tools) and pass in what
differs between agents, such as the id of a permission option; these check the rest.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.host.teammate import Teammate
from tests.support import eventually
from tunnel.app.requests import Cancel, Prompt, SetMode

from .conftest import (
    Agent,
    AttachProcess,
    Session,
    StartSession,
    agent_said,
    agent_starts,
    asked,
    decisions,
    drive,
    permission_requests,
    settings_events,
)
from .model_server import ModelServer, Text, ToolCall, reply

ScriptEdit = Callable[[ModelServer, str, Path, str, str], None]
"""`script_edit(model, key, path, old, new)`: script the turn `key` as the agent's own edit of
`path`, replacing `old` with `new`, answered last with the text "`key` done."."""

__all__ = [
    "ScriptEdit",
    "allow_always_passes_the_next_edit",
    "asked_with_options",
    "cancel_mid_turn_then_prompt",
    "prompt_streams_to_everyone",
    "read_only_refuses_edits_and_commands",
    "recall_after_a_kill",
    "viewer_mode_switch_is_refused",
]


async def prompt_streams_to_everyone(
    alice: AttachProcess, vera: Teammate, model: ModelServer, text: str
) -> dict[str, Any]:
    """The model's scripted "HELLO-1" reply `text`, to a prompt alice types, is printed by her
    attach and stored for vera; the prompt reached the model as typed. Returns the data of the
    agent's `agent_started` event."""
    model.script("HELLO-1", reply(Text(text)))
    alice.type("HELLO-1: say hello")
    await alice.output.wait_for("agent: " + re.escape(text))
    await vera.wait_for(agent_said(text))
    assert model.saw_text("HELLO-1: say hello")
    return agent_starts(vera)[0]


async def asked_with_options(
    alice: AttachProcess, vera: Teammate, line: str, options: list[tuple[str, str]]
) -> dict[str, Any]:
    """Alice types `line`; the permission request it raises reaches vera with the agent's own
    `options` (id, kind), in its order. Returns the request's data."""
    await asked(alice, vera, line)
    request: dict[str, Any] = permission_requests(vera)[0]["data"]
    assert [(o["option_id"], o["kind"]) for o in request["options"]] == options
    return request


async def allow_always_passes_the_next_edit(
    share: StartSession,
    agent: Agent,
    model: ModelServer,
    script_edit: ScriptEdit,
    option_id: str,
) -> None:
    """An edit of notes.txt (milk to bread) asks and is allowed always (the agent's option
    `option_id`); the next (bread to butter) is then applied without asking."""
    async with share(agent) as session, session.teammate("vera") as vera:
        notes = session.workspace / "notes.txt"
        script_edit(model, "EDIT-ALWAYS-1", notes, "milk", "bread")
        script_edit(model, "EDIT-ALWAYS-2", notes, "bread", "butter")
        alice = await drive(session)
        await asked(alice, vera, "EDIT-ALWAYS-1")
        alice.type("/allow always")
        await vera.wait_for(agent_said("EDIT-ALWAYS-1 done."))
        assert decisions(vera)[0]["option_id"] == option_id
        alice.type("EDIT-ALWAYS-2")
        await vera.wait_for(agent_said("EDIT-ALWAYS-2 done."))
        assert len(permission_requests(vera)) == 1
        assert notes.read_text() == "remember the butter\n"


async def cancel_mid_turn_then_prompt(
    share: StartSession, model: ModelServer, agent: Agent
) -> None:
    """A driver cancels a turn while the model is still streaming it: the agent hangs up on the
    model, and the next prompt is answered in its own turn."""
    model.script("SLOW-TURN", reply(Text("Thinking very slowly about it..."), hold=True))
    model.script("AFTER-CANCEL", reply(Text("Back again.")))
    async with share(agent) as session, session.teammate("alice", drive=True) as alice:
        await alice.send(Prompt(text="SLOW-TURN"))
        assert await eventually(model.holding, attempts=300)
        await alice.send(Cancel())
        await alice.wait_for(lambda t: t.item_of("session_event", what="cancelled") is not None)
        assert await eventually(lambda: model.calls("SLOW-TURN")[-1].hung_up, attempts=300)
        # The session goes on: the next prompt is answered (claude-agent-acp before 0.24 answered
        # it a turn late: agentclientprotocol/claude-agent-acp#551).
        await alice.send(Prompt(text="AFTER-CANCEL"))
        await alice.wait_for(agent_said("Back again."))


async def viewer_mode_switch_is_refused(viewer: Teammate, mode: str) -> None:
    """The session starts in the agent's "default" mode, and `viewer` may not switch to `mode`."""
    await viewer.wait_for(lambda t: bool(settings_events(t)))
    assert settings_events(viewer)[-1]["modes"]["current"] == "default"
    await viewer.send(SetMode(mode_id=mode))
    await viewer.wait_for(lambda t: bool(t.errors))
    assert viewer.errors[0]["code"] == "forbidden"


async def recall_after_a_kill(
    session: Session, alice: Teammate, answer: str
) -> list[dict[str, Any]]:
    """The agent is killed after a turn, and the host restarts it for alice's next prompt
    ("RECALL-1", scripted to answer `answer`). Returns the data of the two `agent_started`
    events."""
    session.host.kill_agent()
    await alice.wait_for(lambda t: t.item_of("session_event", what="agent_exited") is not None)
    await alice.send(Prompt(text="RECALL-1: what is the password?"))
    await alice.wait_for(agent_said(answer))
    started = agent_starts(alice)
    assert len(started) == 2
    return started


async def read_only_refuses_edits_and_commands(
    share: StartSession,
    agent: Agent,
    model: ModelServer,
    tools: tuple[str, str, str],
    edit_args: dict[str, str] | None = None,
) -> None:
    """Under `--approvals read-only`, the scripted turn "READ-ONLY" reads notes.txt, then edits
    it (milk to bread) and runs `echo ran > shell.txt`: the read passes, the host refuses the
    edit and the command itself (no human is asked), and the workspace is untouched. `tools`
    are the agent's names for its read, edit and shell tools, `edit_args` what its edit tool
    takes besides the file and the strings."""
    read, edit, shell = tools
    async with share(agent, "--approvals", "read-only") as session, session.teammate() as vera:
        notes = session.workspace / "notes.txt"
        model.script(
            "READ-ONLY",
            reply(ToolCall(read, {"file_path": str(notes)})),
            reply(
                ToolCall(
                    edit,
                    {
                        "file_path": str(notes),
                        "old_string": "milk",
                        "new_string": "bread",
                        **(edit_args or {}),
                    },
                )
            ),
            reply(ToolCall(shell, {"command": "echo ran > shell.txt", "description": "Write"})),
            reply(Text("READ-ONLY done.")),
        )
        async with session.teammate("alice", drive=True) as alice:
            await alice.send(Prompt(text="READ-ONLY"))
            await vera.wait_for(agent_said("READ-ONLY done."), within=60)
        kinds = [r["data"]["tool_call"].get("kind") for r in permission_requests(vera)]
        assert "edit" in kinds, kinds
        assert "execute" in kinds, kinds
        decided = [i for i in vera.items if i["type"] == "permission_decision"]
        assert decided, vera.items
        for item in decided:
            assert item["created_by"] == "policy"
            assert item["data"]["policy"]["source"] == "preset:read-only"
        refused = {
            r["data"]["tool_call"].get("kind")
            for r in permission_requests(vera)
            for d in decided
            if d["data"]["request_id"] == r["data"]["request_id"]
            and d["data"]["option_kind"].startswith("reject")
        }
        assert {"edit", "execute"} <= refused
        assert notes.read_text() == "remember the milk\n"
        assert not (session.workspace / "shell.txt").exists()
        results = {r.name: r for r in model.tool_results("READ-ONLY")}
        assert not results[read].is_error, results[read].output
        assert "milk" in results[read].output
        assert results[edit].is_error
        assert results[shell].is_error
