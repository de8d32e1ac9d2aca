"""Codex (codex-acp) shared through a real relay and driven with `tunnel attach`, against the fake
model's OpenAI Responses API (tests/agents/real/model_server.py): codex-acp reads its model
provider from CODEX_HOME/config.toml, pointed at the fake model (tests/agents/real/conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

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
