"""Gemini CLI (`gemini --acp`) shared through a real relay and driven with `tunnel attach`.

Gemini reads and writes the workspace through the host (ACP `fs/*` requests), so these tests
also check the host's file answers against a real agent: a new file must be creatable.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tunnel.app.requests import Prompt

from . import scenarios
from .conftest import (
    GEMINI,
    Gemini,
    StartSession,
    agent_said,
    agent_starts,
    asked,
    decisions,
    drive,
    driven,
    permission_requests,
    settings_events,
)
from .model_server import ModelServer, Text, ToolCall, reply

pytestmark = [pytest.mark.anyio, pytest.mark.agents_real, pytest.mark.timeout(120)]

GEMINI_OPTIONS = [
    ("proceed_always", "allow_always"),
    ("proceed_once", "allow_once"),
    ("cancel", "reject_once"),
]
"""Gemini's permission options (id, kind), in its order."""


def _script_replace(model: ModelServer, key: str, path: Path, old: str, new: str) -> None:
    args = {"file_path": str(path), "instruction": key, "old_string": old, "new_string": new}
    model.script(key, reply(ToolCall("replace", args)), reply(Text(f"{key} done.")))


async def test_a_prompt_typed_in_attach_streams_the_models_reply_to_everyone(
    share: StartSession, model: ModelServer
) -> None:
    async with driven(share(GEMINI)) as (_, vera, alice):
        text = "Hello from the fake Gemini, streamed in chunks."
        started = await scenarios.prompt_streams_to_everyone(alice, vera, model, text)
        assert (started["agent"], started["version"]) == ("Gemini CLI", "0.61.0")
        assert model.strays == []


async def test_allow_once_applies_the_edit_and_deny_leaves_the_next_one(
    share: StartSession, model: ModelServer, workspace: Path
) -> None:
    notes = workspace / "notes.txt"
    _script_replace(model, "EDIT-ONCE", notes, "milk", "bread")
    _script_replace(model, "EDIT-DENIED", notes, "bread", "butter")
    async with driven(share(GEMINI)) as (_, vera, alice):
        request = await scenarios.asked_with_options(alice, vera, "EDIT-ONCE", GEMINI_OPTIONS)
        # The tool call is stored whole; Gemini's diff is of the whole file, read through us.
        diff = next(c for c in request["tool_call"]["content"] if c["type"] == "diff")
        assert (diff["path"], diff["old_text"], diff["new_text"]) == (
            str(notes),
            "remember the milk\n",
            "remember the bread\n",
        )
        alice.type("/allow")
        await vera.wait_for(agent_said("EDIT-ONCE done."))
        assert decisions(vera)[0]["option_id"] == "proceed_once"
        assert notes.read_text() == "remember the bread\n"
        assert not model.tool_results("EDIT-ONCE")[-1].is_error

        await asked(alice, vera, "EDIT-DENIED", count=2)
        alice.type("/deny")
        await vera.wait_for(agent_said("EDIT-DENIED done."))
        assert decisions(vera)[1]["option_id"] == "cancel"
        assert notes.read_text() == "remember the bread\n"
        assert model.tool_results("EDIT-DENIED")[-1].is_error


async def test_allow_always_passes_the_next_edit_without_asking(
    share: StartSession, model: ModelServer
) -> None:
    await scenarios.allow_always_passes_the_next_edit(
        share, GEMINI, model, _script_replace, "proceed_always"
    )


async def test_read_only_approvals_let_reads_pass_and_refuse_edits_and_commands(
    share: StartSession, model: ModelServer
) -> None:
    await scenarios.read_only_refuses_edits_and_commands(
        share,
        GEMINI,
        model,
        ("read_file", "replace", "run_shell_command"),
        {"instruction": "Replace milk with bread."},
    )


