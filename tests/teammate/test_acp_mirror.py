"""The shared session as an ACP session (tunnel/teammate/acp_mirror.py): items and events in,
ACP updates, permission requests and turn endings out. Every update is checked against the acp
package's schema of a `session/update` notification. No I/O."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from acp import schema
from hypothesis import given
from hypothesis import strategies as st

from tunnel.agents.elicitation import form_fields
from tunnel.teammate.acp_mirror import (
    Mirror,
    MirrorOutput,
    PermissionClosed,
    PermissionOpened,
    PromptStored,
    QuestionClosed,
    QuestionOpened,
    SettingsStored,
    TurnEnded,
    TurnStarted,
    Update,
    replay,
    requested_schema,
)


def item(seq: int, type_: str, data: Mapping[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "seq": seq,
        "type": type_,
        "status": fields.get("status", "completed"),
        "response_id": fields.get("response_id"),
        "created_by": fields.get("by", "agent"),
        "data": dict(data),
    }


def prompt(seq: int, text: str, by: str) -> dict[str, Any]:
    return item(seq, "message", {"role": "user", "text": text}, by=by)


def updates(outputs: Sequence[MirrorOutput]) -> list[dict[str, Any]]:
    """The outputs' updates, each checked against ACP's schema."""
    found = []
    for output in outputs:
        if isinstance(output, Update):
            schema.SessionNotification.model_validate(
                {"sessionId": "main", "update": output.update}
            )
            found.append(dict(output.update))
    return found


SETTINGS = {
    "what": "settings",
    "modes": {
        "current": "default",
        "available": [{"id": "default", "name": "Default"}, {"id": "plan", "name": "Plan"}],
    },
    "models": {"current": "fast", "available": [{"id": "fast", "name": "Fast model"}]},
    "config_options": [
        {
            "id": "effort",
            "name": "Effort",
            "type": "select",
            "current_value": "low",
            "options": [{"id": "low", "name": "Low"}, {"id": "high", "name": "High"}],
        },
        {"id": "web", "name": "Web", "type": "boolean", "current_value": True},
    ],
}


def test_history_replays_as_acp_updates_each_tool_call_known_by_its_turn() -> None:
    history = [
        prompt(0, "fix it", "alice"),
        item(1, "reasoning", {"text": "thinking", "turn": 0}),
        item(2, "message", {"role": "agent", "text": "on it", "turn": 0}),
        item(
            3,
            "tool_call",
            {
                "tool_call_id": "call_1",
                "title": "Edit notes",
                "kind": "edit",
                "status": "pending",
                "input": {"path": "notes.txt"},
                "content": [
                    {"type": "diff", "path": "/w/notes.txt", "old_text": "a", "new_text": "b"},
                    {"type": "terminal", "terminal_id": "t1"},
                ],
                "locations": [{"path": "/w/notes.txt", "line": 3}],
                "turn": 0,
            },
        ),
        item(4, "tool_call_update", {"tool_call_id": "call_1", "kind": "mystery", "turn": 0}),
        item(5, "tool_result", {"tool_call_id": "call_1", "ok": False, "output": "", "turn": 0}),
        item(6, "plan", {"entries": [{"content": "step", "status": "done?", "priority": "x"}]}),
        item(7, "error", {"message": "the agent failed"}),
        item(8, "session_event", {"what": "agent_started", "agent": "fake"}),
    ]
    got = updates(replay(history))
    assert [u["sessionUpdate"] for u in got] == [
        "user_message_chunk",
        "agent_thought_chunk",
        "agent_message_chunk",
        "tool_call",
        "tool_call_update",
        "tool_call_update",
        "plan",
        "agent_message_chunk",
    ]
    assert got[0]["_meta"] == {"tunnel": {"by": "alice"}}
    tool = got[3]
    assert tool["toolCallId"] == "0:call_1"
    assert tool["content"] == [
        {"type": "diff", "path": "/w/notes.txt", "oldText": "a", "newText": "b"}
    ]
    assert tool["locations"] == [{"path": "/w/notes.txt", "line": 3}]
    assert tool["rawInput"] == {"path": "notes.txt"}
    assert got[4] == {
        "sessionUpdate": "tool_call_update",
        "toolCallId": "0:call_1",
        "kind": "other",
    }
    assert got[5]["status"] == "failed"
    assert got[6]["entries"] == [{"content": "step", "priority": "medium", "status": "pending"}]


def test_a_stored_reply_repeats_none_of_what_its_deltas_streamed() -> None:
    mirror = Mirror()
    delta = {"kind": "delta", "data": {"response_id": "r1", "channel": "message", "text": "Hel"}}
    assert [u["content"]["text"] for u in updates(mirror.event(delta))] == ["Hel"]
    stored = item(5, "message", {"role": "agent", "text": "Hello"}, response_id="r1")
    assert [u["content"]["text"] for u in updates(mirror.item(stored))] == ["lo"]
    # All of it streamed: nothing more. Stored text that differs from the stream: all of it.
    mirror.event({"kind": "delta", "data": {"response_id": "r2", "text": "same"}})
    assert (
        mirror.item(item(6, "message", {"role": "agent", "text": "same"}, response_id="r2")) == []
    )
    mirror.event({"kind": "delta", "data": {"response_id": "r3", "text": "draft"}})
    other = item(7, "message", {"role": "agent", "text": "final"}, response_id="r3")
    assert [u["content"]["text"] for u in updates(mirror.item(other))] == ["final"]


def test_an_editor_attaching_mid_reply_gets_what_streamed_so_far() -> None:
    mirror = Mirror()
    mirror.event(
        {"kind": "delta", "data": {"response_id": "r1", "channel": "reasoning", "text": "hm"}}
    )
    mirror.event({"kind": "delta", "data": {"response_id": "r2", "text": "Hel"}})
    mirror.event({"kind": "delta", "data": {"response_id": "r2", "text": "lo"}})
    got = updates(mirror.streams_in_progress())
    assert [(u["sessionUpdate"], u["content"]["text"]) for u in got] == [
        ("agent_thought_chunk", "hm"),
        ("agent_message_chunk", "Hello"),
    ]
    mirror.item(item(3, "message", {"role": "agent", "text": "Hello"}, response_id="r2"))
    assert [u["content"]["text"] for u in updates(mirror.streams_in_progress())] == ["hm"]


def test_the_editors_own_prompt_is_confirmed_not_echoed_and_others_are_shown() -> None:
    mirror = Mirror()
    mirror.me = "zed"
    mirror.prompt_sent("mine")
    outputs = mirror.item(prompt(3, "mine", "zed"))
    assert outputs == [PromptStored(seq=3, by="zed", own=True)]
    outputs = mirror.item(prompt(4, "mine", "alice"))
    assert outputs[0] == PromptStored(seq=4, by="alice", own=False)
    assert updates(outputs)[0]["content"] == {"type": "text", "text": "mine"}
    # A refused prompt is forgotten: the same text later from this name is not taken for it.
    mirror.prompt_sent("again")
    mirror.prompt_refused("again")
    assert mirror.item(prompt(5, "again", "zed"))[0] == PromptStored(seq=5, by="zed", own=False)


def test_turns_end_by_status_by_later_turns_and_with_their_stop_reason() -> None:
    mirror = Mirror()
    for seq in (1, 2, 3):
        mirror.item(prompt(seq, f"p{seq}", "alice"))
    running = {"kind": "status", "data": {"state": "running", "queued": 2, "turn": 1}}
    assert mirror.event(running) == [TurnStarted(turn=1)]
    assert mirror.running == 1
    # An item of turn 2 says turn 1 is over.
    said = item(4, "message", {"role": "agent", "text": "two", "turn": 2})
    assert mirror.item(said)[:2] == [
        TurnEnded(turn=1, stop_reason="end_turn"),
        TurnStarted(turn=2),
    ]
    # Turn 2 was cancelled, and the agent said so: cancelled.
    mirror.item(item(5, "session_event", {"what": "cancelled"}, by="alice"))
    ended = item(6, "session_event", {"what": "turn_ended", "turn": 2, "stop_reason": "refusal"})
    assert mirror.item(ended) == [TurnEnded(turn=2, stop_reason="cancelled")]
    # Idle with nothing queued: every prompt's turn is over.
    idle = {"kind": "status", "data": {"state": "idle", "queued": 0}}
    assert mirror.event(idle) == [TurnEnded(turn=3, stop_reason="end_turn")]
    assert mirror.event(idle) == []


def test_turns_a_restarted_host_stopped_end_cancelled() -> None:
    mirror = Mirror()
    for seq in (1, 2, 3):
        mirror.item(prompt(seq, f"p{seq}", "alice"))
    mirror.event({"kind": "status", "data": {"state": "running", "queued": 2, "turn": 1}})
    restarted = {"what": "host_restarted", "interrupted_turn": 1, "dropped_prompts": [2, 7]}
    assert mirror.item(item(9, "session_event", restarted, by="host")) == [
        TurnEnded(turn=1, stop_reason="cancelled"),
        TurnEnded(turn=2, stop_reason="cancelled"),
    ]
    assert mirror.running is None
    idle = {"kind": "status", "data": {"state": "idle", "queued": 0}}
    assert mirror.event(idle) == [TurnEnded(turn=3, stop_reason="end_turn")]


def test_a_turn_ended_item_gives_the_agents_stop_reason() -> None:
    mirror = Mirror()
    mirror.item(prompt(1, "go", "alice"))
    mirror.event({"kind": "status", "data": {"state": "running", "queued": 0, "turn": 1}})
    ended = item(2, "session_event", {"what": "turn_ended", "turn": 1, "stop_reason": "max_tokens"})
    assert mirror.item(ended) == [TurnEnded(turn=1, stop_reason="max_tokens")]


def test_permission_requests_open_until_decided_and_an_approval_keeps_them_open() -> None:
    mirror = Mirror()
    request = item(
        7,
        "permission_request",
        {
            "request_id": "perm_1",
            "title": "Edit notes",
            "tool_call_id": "call_1",
            "turn": 5,
            "options": [
                {"option_id": "yes", "name": "Allow", "kind": "allow_once"},
                {"option_id": "odd", "name": "Odd", "kind": "maybe"},
                {"option_id": "no", "name": "Deny", "kind": "reject_once"},
            ],
            "tool_call": {"tool_call_id": "call_1", "title": "Edit notes", "kind": "edit"},
        },
        status="action_required",
    )
    (opened,) = [o for o in mirror.item(request) if isinstance(o, PermissionOpened)]
    params = {"sessionId": "main", "toolCall": opened.tool_call, "options": opened.options}
    schema.RequestPermissionRequest.model_validate(params)
    assert opened.tool_call["toolCallId"] == "5:call_1"
    assert [o["optionId"] for o in opened.options] == ["yes", "no"]
    assert mirror.open_permissions() == [opened]
    assert opened.answerable_by("anyone", verified=False)

    approval = item(8, "permission_approval", {"request_id": "perm_1"}, by="bob")
    assert mirror.item(approval) == [PermissionClosed(request_id="perm_1", by="bob", approval=True)]
    assert mirror.open_permissions() == [opened]
    decision = item(9, "permission_decision", {"request_id": "perm_1"}, by="alice")
    assert mirror.item(decision) == [PermissionClosed(request_id="perm_1", by="alice")]
    assert mirror.open_permissions() == []


def test_a_request_the_policy_or_a_remembered_answer_decided_is_never_open() -> None:
    asked = {
        "request_id": "perm_1",
        "tool_call_id": "call_1",
        "turn": 5,
        "options": [{"option_id": "yes", "name": "Allow", "kind": "allow_once"}],
        "tool_call": {"tool_call_id": "call_1", "title": "Run tests", "kind": "execute"},
    }
    decided_by = {
        "policy": {"rule": "allow", "source": "policy.toml"},
        "remembered": {"scope": "session", "by": ["alice"]},
    }
    for key, why in decided_by.items():
        mirror = Mirror()
        request = item(7, "permission_request", {**asked, key: why}, status="action_required")
        outputs = mirror.item(request)
        assert not [o for o in outputs if isinstance(o, PermissionOpened)]
        # The call it asked about is still shown.
        assert [u["toolCallId"] for u in updates(outputs)] == ["5:call_1"]
        assert mirror.open_permissions() == []
        mirror.context([request])
        assert mirror.open_permissions() == []


def test_questions_open_as_the_agents_form_until_answered() -> None:
    form = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "title": "Name", "format": "email", "maxLength": 40},
            "size": {"type": "number", "minimum": 0.5, "default": 1},
            "tags": {
                "type": "array",
                "items": {"anyOf": [{"const": "a", "title": "A"}, {"const": "b", "title": "B"}]},
                "minItems": 1,
            },
            "pick": {"type": "string", "enum": ["x", "y"], "default": "y"},
        },
        "required": ["name"],
    }
    fields = form_fields(form)
    mirror = Mirror()
    asked = item(
        3,
        "elicitation_request",
        {
            "request_id": "ask_1",
            "message": "Who?",
            "fields": fields,
            "tool_call_id": "c",
            "turn": 2,
        },
        status="action_required",
    )
    (opened,) = mirror.item(asked)
    assert isinstance(opened, QuestionOpened)
    assert (opened.request_id, opened.message) == ("ask_1", "Who?")
    assert opened.tool_call_id == "2:c"  # the tool call as the editor knows it
    # What the editor is asked reads back as the very fields the host checks answers against.
    assert form_fields(opened.requested_schema) == fields
    assert mirror.open_questions() == [opened]
    assert mirror.item(asked, live=False) == []
    response = item(4, "elicitation_response", {"request_id": "ask_1", "action": "cancel"})
    assert mirror.item(response) == [QuestionClosed(request_id="ask_1", by="agent")]
    assert mirror.open_questions() == []
    # A field of a kind this end does not know: the editor is not asked.
    assert requested_schema([{"name": "x", "kind": "file"}]) is None


def test_settings_give_the_sessions_modes_models_and_options_and_their_changes() -> None:
    mirror = Mirror()
    mirror.context([item(1, "session_event", SETTINGS, by="host")])
    setup = mirror.session_setup()
    schema.NewSessionResponse.model_validate({"sessionId": "main", **setup})
    assert setup["modes"] == {
        "currentModeId": "default",
        "availableModes": [{"id": "default", "name": "Default"}, {"id": "plan", "name": "Plan"}],
    }
    assert setup["models"]["currentModelId"] == "fast"
    assert [o["type"] for o in setup["configOptions"]] == ["select", "boolean"]

    changed = {
        **SETTINGS,
        "modes": {**SETTINGS["modes"], "current": "plan"},
        "change": {"mode": "plan"},
    }
    outputs = mirror.item(item(2, "session_event", changed, by="zed"))
    assert updates(outputs) == [{"sessionUpdate": "current_mode_update", "currentModeId": "plan"}]
    assert outputs[-1] == SettingsStored(by="zed", change={"mode": "plan"})


def test_commands_and_the_plan_are_the_state_a_new_editor_gets() -> None:
    mirror = Mirror()
    commands = {
        "what": "commands",
        "commands": [{"name": "review", "description": "Review", "hint": "what"}],
    }
    mirror.context(
        [
            item(1, "session_event", commands),
            item(
                2, "plan", {"entries": [{"content": "a", "status": "pending", "priority": "high"}]}
            ),
        ]
    )
    got = updates(mirror.state_updates())
    assert got[0]["availableCommands"] == [
        {"name": "review", "description": "Review", "input": {"hint": "what"}}
    ]
    assert got[1]["sessionUpdate"] == "plan"


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=5)
    | st.binary(max_size=3)
    | st.floats(),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
KEYS = st.sampled_from(
    [
        "type",
        "data",
        "seq",
        "created_by",
        "response_id",
        "status",
        "kind",
        "role",
        "text",
        "turn",
        "what",
        "tool_call_id",
        "request_id",
        "options",
        "content",
        "entries",
        "state",
    ]
)
HOSTILE = st.dictionaries(KEYS, JSON | st.dictionaries(KEYS, JSON, max_size=6), max_size=6)


@given(st.lists(HOSTILE, max_size=8), st.lists(HOSTILE, max_size=4))
def test_no_map_from_the_host_makes_the_mirror_raise(
    items: list[dict[str, Any]], events: list[dict[str, Any]]
) -> None:
    mirror = Mirror()
    mirror.context(items)
    outputs = [output for value in items for output in mirror.item(value)]
    outputs += [output for value in events for output in mirror.event(value)]
    outputs += replay(items)
    sent = [mirror.session_setup(), *(u.update for u in mirror.state_updates())]
    for output in outputs:
        if isinstance(output, Update):
            sent.append(output.update)
        elif isinstance(output, PermissionOpened):
            sent += [output.tool_call, *output.options]
        elif isinstance(output, QuestionOpened):
            sent.append(output.requested_schema)
    json.dumps(sent, allow_nan=False)  # all of it goes to the editor as JSON


def test_what_json_cannot_carry_in_a_tool_calls_input_becomes_null() -> None:
    deep: Any = "bottom"
    for _ in range(200):
        deep = [deep]
    data = {
        "tool_call_id": "c",
        "input": {"raw": b"\x00", "nan": float("nan"), 1: "int key", "deep": deep},
    }
    (update,) = updates(replay([item(1, "tool_call", data)]))
    raw = update["rawInput"]
    assert raw["raw"] is None
    assert raw["nan"] is None
    assert 1 not in raw
    json.dumps(raw, allow_nan=False)


def test_a_request_the_policy_gives_to_named_people_is_theirs_to_answer() -> None:
    data = {
        "request_id": "perm_2",
        "options": [{"option_id": "yes", "name": "Allow", "kind": "allow_once"}],
        "approval": {"answer": ["host", "alice"], "approvals": 1},
    }
    (opened,) = [
        o
        for o in Mirror().item(item(3, "permission_request", data, status="action_required"))
        if isinstance(o, PermissionOpened)
    ]
    assert opened.answerable_by("alice", verified=True)
    assert not opened.answerable_by("alice", verified=False)  # a role link typed that name
    assert not opened.answerable_by("bob", verified=True)
    drivers = {**data, "approval": {"answer": ["drivers"]}}
    (opened,) = [
        o
        for o in Mirror().item(item(4, "permission_request", drivers, status="action_required"))
        if isinstance(o, PermissionOpened)
    ]
    assert opened.answerable_by("bob", verified=False)


def test_a_request_about_a_call_the_editor_has_not_seen_shows_the_call_first() -> None:
    mirror = Mirror()
    asked = {
        "request_id": "perm_3",
        "tool_call_id": "call_ask",
        "turn": 9,
        "options": [{"option_id": "yes", "name": "Allow", "kind": "allow_once"}],
        "tool_call": {"tool_call_id": "call_ask", "title": "Edit notes", "kind": "edit"},
    }
    outputs = mirror.item(item(10, "permission_request", asked, status="action_required"))
    (start,) = updates(outputs)
    assert start == {
        "sessionUpdate": "tool_call",
        "toolCallId": "9:call_ask",
        "title": "Edit notes",
        "kind": "edit",
    }
    assert isinstance(outputs[-1], PermissionOpened)
    # Once shown (or announced by the agent), a request about it asks only.
    again = {**asked, "request_id": "perm_4"}
    assert (
        updates(mirror.item(item(11, "permission_request", again, status="action_required"))) == []
    )
    announced = item(12, "tool_call", {"tool_call_id": "call_2", "turn": 9})
    mirror.item(announced)
    about_it = {**asked, "request_id": "perm_5", "tool_call_id": "call_2"}
    assert (
        updates(mirror.item(item(13, "permission_request", about_it, status="action_required")))
        == []
    )
    # A load's replay shows it the same way: once.
    got = updates(
        replay([item(1, "permission_request", asked), item(2, "permission_request", again)])
    )
    assert [u["toolCallId"] for u in got] == ["9:call_ask"]


FIELD_KEYS = st.sampled_from(
    ["name", "kind", "title", "description", "required", "default", "choices", "min", "max"]
)
FIELD_KINDS = st.sampled_from(["string", "number", "integer", "boolean", "choice", "choices"])
FIELD = st.dictionaries(FIELD_KEYS, JSON | FIELD_KINDS | st.lists(JSON | HOSTILE, max_size=3))


@given(st.lists(FIELD, max_size=4) | JSON)
def test_no_question_fields_from_the_host_make_the_form_raise_or_leave_json(fields: Any) -> None:
    schema = requested_schema(fields)
    json.dumps(schema, allow_nan=False)  # it goes to the editor as JSON
