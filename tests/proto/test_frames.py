"""Frames: encode/decode round trips, and every malformed input becomes a ProtocolError."""

from __future__ import annotations

import struct
import tracemalloc
from typing import Any, cast

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tunnel.proto import (
    MAX_CHANNEL_ID,
    MAX_WINDOW,
    Cast,
    Close,
    CloseCode,
    Cut,
    Data,
    Frame,
    FrameError,
    Hello,
    Join,
    LimitError,
    Limits,
    LocalProtocolError,
    Open,
    Part,
    ProtocolError,
    RemoteProtocolError,
    Window,
    decode_frame,
    encode_frame,
)
from tunnel.proto.frames import MAX_CAST_GROUPS, _decode_fast, _decode_general, encode_cast

from .strategies import channels, frames, pack


def frame(c: Any, k: Any, p: Any) -> bytes:
    return pack({"c": c, "k": k, "p": p})


@settings(max_examples=500, deadline=None)
@given(frames)
def test_every_kind_round_trips(f: Frame) -> None:
    assert decode_frame(encode_frame(f)) == f


def test_encoded_frame_is_a_map_of_c_k_p() -> None:
    wire = msgpack.unpackb(encode_frame(Data(channel=7, data=b"xy")))
    assert wire == {"c": 7, "k": "data", "p": {"d": b"xy"}}
    hello = msgpack.unpackb(encode_frame(Hello(payload={"role": "relay"})))
    assert hello == {"c": None, "k": "hello", "p": {"role": "relay"}}


BROADCAST_FRAMES: list[tuple[Frame, dict[str, Any]]] = [
    (Cast(channel=None, data=b"sealed"), {"c": None, "k": "cast", "p": {"d": b"sealed"}}),
    (Cast(channel=5, data=b"sealed"), {"c": 5, "k": "cast", "p": {"d": b"sealed"}}),
    (Cast(channel=0, data=b"x" * 70000), {"c": 0, "k": "cast", "p": {"d": b"x" * 70000}}),
    (Join(channel=2), {"c": 2, "k": "join", "p": {}}),
    # Broadcast groups (docs/protocol.md, "Broadcast groups"): group 0 is left out.
    (
        Cast(channel=None, data=b"sealed", group=5),
        {"c": None, "k": "cast", "p": {"d": b"sealed", "g": 5}},
    ),
    (
        Cast(channel=None, data=b"x", group=MAX_CAST_GROUPS - 1),
        {"c": None, "k": "cast", "p": {"d": b"x", "g": MAX_CAST_GROUPS - 1}},
    ),
    (Join(channel=2, group=1), {"c": 2, "k": "join", "p": {"g": 1}}),
    (Join(channel=2, group=0), {"c": 2, "k": "join", "p": {}}),
    (Part(channel=MAX_CHANNEL_ID), {"c": MAX_CHANNEL_ID, "k": "part", "p": {}}),
    (Cut(channel=1), {"c": 1, "k": "cut", "p": {}}),
]


@pytest.mark.parametrize(
    ("f", "wire"), BROADCAST_FRAMES, ids=[str(type(f).__name__) for f, _ in BROADCAST_FRAMES]
)
def test_broadcast_frames_round_trip_in_their_documented_wire_form(
    f: Frame, wire: dict[str, Any]
) -> None:
    raw = encode_frame(f)
    assert raw == msgpack.packb(wire, use_bin_type=True)
    assert decode_frame(raw) == f
    assert decode_frame(bytearray(raw)) == f


def test_a_cast_over_max_data_size_is_refused_on_both_paths() -> None:
    for channel in (None, 1):
        raw = encode_frame(Cast(channel=channel, data=b"x" * 101))
        assert decode_frame(raw, max_data_size=101) == Cast(channel=channel, data=b"x" * 101)
        with pytest.raises(LimitError) as info:
            decode_frame(raw, max_data_size=100)
        assert info.value.code == CloseCode.LIMIT_REACHED


def test_decode_accepts_bytearray_and_memoryview() -> None:
    raw = encode_frame(Window(channel=3, n=10))
    assert decode_frame(bytearray(raw)) == Window(channel=3, n=10)
    assert decode_frame(memoryview(raw)) == Window(channel=3, n=10)


