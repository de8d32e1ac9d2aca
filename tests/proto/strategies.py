"""Hypothesis strategies for frames, arbitrary msgpack values and msgpack-like bytes."""

from __future__ import annotations

from typing import Any

import msgpack
from hypothesis import strategies as st

from tunnel.proto import (
    MAX_CAST_GROUPS,
    MAX_CHANNEL_ID,
    MAX_WINDOW,
    Cast,
    Close,
    Cut,
    Data,
    Frame,
    Hello,
    Join,
    Open,
    Part,
    Window,
)

channels = st.integers(min_value=0, max_value=MAX_CHANNEL_ID)
groups = st.integers(min_value=0, max_value=MAX_CAST_GROUPS - 1)

# Values a `meta` map may hold, small enough for the default limits.
meta_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
    | st.binary(max_size=40)
)
meta_values = st.recursive(
    meta_leaves,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=20,
)
metas: st.SearchStrategy[dict[str, Any]] = st.dictionaries(
    st.text(max_size=20), meta_values, max_size=8
)

frames: st.SearchStrategy[Frame] = st.one_of(
    st.builds(Hello, payload=metas),
    st.builds(Open, channel=channels, path=st.text(max_size=100), meta=metas),
    st.builds(Data, channel=channels, data=st.binary(min_size=1, max_size=2000)),
    st.builds(
        Close,
        channel=channels,
        code=st.integers(min_value=1000, max_value=4999),
        reason=st.text(max_size=100),
    ),
    st.builds(Window, channel=channels, n=st.integers(min_value=1, max_value=MAX_WINDOW)),
    st.builds(Cast, channel=channels, data=st.binary(min_size=1, max_size=2000)),
    # Only a host's cast (no channel) names a group.
    st.builds(Cast, channel=st.none(), data=st.binary(min_size=1, max_size=2000), group=groups),
    st.builds(Join, channel=channels, group=groups),
    st.builds(Part, channel=channels),
    st.builds(Cut, channel=channels),
)

# Anything msgpack can carry, including what the decoder must refuse: NaN, ext types,
# timestamps, int and bytes map keys, 64-bit ints.
any_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats()
    | st.text(max_size=20)
    | st.binary(max_size=20)
    | st.builds(msgpack.ExtType, st.integers(min_value=0, max_value=127), st.binary(max_size=8))
    | st.builds(msgpack.Timestamp, st.integers(min_value=0, max_value=2**34 - 1))
)
any_values = st.recursive(
    any_leaves,
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(
            st.text(max_size=6) | st.integers(min_value=-10, max_value=10) | st.binary(max_size=4),
            children,
            max_size=5,
        )
    ),
    max_leaves=12,
)
kinds = st.sampled_from(
    ["hello", "open", "data", "close", "window", "cast", "join", "part", "cut", "nope", ""]
)
payload_keys = st.sampled_from(["path", "meta", "d", "code", "reason", "n", "x"])

# Maps shaped almost like frames, so the decoder's field checks see many near misses. Flat
# values only: nesting is covered by `any_values`, and this strategy must draw fast.
_flat = any_leaves | st.lists(any_leaves, max_size=3)
frame_like = st.fixed_dictionaries(
    {"k": kinds | _flat, "p": st.dictionaries(payload_keys, _flat, max_size=3)},
    optional={"c": st.none() | channels | _flat, "x": _flat},
)


def pack(value: object) -> bytes:
    """Encode any msgpack value the way a peer could put it on the wire."""
    return msgpack.packb(value, use_bin_type=True)


# Pieces of msgpack that frames are made of, and of what they must not contain: joined at random
# they reach the decoder's field checks far more often than uniform bytes, at the cost of a
# single list draw per example.
_NAN = b"\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00"
_CHUNKS = [
    b"\x83",
    b"\x84",
    b"\x82",
    b"\x81",
    b"\x80",
    b"\x91",
    b"\x90",  # maps, arrays
    b"\xa1c",
    b"\xa1k",
    b"\xa1p",
    b"\xa1d",
    b"\xa1n",
    b"\xa4path",
    b"\xa4meta",
    b"\xa4code",
    b"\xa6reason",
    b"\xa5hello",
    b"\xa4open",
    b"\xa4data",
    b"\xa5close",
    b"\xa6window",
    b"\xa4cast",
    b"\xa4join",
    b"\xa4part",
    b"\xa3cut",
    b"\xc0",
    b"\xc2",
    b"\xc3",
    b"\x00",
    b"\x01",
    b"\x02",
    b"\xff",
    b"\xcd\x03\xe8",
    b"\xce\xff\xff\xff\xff",
    b"\xcf\x00\x00\x00\x01\x00\x00\x00\x00",
    b"\xd3\x80\x00\x00\x00\x00\x00\x00\x00",
    _NAN,
    b"\xc4\x01x",
    b"\xc4\x00",
    b"\xc5\xff\xff",
    b"\xc6\x40\x00\x00\x00",
    b"\xdb\x40\x00\x00\x00",
    b"\xdd\xff\xff\xff\xff",
    b"\xdf\xff\xff\xff\xff",
    b"\xd4\x01\x00",
    b"\xd6\xff\x00\x00\x00\x01",
    b"\xc7\x00\x05",
    b"\xc1",
]
msgpack_like_bytes = st.lists(
    st.sampled_from(_CHUNKS) | st.binary(min_size=1, max_size=3), max_size=16
).map(b"".join)
