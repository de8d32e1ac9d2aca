"""Claude Code's AskUserQuestion tool, which claude-agent-acp 0.101.0 turns into an ACP form
question (`elicitation/create`) once the client offers form elicitation: shown in `tunnel
attach`, answered there, and the answer is what the model gets back as the tool's result."""

from __future__ import annotations

import pytest

from .conftest import CLAUDE, StartSession, agent_said, driven
from .model_server import ModelServer, Text, ToolCall, reply

pytestmark = [pytest.mark.anyio, pytest.mark.agents_real, pytest.mark.timeout(120)]

QUESTION = {
    "question": "Which color should the button be?",
    "header": "Color",
    "options": [
        {"label": "Red", "description": "warm"},
        {"label": "Green", "description": "calm"},
    ],
    "multiSelect": False,
}


async def test_claudes_question_is_answered_in_attach_and_reaches_the_model(
    share: StartSession, model: ModelServer
) -> None:
    model.script(
        "ASK-COLOR",
        reply(ToolCall("AskUserQuestion", {"questions": [QUESTION]})),
        reply(Text("ASK-COLOR done.")),
    )
    async with driven(share(CLAUDE)) as (_, vera, alice):
        mark = alice.output.mark()
        alice.type("ASK-COLOR")
        await vera.wait_for(lambda t: any(i["type"] == "elicitation_request" for i in t.items))
        await alice.output.wait_for(r"question\? Which color should the button be\?", start=mark)
        asked = next(i for i in vera.items if i["type"] == "elicitation_request")
        first = asked["data"]["fields"][0]
        assert (first["kind"], first["title"]) == ("choice", "Color")
        assert [c["value"] for c in first["choices"]] == ["Red", "Green"]
        alice.type("/answer 1=Green")
        await vera.wait_for(agent_said("ASK-COLOR done."))
        response = next(i for i in vera.items if i["type"] == "elicitation_response")
        assert response["created_by"] == "alice"
        assert response["data"]["content"] == {asked["data"]["fields"][0]["name"]: "Green"}
        result = model.tool_results("ASK-COLOR")[-1]
        assert (result.name, result.is_error) == ("AskUserQuestion", False)
        assert "Green" in result.output
