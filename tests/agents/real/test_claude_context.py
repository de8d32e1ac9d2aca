"""What goes with a prompt reaches Claude Code (claude-agent-acp 0.101.0 takes embedded context
and images) and, through it, the model's request: a file named with `@path` in a prompt typed in
`tunnel attach`, an image sent with a prompt."""

from __future__ import annotations

import base64
import json

import pytest

from tunnel.app.requests import Prompt, PromptImage

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


async def test_an_image_sent_with_a_prompt_reaches_the_model(
    share: StartSession, model: ModelServer
) -> None:
    model.script("CTX-IMAGE", reply(Text("CTX-IMAGE done.")))
    # A 1x1 PNG: what the page sends after a paste, here from a Python teammate.
    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    )
    async with share(CLAUDE) as session, session.teammate("dana", drive=True) as dana:
        await dana.send(
            Prompt(
                text="CTX-IMAGE what is this?",
                images=(PromptImage(mime_type="image/png", data=png),),
            )
        )
        await dana.wait_for(agent_said("CTX-IMAGE done."))
        asked = dana.item_of("message", role="user")
        assert asked is not None
        assert asked["data"]["images"] == [{"mime_type": "image/png", "size": len(png)}]
        (request,) = model.calls("CTX-IMAGE")
        assert base64.b64encode(png).decode() in json.dumps(request.body)
