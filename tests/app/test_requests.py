"""Teammate requests: every valid op round-trips, anything else is a BadRequest and only that."""

from __future__ import annotations

import contextlib
import math
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunnel.app.errors import BadRequest
from tunnel.app.host_messages import pack
from tunnel.app.requests import (
    MAX_HISTORY_ITEMS,
    MAX_SEQ,
    Cancel,
    ElicitationAnswer,
    History,
    Input,
    ListPaths,
    PermissionAnswer,
    Prompt,
    PromptImage,
    Request,
    Resize,
    SetConfig,
    SetMode,
    SetModel,
    Subscribe,
    decode_request,
    encode_request,
)

requests: st.SearchStrategy[Request] = st.one_of(
    st.builds(Subscribe, after=st.none() | st.integers(min_value=-1, max_value=2**62)),
    st.builds(Subscribe, after=st.none(), tail=st.integers(min_value=0, max_value=MAX_SEQ)),
    st.builds(
        History,
        before=st.integers(min_value=0, max_value=MAX_SEQ),
        limit=st.integers(min_value=1, max_value=MAX_HISTORY_ITEMS),
    ),
    st.builds(Prompt, text=st.text(min_size=1, max_size=200).filter(lambda t: t.strip() != "")),
    st.builds(
        Prompt,
        text=st.just("look"),
        images=st.lists(
            st.builds(
                PromptImage,
                mime_type=st.sampled_from(["image/png", "image/jpeg"]),
                data=st.binary(max_size=100),
            ),
            max_size=4,
        ).map(tuple),
    ),
    st.builds(
        PermissionAnswer,
        request_id=st.text(max_size=50),
        option_id=st.text(max_size=50),
    ),
    st.builds(
        ElicitationAnswer,
        request_id=st.text(max_size=50),
        action=st.sampled_from(["accept", "decline", "cancel"]),
        content=st.none()
        | st.dictionaries(
            st.text(max_size=20),
            st.text(max_size=20)
            | st.integers(min_value=-(2**53), max_value=2**53)
            | st.floats(allow_nan=False)
            | st.booleans()
            | st.lists(st.text(max_size=10), max_size=5),
            max_size=5,
        ),
    ),
    st.just(Cancel()),
    st.builds(ListPaths, prefix=st.text(max_size=50)),
    st.builds(SetMode, mode_id=st.text(max_size=50)),
    st.builds(SetModel, model_id=st.text(max_size=50)),
    st.builds(
        SetConfig, config_id=st.text(max_size=50), value=st.text(max_size=50) | st.booleans()
    ),
    st.builds(Input, data=st.binary(max_size=200)),
    st.builds(
        Resize,
        cols=st.integers(min_value=1, max_value=1000),
        rows=st.integers(min_value=1, max_value=1000),
    ),
)


@given(requests)
def test_every_request_round_trips(request: Request) -> None:
    assert decode_request(encode_request(request)) == request


msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats()
    | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(
            st.text(max_size=10) | st.integers(-(2**63), 2**63 - 1), children, max_size=5
        )
    ),
    max_leaves=20,
)


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_bad_request(data: bytes) -> None:
    with contextlib.suppress(BadRequest):
        decode_request(data)


@settings(max_examples=1000, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "op",
                "after",
                "tail",
                "before",
                "limit",
                "text",
                "request_id",
                "images",
                "action",
                "content",
                "option_id",
                "mode_id",
                "model_id",
                "config_id",
                "value",
                "data",
                "cols",
                "rows",
            ]
        )
        | st.text(max_size=5),
        msgpack_values,
        max_size=5,
    ),
    st.sampled_from(
        [
            "subscribe",
            "history",
            "prompt",
            "permission",
            "elicitation",
            "paths",
            "cancel",
            "set_mode",
            "set_model",
            "set_config",
            "input",
            "resize",
            "x",
        ]
    ),
)
def test_arbitrary_maps_raise_only_bad_request(message: dict[str, Any], op: str) -> None:
    message = {**message, "op": op} if "op" not in message else message
    try:
        decoded = decode_request(msgpack.packb(message, use_bin_type=True))
    except BadRequest:
        return
    # Whatever got through must have exactly the documented shape.
    assert encode_request(decoded) == pack(msgpack.unpackb(encode_request(decoded)))