BAD_GROUPS: list[tuple[str, Any]] = [
    ("group MAX_CAST_GROUPS", MAX_CAST_GROUPS),
    ("group -1", -1),
    ("group 2**64-1", 2**64 - 1),
    ("a bool group", True),
    ("a float group", 1.0),
    ("a str group", "1"),
    ("a nil group", None),
    ("a bin group", b"\x01"),
]
"""Values of `g` the decoder refuses (4000) in a host's `cast` and in a `join`."""

# (name, bytes, expected error class): each must be refused with exactly that class or a subclass.
NASTY: list[tuple[str, bytes | str, type[RemoteProtocolError]]] = [
    ("empty", b"", FrameError),
    ("not msgpack", b"\xc1", FrameError),
    ("text message", "hello", FrameError),
    ("truncated map", b"\x83\xa1c", FrameError),
    ("trailing bytes", frame(1, "window", {"n": 1}) + b"\x00", FrameError),
    ("two frames in one message", frame(1, "window", {"n": 1}) * 2, FrameError),
    ("an array, not a map", pack([1, "window", {"n": 1}]), FrameError),
    ("nil", pack(None), FrameError),
    ("unknown kind", frame(1, "ping", {}), FrameError),
    ("kind is bytes", frame(1, b"data", {"d": b"x"}), FrameError),
    ("kind is an int", frame(1, 2, {"d": b"x"}), FrameError),
    ("missing c", pack({"k": "window", "p": {"n": 1}}), FrameError),
    ("missing p", pack({"c": 1, "k": "window"}), FrameError),
    ("extra top-level key", pack({"c": 1, "k": "window", "p": {"n": 1}, "x": 0}), FrameError),
    ("payload not a map", frame(1, "window", [1]), FrameError),
    ("extra payload key", frame(1, "window", {"n": 1, "m": 2}), FrameError),
    ("missing payload key", frame(1, "close", {"code": 1000}), FrameError),
    ("hello with a channel", frame(1, "hello", {}), FrameError),
    ("data with nil channel", frame(None, "data", {"d": b"x"}), FrameError),
    ("bool channel", frame(True, "data", {"d": b"x"}), FrameError),
    ("negative channel", frame(-1, "data", {"d": b"x"}), FrameError),
    ("channel over 2**32-1", frame(2**32, "data", {"d": b"x"}), FrameError),
    ("channel is 2**64-1", frame(2**64 - 1, "data", {"d": b"x"}), FrameError),
    ("float channel", frame(1.0, "data", {"d": b"x"}), FrameError),
    ("NaN channel", frame(float("nan"), "data", {"d": b"x"}), FrameError),
    ("data is str", frame(1, "data", {"d": "x"}), FrameError),
    ("data is empty", frame(1, "data", {"d": b""}), FrameError),
    ("window of 0", frame(1, "window", {"n": 0}), FrameError),
    ("window over 2**32-1", frame(1, "window", {"n": 2**32}), FrameError),
    ("bool window", frame(1, "window", {"n": True}), FrameError),
    ("negative huge window", frame(1, "window", {"n": -(2**63)}), FrameError),
    ("close code below 1000", frame(1, "close", {"code": 999, "reason": ""}), FrameError),
    ("close code 5000", frame(1, "close", {"code": 5000, "reason": ""}), FrameError),
    ("close code is str", frame(1, "close", {"code": "1000", "reason": ""}), FrameError),
    ("close reason is bytes", frame(1, "close", {"code": 1000, "reason": b""}), FrameError),
    ("open path is nil", frame(1, "open", {"path": None, "meta": {}}), FrameError),
    ("open meta is a list", frame(1, "open", {"path": "s", "meta": []}), FrameError),
    ("NaN in meta", frame(1, "open", {"path": "s", "meta": {"x": float("nan")}}), FrameError),
    ("inf in hello", frame(None, "hello", {"x": float("inf")}), FrameError),
    ("int key in meta", frame(1, "open", {"path": "s", "meta": {1: 2}}), FrameError),
    ("bytes key in meta", frame(1, "open", {"path": "s", "meta": {b"k": 2}}), FrameError),
    ("bytes key at top level", pack({b"c": 1, b"k": "window", b"p": {b"n": 1}}), FrameError),
    (
        "fixext in meta",
        frame(1, "open", {"path": "s", "meta": {"e": msgpack.ExtType(5, b"x")}}),
        FrameError,
    ),
    (
        "empty ext8 in meta",
        frame(1, "open", {"path": "s", "meta": {"e": msgpack.ExtType(5, b"")}}),
        FrameError,
    ),
    (
        "timestamp in meta",
        frame(1, "open", {"path": "s", "meta": {"t": msgpack.Timestamp(1)}}),
        FrameError,
    ),
    ("ext as the whole message", pack(msgpack.ExtType(1, b"abc")), FrameError),
    ("1000 nested arrays", b"\x91" * 1000 + b"\xc0", FrameError),
    ("100000 nested maps", b"\x81\xa1a" * 100_000 + b"\xc0", FrameError),
    (
        "meta nested 9 deep",
        frame(1, "open", {"path": "s", "meta": {"a": [[[[[[[[1]]]]]]]]}}),
        LimitError,
    ),
    (
        "meta with 65 keys",
        frame(1, "open", {"path": "s", "meta": {str(i): i for i in range(65)}}),
        LimitError,
    ),
    ("path of 4097 bytes", frame(1, "open", {"path": "p" * 4097, "meta": {}}), LimitError),
    ("reason of 4097 bytes", frame(1, "close", {"code": 1000, "reason": "é" * 2049}), LimitError),
    (
        "bin of 4097 bytes in meta",
        frame(1, "open", {"path": "s", "meta": {"b": b"x" * 4097}}),
        LimitError,
    ),
    ("data over 256 KiB", frame(1, "data", {"d": b"x" * (256 * 1024 + 1)}), LimitError),
    ("cast with empty d", frame(None, "cast", {"d": b""}), FrameError),
    ("cast to a channel with empty d", frame(1, "cast", {"d": b""}), FrameError),
    ("cast with str d", frame(None, "cast", {"d": "x"}), FrameError),
    ("cast with int d", frame(1, "cast", {"d": 1}), FrameError),
    ("cast with an extra key", frame(None, "cast", {"d": b"x", "n": 1}), FrameError),
    ("cast without d", frame(None, "cast", {}), FrameError),
    ("cast with a bool channel", frame(True, "cast", {"d": b"x"}), FrameError),
    ("cast with a float channel", frame(1.0, "cast", {"d": b"x"}), FrameError),
    ("cast over 256 KiB", frame(None, "cast", {"d": b"x" * (256 * 1024 + 1)}), LimitError),
    (
        "cast to a channel over 256 KiB",
        frame(1, "cast", {"d": b"x" * (256 * 1024 + 1)}),
        LimitError,
    ),
    *(
        (f"cast with {name}", frame(None, "cast", {"d": b"x", "g": g}), FrameError)
        for name, g in BAD_GROUPS
    ),
    *((f"join with {name}", frame(1, "join", {"g": g}), FrameError) for name, g in BAD_GROUPS),
    ("cast to a channel with a group", frame(1, "cast", {"d": b"x", "g": 1}), FrameError),
    ("cast to a channel with group 0", frame(1, "cast", {"d": b"x", "g": 0}), FrameError),
    (
        "cast with a group and an extra key",
        frame(None, "cast", {"d": b"x", "g": 1, "n": 1}),
        FrameError,
    ),
    ("cast with a group and no d", frame(None, "cast", {"g": 1}), FrameError),
    ("join with a group and an extra key", frame(1, "join", {"g": 1, "d": b"x"}), FrameError),
    ("join with a group under another key", frame(1, "join", {"group": 1}), FrameError),
    ("part with a group", frame(1, "part", {"g": 1}), FrameError),
    ("cut with a group", frame(1, "cut", {"g": 1}), FrameError),
    *(
        case
        for kind in ("join", "part", "cut")
        for case in (
            (f"{kind} with a payload", frame(1, kind, {"d": b"x"}), FrameError),
            (f"{kind} with a nil channel", frame(None, kind, {}), FrameError),
            (f"{kind} with a float channel", frame(1.0, kind, {}), FrameError),
            (f"{kind} with a bool channel", frame(True, kind, {}), FrameError),
            (f"{kind} with a negative channel", frame(-1, kind, {}), FrameError),
            (f"{kind} with a channel over 2**32-1", frame(2**32, kind, {}), FrameError),
            (f"{kind} with a list payload", frame(1, kind, []), FrameError),
        )
    ),
    ("message over 1 MiB", b"\x00" * ((1 << 20) + 1), LimitError),
    # Headers that declare far more than the message holds: refused before any allocation.
    (
        "str32 declaring 1 GiB",
        b"\x83\xa1c\x01\xa1k\xdb" + struct.pack(">I", 1 << 30) + b"data",
        FrameError,
    ),
    (
        "bin32 declaring 1 GiB",
        frame(1, "data", {"d": b"x"})[:-2] + b"\xc6" + struct.pack(">I", 1 << 30) + b"x",
        FrameError,
    ),
    ("array32 declaring 2**32-1", b"\xdd\xff\xff\xff\xff\x01", LimitError),
    ("map32 declaring 2**32-1", b"\xdf\xff\xff\xff\xff\xa1c", LimitError),
    ("str8 declaring more than present", b"\x83\xa1c\x01\xa1k\xd9\xff" + b"data", FrameError),
    ("bin8 declaring more than present", b"\xc4\x40ab", FrameError),
]


