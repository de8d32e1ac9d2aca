"""Every item kind and event, with hostile text in every field, renders to terminal text that
holds no control, format or separator character."""

from __future__ import annotations

import io
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from tests.terminal.hostile import CORPUS, LONE_SURROGATES, WIRE, dangerous
from tunnel.terminal.render import render_event, render_item
from tunnel.terminal.sanitize import printable

H = WIRE + LONE_SURROGATES
"""Every class at once, in every string of every item below."""


def _tool_call() -> dict[str, Any]:
    return {
        "tool_call_id": H,
        "title": H,
        "status": H,
        "kind": H,
        "locations": [{"path": H, "line": 3}, {"path": H, "line": H}],
        "input": {H: H, "nested": [H, {H: [H]}], "n": 1},
        "content": [
            {"type": "content", "text": H},
            {"type": "diff", "path": H, "old_text": H + "\n" + H, "new_text": H},
            {"type": "diff", "path": H, "new_text": H},
            {"type": "terminal", "terminal_id": H},
        ],
        "truncated": True,
    }


ITEMS: dict[str, dict[str, Any]] = {
    "user message": {"type": "message", "data": {"role": "user", "text": H}},
    "agent message": {"type": "message", "data": {"role": "assistant", "text": H}},
    "reasoning": {"type": "reasoning", "data": {"text": H}},
    "tool call": {"type": "tool_call", "data": _tool_call()},
    "tool call update": {"type": "tool_call_update", "data": _tool_call()},
    "tool call with a string input": {"type": "tool_call", "data": {"title": H, "input": H}},
    "tool result": {"type": "tool_result", "data": {"ok": False, "output": H}},
    "tool terminal": {
        "type": "tool_terminal",
        "data": {"command": [H, H], "exit_code": H, "output": H, "truncated": True},
    },
    "tool terminal killed": {"type": "tool_terminal", "data": {"command": [H], "signal": H}},
    "permission request": {
        "type": "permission_request",
        "data": {
            "request_id": H,
            "title": H,
            "tool_call": _tool_call(),
            "options": [{"option_id": H, "name": H, "kind": H}, H],
        },
    },
    "permission decision": {
        "type": "permission_decision",
        "data": {"request_id": H, "option_name": H, "option_id": H, "option_kind": H},
    },
    "plan": {"type": "plan", "data": {"entries": [{"status": H, "content": H}, H]}},
    "error": {"type": "error", "data": {"message": H}},
    "settings": {
        "type": "session_event",
        "data": {
            "what": "settings",
            "change": {H: {"id": H, "value": H}},
            "modes": {"current": H, "available": [{"id": H, "name": H}]},
            "models": {"current": H, "available": [{"id": H, "name": H}]},
        },
    },
    "settings, plain change": {
        "type": "session_event",
        "data": {"what": "settings", "change": {H: H}},
    },
    "commands": {
        "type": "session_event",
        "data": {"what": "commands", "commands": [{"name": H, "description": H}]},
    },
    "unsupported update": {
        "type": "session_event",
        "data": {"what": "unsupported_update", "kind": H},
    },
    "other session event": {
        "type": "session_event",
        "data": {"what": H, H: H, "deep": {H: [H]}},
    },
    "terminal output": {"type": "terminal", "data": {"text": H}},
    "terminal exit": {"type": "terminal_exit", "data": {"code": H}},
    "unknown kind": {"type": H, "data": {H: H, "bytes": H.encode("utf-8", "surrogatepass")}},
    "data not a map": {"type": "message", "data": H},
}


def _printed(renderable: Any) -> str:
    out = io.StringIO()
    Console(file=out, width=100, color_system=None, highlight=False).print(renderable)
    return out.getvalue()


@pytest.mark.parametrize("kind", ITEMS)
def test_every_item_kind_prints_no_control_character(kind: str) -> None:
    item = {"seq": H, "created_by": H, **ITEMS[kind]}
    printed = _printed(render_item(item))
    assert dangerous(printed) == []
    if kind != "data not a map":  # nothing of it is shown: there is no text to show
        assert "\\x1b" in printed  # the hostile text is shown, escaped, not dropped


def test_wire_text_is_shown_in_its_escaped_form() -> None:
    item = {"seq": 1, "created_by": "x", "type": "message", "data": {"role": "user"}}
    item["data"]["text"] = CORPUS["osc 52 clipboard, bel"]
    assert render_item(item).plain == "x: \\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2gK\\x07"


@pytest.mark.parametrize(
    "event",
    [
        {"kind": "status", "data": {"state": H, "queued": 2}},
        {"kind": "status", "data": {"state": H, "queued": H}},
        {"kind": H, "data": {H: H}},
    ],
)
def test_events_print_no_control_character(event: dict[str, Any]) -> None:
    line = render_event(event)
    if line is not None:
        assert dangerous(_printed(line)) == []


def test_data_nested_past_any_sense_is_cut_not_a_crash() -> None:
    deep: Any = H
    for _ in range(5000):
        deep = [deep]
    item = {"seq": 1, "type": "tool_call", "data": {"title": H, "input": deep}}
    assert dangerous(_printed(render_item(item))) == []


_SCALARS = st.one_of(
    st.text(alphabet=st.sampled_from([*WIRE, *"ab[]/\\\n"]), max_size=40),
    st.text(max_size=20),
    st.integers(),
    st.floats(allow_nan=True),
    st.booleans(),
    st.none(),
    st.binary(max_size=10),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)
_KEYS = [
    *("text", "role", "title", "input", "content", "output", "command", "options", "what"),
    *("change", "commands", "entries", "message", "code", "kind", "locations", "status"),
]
_KINDS = [item["type"] for item in ITEMS.values() if isinstance(item["type"], str)]


@given(
    kind=st.sampled_from([*_KINDS, "nothing known"]),
    data=st.dictionaries(
        st.sampled_from(_KEYS),
        _VALUES,
    ),
    who=_SCALARS,
)
def test_any_item_data_prints_no_control_character(kind: str, data: Any, who: Any) -> None:
    printed = _printed(render_item({"seq": 1, "created_by": who, "type": kind, "data": data}))
    assert dangerous(printed) == []


def test_render_escapes_before_rich_sees_the_text() -> None:
    # The same form as `tunnel log show` and every other surface.
    text = H
    item = {"seq": 1, "created_by": "x", "type": "error", "data": {"message": text}}
    assert render_item(item).plain == "error: " + printable(text)
