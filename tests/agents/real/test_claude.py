"""Claude Code (claude-agent-acp) shared through a real relay and driven with `tunnel attach`.

The model is `ModelServer`: each test scripts what the model answers, the agent does the rest for
real (its own tools edit files and run commands, its own permission options are offered).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import eventually
from tunnel.app.requests import Prompt

from . import scenarios
from .conftest import (
    CLAUDE,
    StartSession,
    agent_said,
    asked,
    decisions,
    drive,
    driven,
    permission_requests,
    settings_events,
)
from .model_server import ModelServer, Text, ToolCall, reply

pytestmark = [pytest.mark.anyio, pytest.mark.agents_real, pytest.mark.timeout(120)]

CLAUDE_OPTIONS = [
    ("allow-once", "allow_once"),
    ("allow-with-updates", "allow_always"),
    ("reject", "reject_once"),
]
"""Claude's permission options (id, kind), in its order; the second's name names the scope."""


def _script_edit(model: ModelServer, key: str, path: Path, old: str, new: str) -> None:
    """A turn that reads `path`, then edits it (Claude Code edits only files it has read)."""
    model.script(
        key,
        reply(ToolCall("Read", {"file_path": str(path)})),
        reply(ToolCall("Edit", {"file_path": str(path), "old_string": old, "new_string": new})),
        reply(Text(f"{key} done.")),
    )


async def test_a_prompt_typed_in_attach_streams_the_models_reply_to_everyone(
    share: StartSession, model: ModelServer
) -> None:
    async with driven(share(CLAUDE)) as (_, vera, alice):
        text = "Hello from the fake model, streamed in chunks."
        started = await scenarios.prompt_streams_to_everyone(alice, vera, model, text)
        assert (started["agent"], started["version"]) == ("Claude Agent", "0.101.0")
        deltas = [e["data"] for e in vera.events if e["kind"] == "delta"]
        assert any(d.get("channel") == "message" for d in deltas), vera.events[:10]
        # Nothing left loopback.
        assert all(stray.startswith("CONNECT ") for stray in model.strays)


async def test_allow_once_applies_the_edit_once_and_the_next_edit_asks_again(
    share: StartSession, model: ModelServer, workspace: Path
) -> None:
    notes = workspace / "notes.txt"
    _script_edit(model, "EDIT-ONCE-1", notes, "milk", "bread")
    _script_edit(model, "EDIT-ONCE-2", notes, "bread", "butter")
    async with driven(share(CLAUDE)) as (_, vera, alice):
        request = await scenarios.asked_with_options(alice, vera, "EDIT-ONCE-1", CLAUDE_OPTIONS)
        # The tool call asked about is stored whole: what it is, where, and the diff.
        call = request["tool_call"]
        assert (call["kind"], call["title"]) == ("edit", "Edit notes.txt")
        assert call["input"]["old_string"] == "milk"
        assert {"type": "diff", "path": str(notes), "old_text": "milk", "new_text": "bread"} in (
            call["content"]
        )
        assert notes.read_text() == "remember the milk\n"
        alice.type("/allow")
        await vera.wait_for(agent_said("EDIT-ONCE-1 done."))
        assert decisions(vera)[0]["option_id"] == "allow-once"
        assert notes.read_text() == "remember the bread\n"
        result = model.tool_results("EDIT-ONCE-1")[-1]
        assert (result.name, result.is_error) == ("Edit", False)

        # Allowed once: the next edit asks again.
        await asked(alice, vera, "EDIT-ONCE-2", count=2)
        alice.type("/allow 1")  # the first option as listed: "Yes", once
        await vera.wait_for(agent_said("EDIT-ONCE-2 done."))
        assert decisions(vera)[1]["option_id"] == "allow-once"
        assert notes.read_text() == "remember the butter\n"


async def test_deny_leaves_the_file_and_the_model_is_told_it_was_refused(
    share: StartSession, model: ModelServer, workspace: Path
) -> None:
    notes = workspace / "notes.txt"
    _script_edit(model, "EDIT-DENY", notes, "milk", "bread")
    async with driven(share(CLAUDE)) as (_, vera, alice):
        await asked(alice, vera, "EDIT-DENY")
        alice.type("/deny")
        await vera.wait_for(agent_said("EDIT-DENY done."))
        assert decisions(vera)[0]["option_id"] == "reject"
        assert notes.read_text() == "remember the milk\n"
        result = model.tool_results("EDIT-DENY")[-1]
        assert (result.name, result.is_error) == ("Edit", True)
        assert "refused" in result.output


async def test_allow_always_lets_later_edits_through_without_asking(
    share: StartSession, model: ModelServer
) -> None:
    await scenarios.allow_always_passes_the_next_edit(
        share, CLAUDE, model, _script_edit, "allow-with-updates"
    )


async def test_a_new_file_and_a_shell_command_run_once_allowed(
    share: StartSession, model: ModelServer, workspace: Path
) -> None:
    model.script(
        "WRITE-NEW",
        reply(ToolCall("Write", {"file_path": str(workspace / "new.txt"), "content": "fresh\n"})),
        reply(Text("WRITE-NEW done.")),
    )
    model.script(
        "RUN-SHELL",
        reply(ToolCall("Bash", {"command": "echo ran > shell.txt", "description": "Write a file"})),
        reply(Text("RUN-SHELL done.")),
    )
    async with driven(share(CLAUDE)) as (_, vera, alice):
        await asked(alice, vera, "WRITE-NEW")
        alice.type("/allow")
        await vera.wait_for(agent_said("WRITE-NEW done."))
        assert (workspace / "new.txt").read_text() == "fresh\n"

        await asked(alice, vera, "RUN-SHELL", count=2)
        assert permission_requests(vera)[1]["data"]["title"] == "echo ran > shell.txt"
        alice.type("/allow")
        await vera.wait_for(agent_said("RUN-SHELL done."))
        assert (workspace / "shell.txt").read_text() == "ran\n"
        assert [d["option_id"] for d in decisions(vera)] == ["allow-once", "allow-once"]


async def test_read_only_approvals_let_reads_pass_and_refuse_edits_and_commands(
    share: StartSession, model: ModelServer
) -> None:
    await scenarios.read_only_refuses_edits_and_commands(
        share, CLAUDE, model, ("Read", "Edit", "Bash")
    )


async def test_cancel_mid_turn_stops_the_model_call_and_the_next_prompt_runs(
    share: StartSession, model: ModelServer
) -> None:
    await scenarios.cancel_mid_turn_then_prompt(share, model, CLAUDE)


async def test_a_drivers_mode_switch_takes_effect_and_a_viewers_is_refused(
    share: StartSession, model: ModelServer, workspace: Path
) -> None:
    model.script(
        "PLAN-TURN",
        reply(ToolCall("ExitPlanMode", {"plan": "1. Replace milk with bread in notes.txt"})),
        reply(Text("PLAN-TURN done.")),
    )
    async with share(CLAUDE) as session, session.teammate("vera") as vera:
        await scenarios.viewer_mode_switch_is_refused(vera, "plan")
        alice = await drive(session)
        alice.type("/mode plan")
        await vera.wait_for(lambda t: settings_events(t)[-1]["modes"]["current"] == "plan")
        switch = next(i for i in vera.items if i["data"].get("change") == {"mode": "plan"})
        assert switch["created_by"] == "alice"

        # Plan mode reached Claude Code: the model is told, and leaving it asks permission.
        await asked(alice, vera, "PLAN-TURN")
        assert model.saw_text("Plan mode is active")
        options = permission_requests(vera)[0]["data"]["options"]
        # Leave plan mode asking before each edit (allow once), or in a mode that does not.
        assert {"exit-plan-default", "exit-plan-auto", "reject"} <= {
            o["option_id"] for o in options
        }
        alice.type("/allow")  # the allow-once option: "manually approve edits", mode default
        await vera.wait_for(agent_said("PLAN-TURN done."))
        assert decisions(vera)[0]["option_id"] == "exit-plan-default"
        await vera.wait_for(lambda t: settings_events(t)[-1]["modes"]["current"] == "default")
        assert (workspace / "notes.txt").read_text() == "remember the milk\n"


async def test_the_agents_commands_show_in_attach_and_a_slash_command_goes_to_it(
    share: StartSession, model: ModelServer, workspace: Path
) -> None:
    commands = workspace / ".claude" / "commands"
    commands.mkdir(parents=True)
    (commands / "shout.md").write_text(
        "---\ndescription: Say it loudly\n---\nSHOUT-MARKER: say this loudly: $ARGUMENTS\n"
    )
    model.script("SHOUT-MARKER", reply(Text("LOUD AND CLEAR.")))
    async with share(CLAUDE) as session, session.teammate("vera") as vera:
        alice = session.attach("alice")
        listed = await alice.output.wait_for(r"the agent's commands: (.*)")
        assert "/shout" in listed.group(1).split(", ")
        alice.type("/shout hello there")
        await vera.wait_for(agent_said("LOUD AND CLEAR."))
        prompt = vera.item_of("message", role="user")
        assert prompt is not None
        assert (prompt["data"]["text"], prompt["created_by"]) == ("/shout hello there", "alice")
        # Claude Code expanded its own command before asking the model.
        assert model.saw_text("SHOUT-MARKER: say this loudly: hello there")


async def test_claudes_own_model_switch_and_session_title_reach_everyone(
    share: StartSession,
) -> None:
    """Claude Code's own `/model` and `/rename`, typed in attach (`//` sends a slash command
    to the agent): the switch comes back as `config_option_update`, recorded as the agent's own
    settings and printed by attach; the title as `session_info_update`, recorded as a `title`
    session event and printed by attach (docs/agents.md)."""
    async with driven(share(CLAUDE)) as (_, vera, alice):
        await vera.wait_for(lambda t: bool(settings_events(t)))
        assert settings_events(vera)[-1]["models"]["current"] == "default"
        mark = alice.output.mark()
        alice.type("//model sonnet")
        await alice.output.wait_for(r"agent settings .*model: sonnet \(Sonnet", start=mark)
        # Alice's line and Vera's item come over different channels: wait for Vera's too.
        await vera.wait_for(lambda t: settings_events(t)[-1]["models"]["current"] == "sonnet")
        switched = [i for i in vera.items if i["data"].get("what") == "settings"][-1]
        assert switched["created_by"] == "agent"
        assert "change" not in switched["data"]
        options = {o["id"]: o["current_value"] for o in switched["data"]["config_options"]}
        assert options["model"] == "sonnet"

        mark = alice.output.mark()
        alice.type("//rename Login test fix")
        await vera.wait_for(
            lambda t: t.item_of("session_event", what="title", title="Login test fix") is not None,
            within=30,
        )
        await alice.output.wait_for(r"the session is titled Login test fix", start=mark)


async def test_a_killed_agent_is_restarted_and_resumes_the_same_session(
    share: StartSession, model: ModelServer
) -> None:
    model.script("REMEMBER-1", reply(Text("Noted.")))
    model.script("RECALL-1", reply(Text("It is swordfish.")))
    async with share(CLAUDE) as session, session.teammate("alice", drive=True) as alice:
        await alice.send(Prompt(text="REMEMBER-1: the password is swordfish"))
        await alice.wait_for(agent_said("Noted."))
        first = alice.item_of("session_event", what="agent_started")
        assert first is not None
        assert first["data"]["resumed"] is False

        # Claude Code saves its transcript a moment after the turn; killed before that, it has
        # nothing to load (the host then starts a new session and says why, `load_failed`).
        transcript = f"{first['data']['session_id']}.jsonl"
        projects = session.home / ".claude" / "projects"
        assert await eventually(
            lambda: any("Noted." in p.read_text() for p in projects.rglob(transcript)),
            attempts=100,
        )
        started = await scenarios.recall_after_a_kill(session, alice, "It is swordfish.")
        assert started[1]["resumed"] is True
        assert started[1]["session_id"] == first["data"]["session_id"]
        # The restarted agent sent the model the earlier turn: it remembers.
        recall = model.calls("RECALL-1")[-1]
        assert "the password is swordfish" in json.dumps(recall.body["messages"])
