"""The pure pieces of the ACP session: budgets on tool calls, settings, and the stdio transport."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from acp import RequestError, schema
from hypothesis import given, settings
from hypothesis import strategies as st

from tunnel.agents.acp_settings import Change, Settings
from tunnel.agents.acp_transport import StdioTransport
from tunnel.agents.acp_updates import clip_content, clip_value, result_text
from tunnel.agents.errors import SessionError

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3000),
    lambda children: (
        st.lists(children, max_size=8) | st.dictionaries(st.text(max_size=10), children, max_size=8)
    ),
    max_leaves=60,
)


@settings(max_examples=200, deadline=None)
@given(json_values, st.integers(min_value=256, max_value=4096))
def test_a_clipped_value_fits_its_budget_and_says_whether_it_was_cut(
    value: Any, limit: int
) -> None:
    clipped, cut = clip_value(value, limit)
    assert len(json.dumps(clipped)) <= limit
    assert cut == (clipped != value)


def test_a_preview_of_wide_characters_still_fits_its_budget() -> None:
    # Too many keys for string cuts to help, and each emoji takes twelve bytes escaped.
    value = [{str(n): "\N{GRINNING FACE}" * 100 for n in range(8)}] * 8
    clipped, cut = clip_value(value, 256)
    assert cut
    assert clipped["truncated"] is True
    assert len(json.dumps(clipped)) <= 256


def test_a_long_string_keeps_its_start_and_says_how_much_is_missing() -> None:
    clipped, cut = clip_value({"command": "x" * 10_000, "short": "kept"}, 2000)
    assert cut
    assert clipped["short"] == "kept"
    assert clipped["command"].startswith("xxxx")
    assert clipped["command"].endswith("more characters not stored]")


def test_clipped_content_keeps_each_entrys_shape() -> None:
    entries = [
        {"type": "diff", "path": "a.txt", "old_text": "a\n" * 50_000, "new_text": "b\n" * 50_000}
    ] + [{"type": "text", "text": f"line {n}"} for n in range(3)]
    clipped, cut = clip_content(entries, 4096)
    assert cut
    assert len(json.dumps(clipped)) <= 4096
    assert clipped[0]["type"] == "diff"
    assert clipped[0]["path"] == "a.txt"
    assert [e["type"] for e in clipped] == ["diff", "text", "text", "text"]
    small, cut = clip_content(entries[1:], 4096)
    assert (small, cut) == (entries[1:], False)


def test_too_many_entries_are_left_out_with_a_note() -> None:
    entries = [{"type": "text", "text": f"entry {n}"} for n in range(2000)]
    clipped, cut = clip_content(entries, 2048)
    assert cut
    assert len(json.dumps(clipped)) <= 2048
    assert clipped[-1]["text"].endswith("more content entries not stored]")


def _modes() -> schema.SessionModeState:
    return schema.SessionModeState(
        current_mode_id="a",
        available_modes=[
            schema.SessionMode(id="a", name="A"),
            schema.SessionMode(id="b", name="B"),
        ],
    )


def test_a_results_text_is_what_the_command_printed_when_the_raw_output_says() -> None:
    # codex-acp's shell: no content, the output among ids and timings in the raw output.
    codex = {
        "call_id": "call_1",
        "command": ["/bin/bash", "-lc", "echo hi"],
        "stdout": "hi\n",
        "stderr": "",
        "aggregated_output": "hi\n",
        "exit_code": 0,
        "formatted_output": "hi\n",
    }
    assert result_text([], codex) == "hi\n"
    assert result_text([], {"stdout": "only out\n", "exit_code": 1}) == "only out\n"
    # The text content wins; a raw output that names no printed text is shown as JSON.
    assert result_text([{"type": "text", "text": "said"}], codex) == "said"
    assert result_text([], {"lines": 3}) == '{"lines": 3}'
    assert result_text([], {"stdout": 5}) == '{"stdout": 5}'
    assert result_text([], "plain") == "plain"
    assert result_text([], None) == ""


def test_settings_take_the_unstable_models_from_the_raw_result() -> None:
    state = Settings()
    assert not state.known
    state.start(
        _modes(),
        None,
        {"models": {"currentModelId": "m1", "availableModels": [{"modelId": "m1", "name": "M"}]}},
    )
    assert state.snapshot() == {
        "modes": {
            "current": "a",
            "available": [{"id": "a", "name": "A"}, {"id": "b", "name": "B"}],
        },
        "models": {"current": "m1", "available": [{"id": "m1", "name": "M"}]},
        "config_options": None,
        "approval": {
            "asks": False,
            "text": "may edit files and run commands without asking (a mode not known to ask)",
        },
    }
    assert state.mode_change("b") == Change(method="set_mode", target="b", about="mode")
    assert state.model_change("m1") == Change(method="set_model", target="m1", about="model")
    assert state.mode_change("b").record() == {"mode": "b"}
    for bad in (lambda: state.mode_change("zz"), lambda: state.model_change("zz")):
        with pytest.raises(SessionError) as refused:
            bad()
        assert refused.value.code == "unknown_request"


def test_a_model_config_option_is_preferred_and_values_are_checked() -> None:
    state = Settings()
    option = schema.SessionConfigOptionSelect(
        id="model",
        name="Model",
        category="model",
        type="select",
        current_value="m1",
        options=[
            schema.SessionConfigSelectOption(value="m1", name="One"),
            schema.SessionConfigSelectOption(value="m2", name="Two"),
        ],
    )
    flag = schema.SessionConfigOptionBoolean(id="t", name="T", type="boolean", current_value=False)
    raw = {"models": {"currentModelId": "m1", "availableModels": [{"modelId": "m1", "name": "M"}]}}
    state.start(None, [option, flag], raw)
    to_m2 = state.model_change("m2")
    assert to_m2 == Change(method="set_config", target="model", value="m2", about="model")
    assert to_m2.record() == {"model": "m2"}
    flag_on = state.config_change("t", True)
    assert flag_on == Change(method="set_config", target="t", value=True)
    assert flag_on.record() == {"config": {"id": "t", "value": True}}
    with pytest.raises(SessionError):
        state.config_change("t", "yes")
    with pytest.raises(SessionError):
        state.config_change("model", "m9")
    with pytest.raises(SessionError) as no_mode:
        state.mode_change("a")
    assert no_mode.value.code == "not_supported"


def _transport(lines: list[dict[str, Any] | str], seen: list[dict[str, Any]]) -> StdioTransport:
    reader = asyncio.StreamReader(limit=64)
    for line in lines:
        reader.feed_data((line if isinstance(line, str) else json.dumps(line)).encode() + b"\n")
    reader.feed_eof()

    class Writer:
        def __init__(self) -> None:
            self.sent: list[bytes] = []

        def write(self, data: bytes) -> None:
            self.sent.append(data)

        async def drain(self) -> None:
            pass

        def close(self) -> None:
            pass

    def hook(message: dict[str, Any]) -> bool:
        seen.append(message)
        return message["params"].get("take") is True

    return StdioTransport(reader, Writer(), on_notification=hook, keep_results_of=["session/new"])  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_the_transport_shows_notifications_first_and_keeps_raw_results() -> None:
    seen: list[dict[str, Any]] = []
    long_line = {"jsonrpc": "2.0", "method": "session/update", "params": {"x": "y" * 500}}
    transport = _transport(
        [
            "a banner that is not JSON",
            {"jsonrpc": "2.0", "method": "session/update", "params": {"take": True}},
            long_line,
            {"jsonrpc": "2.0", "id": 0, "result": {"sessionId": "s", "models": {"x": 1}}},
        ],
        seen,
    )
    await transport.send({"jsonrpc": "2.0", "id": 0, "method": "session/new", "params": {}})
    assert transport.waiting_for("session/new")
    assert await transport.receive() == long_line  # longer than the reader's buffer: joined
    assert len(seen) == 2  # the first was taken by the hook
    response = await transport.receive()
    assert response is not None
    assert response["id"] == 0
    assert transport.results["session/new"]["models"] == {"x": 1}
    assert not transport.waiting_for("session/new")
    assert await transport.receive() is None


@pytest.mark.anyio
async def test_own_requests_are_answered_without_reaching_the_package() -> None:
    reader = asyncio.StreamReader()

    class Writer:
        def write(self, data: bytes) -> None:
            request = json.loads(data)
            answer: dict[str, Any] = {"jsonrpc": "2.0", "id": request["id"]}
            if request["params"].get("fail"):
                answer["error"] = {"code": -32602, "message": "Invalid params", "data": {"a": 1}}
            else:
                answer["result"] = {"ok": True}
            reader.feed_data(json.dumps(answer).encode() + b"\n")

        async def drain(self) -> None:
            pass

        def close(self) -> None:
            pass

    transport = StdioTransport(reader, Writer())  # type: ignore[arg-type]
    receiving = asyncio.ensure_future(transport.receive())
    assert await transport.request("session/set_model", {}) == {"ok": True}
    with pytest.raises(RequestError) as refused:
        await transport.request("session/set_model", {"fail": True})
    assert (refused.value.code, refused.value.data) == (-32602, {"a": 1})
    assert not receiving.done()  # neither answer went to the package
    reader.feed_eof()
    assert await receiving is None