@pytest.mark.parametrize(("name", "raw", "error"), NASTY, ids=[case[0] for case in NASTY])
def test_nasty_input_is_refused_with_the_right_error(
    name: str, raw: bytes, error: type[RemoteProtocolError]
) -> None:
    with pytest.raises(error) as info:
        decode_frame(raw)
    expected = CloseCode.LIMIT_REACHED if error is LimitError else CloseCode.PROTOCOL_ERROR
    assert info.value.code == expected


def test_a_declared_1_gib_string_allocates_nothing_like_it() -> None:
    raw = b"\x83\xa1c\x01\xa1k\xdb" + struct.pack(">I", 1 << 30) + b"data"
    tracemalloc.start()
    try:
        with pytest.raises(ProtocolError):
            decode_frame(raw, max_string_length=None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_limits_can_be_overridden_by_keyword_or_by_object() -> None:
    raw = frame(1, "data", {"d": b"x" * 100})
    assert decode_frame(raw) == Data(channel=1, data=b"x" * 100)
    with pytest.raises(LimitError):
        decode_frame(raw, max_data_size=99)
    with pytest.raises(LimitError):
        decode_frame(raw, limits=Limits(max_message_size=50))
    with pytest.raises(LimitError):
        decode_frame(raw, max_message_size=50)


def test_none_turns_a_limit_off() -> None:
    big = b"x" * (2 << 20)
    raw = frame(1, "data", {"d": big})
    with pytest.raises(LimitError):
        decode_frame(raw)
    assert decode_frame(raw, max_message_size=None, max_data_size=None) == Data(channel=1, data=big)
    deep: Any = 1
    for _ in range(20):
        deep = [deep]
    raw = frame(1, "open", {"path": "s", "meta": {"d": deep}})
    with pytest.raises(LimitError):
        decode_frame(raw)
    assert decode_frame(raw, max_meta_depth=None) == Open(channel=1, path="s", meta={"d": deep})


def test_error_messages_never_echo_the_input() -> None:
    secret = "s3cret-token-value"
    for raw in (
        frame(1, secret, {}),
        frame(1, "open", {"path": secret, "meta": {secret: float("nan")}}),
        frame(1, "close", {"code": 1, "reason": secret}),
    ):
        with pytest.raises(ProtocolError) as info:
            decode_frame(raw)
        assert secret not in str(info.value)


BAD_FRAMES: list[tuple[str, Any]] = [
    ("negative channel", Data(channel=-1, data=b"x")),
    ("channel over 2**32-1", Window(channel=2**32, n=1)),
    ("bool channel", Window(channel=True, n=1)),
    ("empty data", Data(channel=1, data=b"")),
    ("str data", Data(channel=1, data=cast(Any, "x"))),
    ("window of 0", Window(channel=1, n=0)),
    ("close code 999", Close(channel=1, code=999, reason="")),
    ("bool close code", Close(channel=1, code=True, reason="")),
    ("NaN in meta", Open(channel=1, path="s", meta={"x": float("nan")})),
    ("tuple in meta", Open(channel=1, path="s", meta={"x": (1, 2)})),
    ("int key in meta", Open(channel=1, path="s", meta=cast(Any, {1: 2}))),
    ("lone surrogate in path", Open(channel=1, path="\ud800", meta={})),
    ("int over 64 bits in hello", Hello(payload={"x": 2**64})),
    ("hello payload not a map", Hello(payload=cast(Any, []))),
    ("empty cast", Cast(channel=None, data=b"")),
    ("empty cast to a channel", Cast(channel=1, data=b"")),
    ("str cast", Cast(channel=None, data=cast(Any, "x"))),
    ("cast to a negative channel", Cast(channel=-1, data=b"x")),
    ("cast to group MAX_CAST_GROUPS", Cast(channel=None, data=b"x", group=MAX_CAST_GROUPS)),
    ("cast to a negative group", Cast(channel=None, data=b"x", group=-1)),
    ("cast to a bool group", Cast(channel=None, data=b"x", group=True)),
    ("cast to a channel with a group", Cast(channel=1, data=b"x", group=1)),
    ("join of group MAX_CAST_GROUPS", Join(channel=1, group=MAX_CAST_GROUPS)),
    ("join of a str group", Join(channel=1, group=cast(Any, "1"))),
    ("join of a bool channel", Join(channel=True)),
    ("part of a nil channel", Part(channel=cast(Any, None))),
    ("cut of a channel over 2**32-1", Cut(channel=2**32)),
    ("not a frame", object()),
]


@pytest.mark.parametrize(("name", "bad"), BAD_FRAMES, ids=[case[0] for case in BAD_FRAMES])
def test_encoding_an_invalid_frame_is_a_local_error(name: str, bad: Any) -> None:
    with pytest.raises(LocalProtocolError):
        encode_frame(bad)


def test_close_code_enum_encodes_as_a_plain_int() -> None:
    raw = encode_frame(Close(channel=1, code=CloseCode.REVOKED, reason="links revoked"))
    decoded = decode_frame(raw)
    assert decoded == Close(channel=1, code=4008, reason="links revoked")
    assert isinstance(decoded, Close)
    assert type(decoded.code) is int


# --- the fast path for data and window frames (frames.py) ---------------------------------------

_SIZES = st.sampled_from([1, 2, 127, 128, 255, 256, 65535, 65536, 70000]) | st.integers(1, 300)
_IDS = st.sampled_from([0, 1, 127, 128, 255, 256, 65535, 65536, MAX_CHANNEL_ID]) | channels
_GRANTS = st.sampled_from([1, 127, 128, 255, 256, 65535, 65536, MAX_WINDOW]) | st.integers(
    1, MAX_WINDOW
)


@settings(max_examples=300, deadline=None)
@given(channel=_IDS, size=_SIZES, n=_GRANTS)
def test_data_and_window_are_encoded_byte_for_byte_as_msgpack_would(
    channel: int, size: int, n: int
) -> None:
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    expected = msgpack.packb({"c": channel, "k": "data", "p": {"d": data}}, use_bin_type=True)
    assert encode_frame(Data(channel=channel, data=data)) == expected
    expected = msgpack.packb({"c": channel, "k": "window", "p": {"n": n}}, use_bin_type=True)
    assert encode_frame(Window(channel=channel, n=n)) == expected


@settings(max_examples=300, deadline=None)
@given(channel=_IDS, size=_SIZES)
def test_cast_to_a_channel_is_encoded_and_read_byte_for_byte_as_msgpack_would(
    channel: int, size: int
) -> None:
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    expected = msgpack.packb({"c": channel, "k": "cast", "p": {"d": data}}, use_bin_type=True)
    assert encode_frame(Cast(channel=channel, data=data)) == expected
    assert encode_cast(channel, data) == expected
    # The other way: the fast path reads what msgpack writes, without falling back.
    assert _decode_fast(expected, None) == Cast(channel=channel, data=data)
    assert decode_frame(expected, max_data_size=None) == Cast(channel=channel, data=data)


def test_a_cast_without_a_channel_takes_the_general_path() -> None:
    raw = encode_frame(Cast(channel=None, data=b"abc"))
    assert _decode_fast(raw, None) is None
    assert decode_frame(raw) == Cast(channel=None, data=b"abc")


def test_group_0_is_left_out_and_read_the_same_when_written() -> None:
    # The frames of a host that uses no groups keep their bytes; an explicit 0 means the same.
    assert encode_frame(Cast(channel=None, data=b"abc", group=0)) == frame(
        None, "cast", {"d": b"abc"}
    )
    assert decode_frame(frame(None, "cast", {"d": b"abc", "g": 0})) == Cast(
        channel=None, data=b"abc"
    )
    assert decode_frame(frame(3, "join", {"g": 0})) == Join(channel=3)


def test_a_group_cast_is_refused_over_max_data_size_like_any_cast() -> None:
    raw = encode_frame(Cast(channel=None, data=b"x" * 101, group=2))
    assert decode_frame(raw, max_data_size=101) == Cast(channel=None, data=b"x" * 101, group=2)
    with pytest.raises(LimitError):
        decode_frame(raw, max_data_size=100)


def _mutations(message: bytes, data: st.DataObject) -> bytes:
    kind = data.draw(st.sampled_from(["flip", "cut", "extend", "splice"]))
    if kind == "flip":
        at = data.draw(st.integers(0, len(message) - 1))
        return (
            message[:at] + bytes([message[at] ^ data.draw(st.integers(1, 255))]) + message[at + 1 :]
        )
    if kind == "cut":
        return message[: data.draw(st.integers(0, len(message) - 1))]
    if kind == "extend":
        return message + data.draw(st.binary(min_size=1, max_size=4))
    at = data.draw(st.integers(0, len(message)))
    return message[:at] + data.draw(st.binary(min_size=1, max_size=6)) + message[at:]


@settings(max_examples=1500, deadline=None)
@given(
    frame_=st.builds(Data, channel=_IDS, data=st.binary(min_size=1, max_size=300))
    | st.builds(Window, channel=_IDS, n=_GRANTS)
    | st.builds(Cast, channel=_IDS | st.none(), data=st.binary(min_size=1, max_size=300)),
    data=st.data(),
    limit=st.sampled_from([None, 1, 16, 4096]),
)
def test_the_fast_path_accepts_only_what_msgpack_accepts_and_reads_the_same_frame(
    frame_: Frame, data: st.DataObject, limit: int | None
) -> None:
    # Near-misses of the fixed form: one byte flipped, cut short, extended, bytes spliced in. The
    # fast path either declines (the general path then decides) or agrees with the general path.
    message = _mutations(encode_frame(frame_), data)
    limits = Limits(max_data_size=limit)
    fast = _decode_fast(message, limit)
    try:
        general: Frame | ProtocolError = _decode_general(message, limits)
    except ProtocolError as exc:
        general = exc
    if fast is not None:
        assert fast == general
    try:
        decoded: Frame | ProtocolError = decode_frame(message, limits=limits)
    except ProtocolError as exc:
        decoded = exc
    assert type(decoded) is type(general)
    if not isinstance(general, ProtocolError):
        assert decoded == general


@pytest.mark.parametrize(
    "message",
    [
        # Not the shortest form, still valid msgpack: a uint16 id and a bin32 header.
        b"\x83\xa1c\xcd\x00\x01\xa1k\xa4data\xa1p\x81\xa1d\xc6\x00\x00\x00\x03abc",
        b"\x83\xa1c\xce\x00\x00\x00\x05\xa1k\xa6window\xa1p\x81\xa1n\xcd\x01\x00",
        # A uint64 id in range: the fast path declines, the general path accepts.
        b"\x83\xa1c\xcf\x00\x00\x00\x00\x00\x00\x00\x01\xa1k\xa4data\xa1p\x81\xa1d\xc4\x01x",
        # The same for a cast to a channel: a uint32 id and a bin16 header.
        b"\x83\xa1c\xce\x00\x00\x00\x07\xa1k\xa4cast\xa1p\x81\xa1d\xc5\x00\x02ab",
        # Keys in another order: only msgpack reads it.
        b"\x83\xa1k\xa4cast\xa1p\x81\xa1d\xc4\x01x\xa1c\x03",
    ],
)
def test_non_canonical_numbers_decode_the_same_on_both_paths(message: bytes) -> None:
    assert decode_frame(message) == _decode_general(message, Limits())


def test_window_and_kind_strings_over_the_string_limit_are_refused_as_before() -> None:
    message = encode_frame(Window(channel=1, n=5))
    assert decode_frame(message, max_string_length=6) == Window(channel=1, n=5)
    with pytest.raises(LimitError):
        decode_frame(message, max_string_length=5)
