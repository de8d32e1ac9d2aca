"""Qwen Code (`qwen --acp`) shared through a real relay and driven with `tunnel attach`, against
the fake model's OpenAI Chat Completions API (tests/agents/real/model_server.py): Qwen Code's
OpenAI-compatible provider reads OPENAI_BASE_URL (tests/agents/real/conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import scenarios
from .conftest import (
    QWEN,
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


async def test_a_prompt_typed_in_attach_streams_qwens_reply_to_everyone(
    share: StartSession, model: ModelServer
) -> None:
    async with driven(share(QWEN)) as (_, vera, alice):
        text = "Hello from the fake Chat Completions API, streamed in chunks."
        started = await scenarios.prompt_streams_to_everyone(alice, vera, model, text)
        assert (started["agent"], started["version"]) == ("Qwen Code", "0.24.4")
        told = settings_events(vera)[-1]
        assert (told["modes"]["current"], told["approval"]["asks"]) == ("auto", False)
        call = model.calls("HELLO-1")[-1]
        assert (call.path, call.body["model"]) == ("/v1/chat/completions", "qwen3-coder-plus")
        assert model.strays == []


async def test_a_file_write_asks_and_happens_once_allowed(
    share: StartSession, model: ModelServer, workspace: Path
) -> None:
    target = workspace / "new.txt"
    model.script(
        "WRITE-NEW",
        reply(ToolCall("write_file", {"file_path": str(target), "content": "fresh\n"})),
        reply(Text("WRITE-NEW done.")),
    )
    # Qwen Code starts in "auto" (a model of its own approves tool calls); "default" asks.
    async with driven(share(QWEN, "--agent-mode", "default")) as (_, vera, alice):
        await vera.wait_for(lambda t: bool(settings_events(t)))
        told = settings_events(vera)[-1]
        assert (told["modes"]["current"], told["approval"]["asks"]) == ("default", True)
        await asked(alice, vera, "WRITE-NEW")
        request = permission_requests(vera)[0]["data"]
        assert request["tool_call"].get("kind") == "edit", request
        assert not target.exists()
        alice.type("/allow")
        await vera.wait_for(agent_said("WRITE-NEW done."))
        assert decisions(vera)[0]["option_kind"] == "allow_once"
        assert target.read_text() == "fresh\n"
        assert model.tool_results("WRITE-NEW")[-1].name == "write_file"
