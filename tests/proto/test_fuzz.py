"""Decoding never raises anything but ProtocolError, whatever the bytes."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tunnel.proto import KINDS, Frame, ProtocolError, decode_frame, encode_frame

from .strategies import any_values, frame_like, frames, msgpack_like_bytes, pack


def decode_or_refuse(raw: bytes) -> Frame | None:
    """Return the decoded frame, or None if it was refused with a ProtocolError."""
    try:
        return decode_frame(raw)
    except ProtocolError as exc:
        code = exc.code
    assert 4000 <= code < 5000
    return None


@settings(max_examples=10_000, deadline=None)
@given(st.binary(max_size=64) | msgpack_like_bytes)
def test_arbitrary_bytes_decode_or_are_refused(raw: bytes) -> None:
    decoded = decode_or_refuse(raw)
    if decoded is not None:
        assert decode_frame(encode_frame(decoded)) == decoded


@settings(max_examples=1_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_values)
def test_any_msgpack_value_decodes_or_is_refused(value: Any) -> None:
    decoded = decode_or_refuse(pack(value))
    if decoded is not None:
        # Whatever was accepted is a valid frame: it encodes back to a frame equal to it.
        assert decode_frame(encode_frame(decoded)) == decoded


@settings(max_examples=1_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frame_like)
def test_frame_shaped_maps_decode_or_are_refused(value: dict[str, Any]) -> None:
    decoded = decode_or_refuse(pack(value))
    if decoded is not None:
        assert decode_frame(encode_frame(decoded)) == decoded


@settings(max_examples=500, deadline=None)
@given(frames, st.data())
def test_corrupted_frames_decode_or_are_refused(frame: Frame, data: st.DataObject) -> None:
    raw = bytearray(encode_frame(frame))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        position = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
        action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip":
            raw[position] ^= data.draw(st.integers(min_value=1, max_value=255))
        elif action == "cut":
            del raw[position:]
            if not raw:
                break
        else:
            raw[position:position] = data.draw(st.binary(min_size=1, max_size=9))
    decode_or_refuse(bytes(raw))


def test_the_kind_whitelist_is_exactly_the_nine_kinds() -> None:
    assert KINDS == ("hello", "open", "data", "close", "window", "cast", "join", "part", "cut")