async def test_gemini_creates_a_new_file_inside_the_workspace(
    share: StartSession, model: ModelServer, workspace: Path
) -> None:
    target = workspace / "docs" / "new.md"
    model.script(
        "WRITE-NEW",
        reply(ToolCall("write_file", {"file_path": str(target), "content": "# Fresh\n"})),
        reply(Text("WRITE-NEW done.")),
    )
    async with driven(share(GEMINI)) as (_, vera, alice):
        await asked(alice, vera, "WRITE-NEW")
        alice.type("/allow")
        await vera.wait_for(agent_said("WRITE-NEW done."))
        result = model.tool_results("WRITE-NEW")[-1]
        assert not result.is_error, result.output
        assert target.read_text() == "# Fresh\n"


async def test_a_shell_command_runs_once_allowed(
    share: StartSession, model: ModelServer, workspace: Path
) -> None:
    model.script(
        "RUN-SHELL",
        reply(ToolCall("run_shell_command", {"command": "echo ran > shell.txt"})),
        reply(Text("RUN-SHELL done.")),
    )
    async with driven(share(GEMINI)) as (_, vera, alice):
        await asked(alice, vera, "RUN-SHELL")
        assert permission_requests(vera)[0]["data"]["title"] == "echo ran > shell.txt"
        alice.type("/allow")
        await vera.wait_for(agent_said("RUN-SHELL done."))
        assert (workspace / "shell.txt").read_text() == "ran\n"


async def test_cancel_mid_turn_stops_the_model_call_and_the_next_prompt_runs(
    share: StartSession, model: ModelServer
) -> None:
    await scenarios.cancel_mid_turn_then_prompt(share, model, GEMINI)


async def test_a_drivers_mode_switch_takes_effect_and_a_viewers_is_refused(
    share: StartSession, model: ModelServer, workspace: Path
) -> None:
    notes = workspace / "notes.txt"
    _script_replace(model, "EDIT-AUTO", notes, "milk", "bread")
    async with share(GEMINI) as session, session.teammate("vera") as vera:
        await scenarios.viewer_mode_switch_is_refused(vera, "autoEdit")
        alice = await drive(session)
        alice.type("/mode autoEdit")
        await vera.wait_for(lambda t: settings_events(t)[-1]["modes"]["current"] == "autoEdit")
        # Auto Edit: the edit is applied without asking anyone.
        alice.type("EDIT-AUTO")
        await vera.wait_for(agent_said("EDIT-AUTO done."))
        assert permission_requests(vera) == []
        assert notes.read_text() == "remember the bread\n"


async def test_the_agents_commands_show_in_attach_and_a_slash_command_goes_to_it(
    share: StartSession, model: ModelServer
) -> None:
    # Gemini CLI lists only its built-in commands over ACP (not .gemini/commands/ files);
    # /about it answers itself, without the model.
    async with share(GEMINI) as session, session.teammate("vera") as vera:
        alice = session.attach("alice")
        listed = await alice.output.wait_for(r"the agent's commands: (.*)")
        assert {"/about", "/memory", "/init"} <= set(listed.group(1).split(", "))
        alice.type("/about")
        await vera.wait_for(agent_said("Version: 0.61.0"))
        prompt = vera.item_of("message", role="user")
        assert prompt is not None
        assert (prompt["data"]["text"], prompt["created_by"]) == ("/about", "alice")
        assert not any("GenerateContent" in r.path for r in model.requests)


class GeminiKeepingSessions(Gemini):
    """Gemini CLI with its session cleanup off (`general.sessionRetention.enabled: false`): with
    it on, each start deletes the sessions it loaded before (docs/agents.md, "Resuming")."""

    def environment(self, model_url: str, home: Path, workspace: Path) -> dict[str, str]:
        env = super().environment(model_url, home, workspace)
        path = home / ".gemini" / "settings.json"
        settings = json.loads(path.read_text())
        settings["general"]["sessionRetention"] = {"enabled": False}
        path.write_text(json.dumps(settings))
        return env