@pytest.mark.parametrize(
    ("message", "why"),
    [
        ({"op": "prompt", "text": "   "}, "empty prompt"),
        ({"op": "elicitation", "request_id": "a", "action": "yes"}, "accept, decline"),
        ({"op": "paths", "prefix": "x" * 1025}, "longer"),
        (
            {"op": "prompt", "text": "x", "images": [{"mime_type": "image/svg+xml", "data": b""}]},
            "must be one of",
        ),
        ({"op": "prompt", "text": "x", "images": [{"mime_type": "image/png"}]}, "must be bytes"),
        (
            {"op": "prompt", "text": "x", "images": [{"mime_type": "image/png", "data": b""}] * 5},
            "at most 4 images",
        ),
        (
            {
                "op": "prompt",
                "text": "x",
                "images": [{"mime_type": "image/png", "data": b"1" * 200_000}],
            },
            "larger than",
        ),
        (
            {"op": "elicitation", "request_id": "a", "action": "accept", "content": {"x": {}}},
            "kind no form asks",
        ),
        (
            {"op": "elicitation", "request_id": "a", "action": "accept", "content": {"x": [1]}},
            "kind no form asks",
        ),
        ({"op": "prompt", "text": "x" * 70_000}, "longer"),
        ({"op": "prompt", "text": b"bytes"}, "must be str"),
        ({"op": "prompt", "text": "hi", "extra": 1}, "unexpected"),
        ({"op": "resize", "cols": True, "rows": 10}, "must be int"),
        ({"op": "resize", "cols": 0, "rows": 10}, "out of range"),
        ({"op": "subscribe", "after": math.nan}, "must be int"),
        ({"op": "subscribe", "after": -5}, "out of range"),
        ({"op": "subscribe", "after": 2**63}, "out of range"),
        ({"op": "subscribe", "after": 7, "tail": 10}, "only with 'after' nil"),
        ({"op": "subscribe", "after": -1, "tail": 10}, "only with 'after' nil"),
        ({"op": "subscribe", "after": None, "tail": -1}, "out of range"),
        ({"op": "subscribe", "after": None, "tail": True}, "must be int"),
        ({"op": "subscribe", "after": None, "tail": 1.0}, "must be int"),
        ({"op": "subscribe", "after": None, "tail": 5, "limit": 5}, "unexpected"),
        ({"op": "history"}, "'before' must be int"),
        ({"op": "history", "before": None}, "'before' must be int"),
        ({"op": "history", "before": -1}, "out of range"),
        ({"op": "history", "before": 2**63}, "out of range"),
        ({"op": "history", "before": False}, "must be int"),
        ({"op": "history", "before": 5, "limit": 0}, "must be 1 to 200"),
        ({"op": "history", "before": 5, "limit": MAX_HISTORY_ITEMS + 1}, "must be 1 to 200"),
        ({"op": "history", "before": 5, "limit": "10"}, "must be int"),
        ({"op": "history", "before": 5, "after": 1}, "unexpected"),
        ({"op": "input", "data": "text"}, "must be bytes"),
        ({"op": "set_mode", "mode_id": 3}, "must be str"),
        ({"op": "set_mode", "mode_id": "m" * 300}, "longer"),
        ({"op": "set_model", "model_id": "x", "mode_id": "y"}, "unexpected"),
        ({"op": "set_config", "config_id": "x", "value": 1}, "must be str"),
        ({"op": "set_config", "config_id": "x"}, "must be str"),
        ({"op": "shell", "cmd": "rm -rf /"}, "unknown op"),
        ({"text": "no op"}, "unknown op"),
    ],
)
def test_malformed_requests_name_the_problem(message: dict[str, Any], why: str) -> None:
    with pytest.raises(BadRequest, match=why):
        decode_request(msgpack.packb(message, use_bin_type=True))


def test_history_and_a_bounded_subscribe_decode_to_their_documented_shape() -> None:
    def decode(message: dict[str, Any]) -> Request:
        return decode_request(msgpack.packb(message, use_bin_type=True))

    # A fresh subscribe: no bound given is the host's default; tail 0 is only the live tail.
    assert decode({"op": "subscribe", "after": None}) == Subscribe(after=None, tail=None)
    assert decode({"op": "subscribe"}) == Subscribe(after=None, tail=None)
    assert decode({"op": "subscribe", "after": None, "tail": 0}) == Subscribe(after=None, tail=0)
    # A resume is unchanged, and what an older client sends still decodes.
    assert decode({"op": "subscribe", "after": 41}) == Subscribe(after=41)
    assert decode({"op": "history", "before": 800}) == History(before=800, limit=MAX_HISTORY_ITEMS)
    assert decode({"op": "history", "before": 0, "limit": None}) == History(
        before=0, limit=MAX_HISTORY_ITEMS
    )
    assert decode({"op": "history", "before": 9, "limit": 1}) == History(before=9, limit=1)
    # Left out when nil, so a host from before `tail` accepts what this client sends.
    assert msgpack.unpackb(encode_request(Subscribe(after=None))) == {
        "op": "subscribe",
        "after": None,
    }


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1",  # never-used msgpack byte
        msgpack.packb([1, 2, 3]),
        msgpack.packb({1: "int key"}),
        msgpack.ExtType(1, b"x").data,
        b"\xdb\xff\xff\xff\xff",  # str32 declaring 4 GiB with no data
        b"\x91" * 100_000,  # nesting far deeper than any request
        msgpack.packb({"op": "prompt", "text": "ok"}) + b"\x00",  # trailing bytes
    ],
)
def test_nasty_bytes_are_bad_requests(data: bytes) -> None:
    with pytest.raises(BadRequest):
        decode_request(data)
