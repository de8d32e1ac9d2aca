"""Codex (codex-acp) shared through a real relay and driven with `tunnel attach`, against the fake
model's OpenAI Responses API (tests/agents/real/model_server.py): codex-acp reads its model
provider from CODEX_HOME/config.toml, pointed at the fake model (tests/agents/real/conftest.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

from tests.host.teammate import Teammate
from tests.support import eventually

from . import scenarios
from .conftest import (
    CODEX,
    StartSession,
    agent_said,
    asked,
    decisions,
    driven,
    permission_requests,
    settings_events,
)
from .model_server import ModelServer, Text, ToolCall, reply

pytestmark = [pytest.mark.anyio, pytest.mark.agents_real, pytest.mark.timeout(120)]

SHELL_MARK = "CODEX-SHELL-MARK"
SLOW_MARK = "CODEX-SLOW-MARK"


def _running(teammate: Teammate, text: str) -> bool:
    """Whether a tool call whose title holds `text` is stored as running."""
    return any(
        i["type"] == "tool_call"
        and text in str(i["data"].get("title"))
        and i["data"].get("status") == "in_progress"
        for i in teammate.items
    )


def _processes(text: str) -> int:
    """How many processes of this machine have `text` in their command line."""
    found = 0
    for proc in psutil.process_iter(["cmdline"]):
        if any(text in arg for arg in proc.info["cmdline"] or ()):
            found += 1
    return found


async def test_a_prompt_typed_in_attach_streams_codexs_reply_to_everyone(
    share: StartSession, model: ModelServer
) -> None:
    async with driven(share(CODEX)) as (_, vera, alice):
        text = "Hello from the fake Responses API, streamed in chunks."
        started = await scenarios.prompt_streams_to_everyone(alice, vera, model, text)
        assert (started["agent"], started["version"]) == ("Codex", "0.16.0")
        # Codex starts in "auto" (its Default): everyone is told it does not ask.
        told = settings_events(vera)[-1]
        assert told["modes"]["current"] == "auto"
        assert told["approval"]["asks"] is False
        assert model.calls("HELLO-1")[-1].body["model"] == "gpt-5.4-mini"
        assert all(stray.startswith("CONNECT ") for stray in model.strays), model.strays


async def test_a_patch_in_read_only_mode_asks_and_applies_once_allowed(
    share: StartSession, model: ModelServer, workspace: Path
) -> None:
    patch = "*** Begin Patch\n*** Add File: new.txt\n+fresh\n*** End Patch\n"
    model.script(
        "PATCH-NEW",
        reply(ToolCall("apply_patch", {"input": patch})),
        reply(Text("PATCH-NEW done.")),
    )
    async with driven(share(CODEX, "--agent-mode", "read-only")) as (_, vera, alice):
        await vera.wait_for(lambda t: bool(settings_events(t)))
        assert settings_events(vera)[-1]["approval"]["asks"] is True
        await asked(alice, vera, "PATCH-NEW")
        request = permission_requests(vera)[0]["data"]
        assert request["tool_call"].get("kind") == "edit", request
        assert not (workspace / "new.txt").exists()
        alice.type("/allow")
        await vera.wait_for(agent_said("PATCH-NEW done."))
        assert decisions(vera)[0]["option_kind"] == "allow_once"
        assert (workspace / "new.txt").read_text() == "fresh\n"
        assert model.tool_results("PATCH-NEW")[-1].name == "apply_patch"


async def test_a_shell_command_asks_runs_once_allowed_and_a_cancel_ends_the_turn(
    share: StartSession, model: ModelServer, workspace: Path
) -> None:
    """Codex's shell tool (`exec_command`) runs commands in Codex's own process, never through
    the host's `terminal/*`. One that asks to leave Codex's sandbox (`require_escalated`) asks
    first: allowed from attach, it runs and its output reaches everyone and the model. A second
    one, allowed, is cancelled while it runs: the turn ends cancelled, attach shows the tool
    failed and the next prompt is answered; the command itself runs on until the agent stops
    (docs/agents.md, "Tested with")."""
    escalated = {"sandbox_permissions": "require_escalated", "justification": "Run it"}
    run = f"echo {SHELL_MARK}; echo ran > ran.txt"
    model.script(
        "SHELL-RUN",
        reply(ToolCall("exec_command", {"cmd": run, **escalated})),
        reply(Text("SHELL-RUN done.")),
    )
    model.script(
        "SHELL-SLOW",
        reply(ToolCall("exec_command", {"cmd": f"sleep 90; echo {SLOW_MARK}", **escalated})),
        reply(Text("SHELL-SLOW done.")),
    )
    model.script("AFTER-CANCEL", reply(Text("Back again.")))
    async with driven(share(CODEX)) as (_, vera, alice):
        await asked(alice, vera, "SHELL-RUN")
        request = permission_requests(vera)[0]["data"]
        assert request["tool_call"]["kind"] == "execute"
        assert request["tool_call"]["title"] == run
        assert not (workspace / "ran.txt").exists()
        alice.type("/allow")
        await vera.wait_for(agent_said("SHELL-RUN done."))
        assert decisions(vera)[0]["option_kind"] == "allow_once"
        assert (workspace / "ran.txt").read_text() == "ran\n"
        # Its output is in the tool call's raw output, among ids and timings: the result says
        # what it printed, and attach prints that.
        result = next(i["data"] for i in vera.items if i["type"] == "tool_result")
        assert (result["ok"], result["output"]) == (True, f"{SHELL_MARK}\n")
        await alice.output.wait_for(rf"result {SHELL_MARK}$")
        assert SHELL_MARK in model.tool_results("SHELL-RUN")[-1].output
        assert not [i for i in vera.items if i["type"] == "tool_terminal"]

        await asked(alice, vera, "SHELL-SLOW", count=2)
        mark = alice.output.mark()
        alice.type("/allow")
        await vera.wait_for(lambda t: _running(t, SLOW_MARK))
        alice.type("/cancel")
        await vera.wait_for(
            lambda t: (
                t.item_of("session_event", what="turn_ended", stop_reason="cancelled") is not None
            )
        )
        await alice.output.wait_for(
            rf"tool sleep 90; echo {SLOW_MARK} · execute · failed", start=mark
        )
        alice.type("AFTER-CANCEL")
        await vera.wait_for(agent_said("Back again."))
        # Codex told the model the call was aborted, but left the command running.
        assert "aborted" in json.dumps(model.calls("AFTER-CANCEL")[0].body)
        assert _processes(SLOW_MARK) == 1
    # Stopping the host stops the agent, and the agent its command.
    assert await eventually(lambda: _processes(SLOW_MARK) == 0, attempts=100)
