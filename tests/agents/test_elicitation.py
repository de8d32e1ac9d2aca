"""Questions an ACP agent asks (`elicitation/create`): the form checker, attacked with hostile
schemas and answers, and a real subprocess (tests/agents/fake_acp_agent.py) asking one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunnel.agents import SessionError
from tunnel.agents.elicitation import BadForm, check_content, form_fields
from tunnel.log import Log

from .conftest import running
from .fake_acp_agent import FORM
from .test_acp import acp_session

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def test_a_form_becomes_flat_fields() -> None:
    fields = form_fields(FORM)
    assert [(f["name"], f["kind"], f["required"]) for f in fields] == [
        ("name", "string", True),
        ("color", "choice", True),
        ("count", "integer", False),
        ("urgent", "boolean", False),
    ]
    assert fields[1]["choices"] == [
        {"value": "r", "label": "Red"},
        {"value": "g", "label": "Green"},
    ]
    assert (fields[2]["min"], fields[2]["max"]) == (1, 9)
    assert fields[3]["default"] is False
    multi = form_fields(
        {
            "properties": {
                "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
                "when": {"type": "string", "format": "date", "default": 7},
            }
        }
    )
    assert multi[0]["kind"] == "choices"
    assert "default" not in multi[1]  # a default that does not fit is dropped


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array"},
        {"properties": {"deep": {"type": "object", "properties": {}}}},
        {"properties": {"x": {"type": "string", "format": "password"}}},
        {"properties": {"x": {"type": "string", "enum": [1, 2]}}},
        {"properties": {"x": {"type": "string", "enum": ["a", "a"]}}},
        {"properties": {"x": {"type": "string", "enum": ["a" * 1025]}}},
        {"properties": {"x": {"type": "integer", "minimum": 5, "maximum": 1}}},
        {"properties": {"x": {"type": "number", "minimum": "0"}}},
        {"properties": {"x": {"type": "string"}}, "required": ["y"]},
        {"properties": {f"f{i}": {"type": "boolean"} for i in range(17)}},
        {"properties": {"x" * 65: {"type": "boolean"}}},
        {"properties": {"x": {"type": "array", "items": {"type": "number"}}}},
        {"properties": {"x": {"type": "string"}}, "required": [{}]},
        {"properties": {"x": {"type": "number", "minimum": 10**400}}},
        {"properties": {"x": {"type": "string", "maxLength": 10**400}}},
    ],
)
def test_a_hostile_or_unsupported_form_is_refused(schema: dict[str, Any]) -> None:
    with pytest.raises(BadForm):
        form_fields(schema)


@pytest.mark.parametrize(
    "content",
    [
        {"name": "ann"},  # a required field missing
        {"name": "ann", "color": "r", "admin": True},  # a field the form does not have
        {"name": "", "color": "r"},  # too short
        {"name": "ann", "color": "blue"},  # not a choice
        {"name": "ann", "color": "r", "count": 10},  # out of range
        {"name": "ann", "color": "r", "count": 2.5},  # not an integer
        {"name": "ann", "color": "r", "count": True},  # a boolean is no number
        {"name": "ann", "color": "r", "count": 10**400},  # beyond any float
        {"name": "ann", "color": "r", "urgent": "yes"},
        {"name": ["ann"], "color": "r"},
        "accept",
    ],
)
def test_an_answer_that_does_not_fit_the_form_is_refused(content: Any) -> None:
    with pytest.raises(SessionError) as refused:
        check_content(form_fields(FORM), content)
    assert refused.value.code == "bad_request"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=40,
)
schemas = st.fixed_dictionaries(
    {},
    optional={
        "type": json_values | st.just("object"),
        "properties": st.dictionaries(
            st.text(min_size=1, max_size=8),
            st.fixed_dictionaries(
                {},
                optional={
                    k: json_values | st.sampled_from(["string", "number", "integer", "boolean"])
                    for k in ("type", "minimum", "maximum", "minLength", "enum", "default")
                },
            )
            | json_values,
            max_size=4,
        )
        | json_values,
        "required": st.lists(json_values | st.text(max_size=8), max_size=3) | json_values,
    },
)


@settings(max_examples=300, deadline=None)
@given(schemas)
def test_any_schema_gives_fields_or_bad_form(schema: dict[str, Any]) -> None:
    try:
        fields = form_fields(schema)
    except BadForm:
        return
    assert all(isinstance(f["name"], str) for f in fields)


def test_an_answer_that_fits_is_kept_as_typed() -> None:
    fields = form_fields(FORM)
    assert check_content(fields, {"name": "ann", "color": "g", "count": 3.0}) == {
        "name": "ann",
        "color": "g",
        "count": 3,
    }


async def test_the_agent_question_is_recorded_and_the_first_answer_wins(
    log: Log, tmp_path: Path
) -> None:
    session = acp_session(log, tmp_path)
    async with running(session, log) as rec:
        await session.prompt("elicit", by="alice")
        asked = await rec.wait_item("elicitation_request")
        assert asked.status == "action_required"
        assert asked.data["message"] == "Pick"
        assert [f["name"] for f in asked.data["fields"]] == ["name", "color", "count", "urgent"]
        assert session.pending_elicitations() == [asked]
        request_id = asked.data["request_id"]

        with pytest.raises(SessionError) as bad:
            await session.answer_elicitation(
                request_id, "accept", {"name": "ann", "color": "r", "shell": "rm"}, by="mallory"
            )
        assert bad.value.code == "bad_request"
        with pytest.raises(SessionError) as bad:
            await session.answer_elicitation(request_id, "decline", {"name": "x"}, by="mallory")
        assert bad.value.code == "bad_request"
        assert session.pending_elicitations() == [asked]  # refused answers change nothing

        await session.answer_elicitation(
            request_id, "accept", {"name": "ann", "color": "r", "count": 2}, by="alice"
        )
        with pytest.raises(SessionError) as late:
            await session.answer_elicitation(request_id, "decline", None, by="bob")
        assert late.value.code == "already_answered"
        said = await rec.wait_item("message", role="agent")
        assert session.pending_elicitations() == []
    answered = json.dumps({"color": "r", "count": 2, "name": "ann"}, sort_keys=True)
    assert said.data["text"] == f"answered accept {answered}"
    response = next(i for i in rec.items if i.type == "elicitation_response")
    assert response.created_by == "alice"
    assert response.data == {
        "request_id": request_id,
        "action": "accept",
        "content": {"name": "ann", "color": "r", "count": 2},
    }


async def test_a_declined_question_and_a_refused_form(log: Log, tmp_path: Path) -> None:
    session = acp_session(log, tmp_path)
    async with running(session, log) as rec:
        await session.prompt("elicit", by="alice")
        asked = await rec.wait_item("elicitation_request")
        await session.answer_elicitation(asked.data["request_id"], "decline", None, by="bob")
        said = await rec.wait_item("message", role="agent")
        assert said.data["text"] == "answered decline null"

        await session.prompt("elicit-bad", by="alice")
        refused = await rec.wait_item("session_event", what="elicitation_refused")
        assert "'deep'" in refused.data["reason"]
        said = await rec.wait_item("message", count=2, role="agent")
        assert said.data["text"].startswith("error ")
    assert [i.type for i in rec.items].count("elicitation_request") == 1


async def test_cancelling_the_turn_cancels_its_question(log: Log, tmp_path: Path) -> None:
    session = acp_session(log, tmp_path)
    async with running(session, log) as rec:
        await session.prompt("elicit", by="alice")
        await rec.wait_item("elicitation_request")
        await session.cancel(by="bob")
        response = await rec.wait_item("elicitation_response")
        assert (response.created_by, response.data["action"]) == ("bob", "cancel")
        said = await rec.wait_item("message", role="agent")
        assert said.data["text"] == "answered cancel null"


@pytest.mark.parametrize(
    ("prompt", "opened", "closed", "answer"),
    [
        ("elicit-withdraw", "elicitation_request", "elicitation_response", "answered cancel null"),
        ("ask-withdraw", "permission_request", "permission_decision", "answered cancelled"),
    ],
)
async def test_a_request_the_agent_withdraws_is_closed_as_cancelled(
    log: Log, tmp_path: Path, prompt: str, opened: str, closed: str, answer: str
) -> None:
    session = acp_session(log, tmp_path)
    async with running(session, log) as rec:
        await session.prompt(prompt, by="alice")
        await rec.wait_item(opened)
        ended = await rec.wait_item(closed)
        assert ended.created_by == "agent"
        said = await rec.wait_item("message", role="agent")
        assert said.data["text"] == answer
        assert session.pending_elicitations() == session.pending_permissions() == []