@pytest.mark.timeout(240)
async def test_two_resumes_in_a_row_remember_and_show_each_earlier_message_once(
    share: StartSession, model: ModelServer, workspace: Path
) -> None:
    # Gemini CLI loads a session in the minute it was created only by erasing it: the host
    # waits for the next minute before that load (docs/agents.md), so this takes up to a minute.
    gemini = GeminiKeepingSessions(name="gemini", program="gemini", args=("--acp",))
    notes = workspace / "notes.txt"
    model.script(
        "REMEMBER-1",
        reply(ToolCall("read_file", {"file_path": str(notes)})),
        reply(Text("Noted: swordfish.")),
    )
    model.script("RECALL-1", reply(Text("Recalled after a host restart.")))
    model.script("RECALL-2", reply(Text("Recalled after a crash.")))
    async with share(gemini) as session, session.teammate("alice", drive=True) as alice:
        await alice.send(Prompt(text="REMEMBER-1: the password is swordfish"))
        await alice.wait_for(agent_said("Noted: swordfish."))
    # The host restarts: the agent loads its session, and replays it right after answering.
    async with share(gemini) as session, session.teammate("alice", drive=True) as alice:
        await alice.send(Prompt(text="RECALL-1: what is the password?"))
        await alice.wait_for(agent_said("Recalled after a host restart."), within=90)
        # The agent crashes: the next prompt starts it, and it loads the session once more.
        session.host.kill_agent()
        await alice.wait_for(lambda t: t.item_of("session_event", what="agent_exited") is not None)
        await alice.send(Prompt(text="RECALL-2: and now?"))
        await alice.wait_for(agent_said("Recalled after a crash."), within=90)

        started = agent_starts(alice)
        assert [s["resumed"] for s in started] == [False, True, True], started
        assert len({s["session_id"] for s in started}) == 1
        for key in ("RECALL-1", "RECALL-2"):
            assert "the password is swordfish" in json.dumps(model.calls(key)[-1].body["contents"])
        # Each earlier reply and tool card is in the conversation once: no replay was stored.
        replies = [
            i["data"]["text"]
            for i in alice.items
            if i["type"] == "message" and i["data"]["role"] == "agent"
        ]
        assert replies == [
            "Noted: swordfish.",
            "Recalled after a host restart.",
            "Recalled after a crash.",
        ]
        assert len([i for i in alice.items if i["type"] == "tool_call"]) == 1


class UntrustingGemini(Gemini):
    """Gemini CLI as a new user runs it: the workspace is not among its trusted folders."""

    def environment(self, model_url: str, home: Path, workspace: Path) -> dict[str, str]:
        env = super().environment(model_url, home, workspace)
        (home / ".gemini" / "trustedFolders.json").unlink()
        return env


async def test_in_a_folder_gemini_does_not_trust_its_refusals_say_why_and_what_to_do(
    share: StartSession, model: ModelServer, workspace: Path
) -> None:
    notes = workspace / "notes.txt"
    _script_replace(model, "EDIT-UNTRUSTED", notes, "milk", "bread")
    gemini = UntrustingGemini(name="gemini", program="gemini", args=("--acp",))
    async with share(gemini) as session, session.teammate("vera") as vera:
        alice = await drive(session)
        # A mode that acts without asking: refused to alice, in words, and nothing changes.
        alice.type("/mode autoEdit")
        await alice.output.wait_for(r"refused: it does not trust this folder.*TRUST_WORKSPACE")
        # Alice's line and Vera's items come over different channels: wait for Vera's too.
        await vera.wait_for(lambda t: bool(settings_events(t)))
        assert settings_events(vera)[-1]["modes"]["current"] == "default"

        # "Allow for this session": the agent fails the edit; one line says whose choice it
        # refused and why, and the file is untouched.
        await asked(alice, vera, "EDIT-UNTRUSTED")
        alice.type("/allow always")
        await vera.wait_for(agent_said("EDIT-UNTRUSTED done."))
        errors = [i["data"]["message"] for i in vera.items if i["type"] == "error"]
        assert len(errors) == 1, errors
        assert errors[0].startswith(
            'alice chose "Allow for this session", which Gemini CLI refused: '
            "it does not trust this folder"
        )
        await alice.output.wait_for(r"which Gemini CLI refused: it does not trust this folder")
        assert notes.read_text() == "remember the milk\n"
