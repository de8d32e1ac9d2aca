"""A file named with `@path` in a prompt typed in `tunnel attach` reaches Claude Code
(claude-agent-acp 0.101.0 takes embedded context) and, through it, the model's request."""

from __future__ import annotations

import json

import pytest

from .conftest import CLAUDE, StartSession, agent_said, driven
from .model_server import ModelServer, Text, reply

pytestmark = [pytest.mark.anyio, pytest.mark.agents_real, pytest.mark.timeout(120)]


async def test_a_file_named_in_the_prompt_reaches_the_model(
    share: StartSession, model: ModelServer
) -> None:
    model.script("CTX-FILE", reply(Text("CTX-FILE done.")))
    async with driven(share(CLAUDE)) as (_, vera, alice):
        alice.type("CTX-FILE what does @notes.txt say?")
        await vera.wait_for(agent_said("CTX-FILE done."))
        attached = next(i for i in vera.items if i["data"].get("what") == "context_attached")
        assert attached["data"]["files"][0]["path"] == "notes.txt"
        assert attached["data"]["files"][0]["embedded"] is True
        (request,) = model.calls("CTX-FILE")
        assert "remember the milk" in json.dumps(request.body)
