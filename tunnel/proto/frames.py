"""Frames: the nine kinds of message on a link, and their msgpack wire form.

Each WebSocket message is one msgpack map `{"c": channel or nil, "k": kind, "p": payload}`
(docs/protocol.md, "Frames"). `decode_frame` turns any bytes into a frame or a `ProtocolError`,
and never into any other exception.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeAlias

import msgpack

from tunnel.proto.errors import FrameError, LimitError, LocalProtocolError, ProtocolError
from tunnel.proto.limits import DEFAULT_LIMITS, MAX_WINDOW, Limits
from tunnel.proto.values import check_map, check_str

MAX_CHANNEL_ID = 2**32 - 1
"""Channel ids are unsigned 32-bit integers."""

MIN_CLOSE_CODE = 1000
MAX_CLOSE_CODE = 4999
"""Close codes live in the range WebSocket close codes use, so a link close can reuse them."""

MAX_CAST_GROUPS = 64
"""Broadcast groups one host link may use, 0..MAX_CAST_GROUPS-1 (docs/protocol.md, "Broadcast
groups"): a host serving several conversations casts each one's broadcast to its own group."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Hello:
    """The first frame each side sends on a link; `c` is nil on the wire."""

    payload: dict[str, Any]
    """Role, version and credentials of the sender (docs/protocol.md, "Hello")."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Open:
    """Opens a channel; the opener picks the id (odd for the dialer, even for the accepter)."""

    channel: int
    """The new channel's id."""

    path: str
    """What the channel is for, e.g. `"session"`."""

    meta: dict[str, Any]
    """Parameters of the channel, e.g. role and key salt."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Data:
    """One application message on a channel; costs `len(data)` bytes of the send window."""

    channel: int
    """The channel it travels on."""

    data: bytes
    """The message: never empty, at most `max_data_size` bytes."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Close:
    """Closes both directions of a channel; the receiver answers with its own close."""

    channel: int
    """The channel to close."""

    code: int
    """Why, as a `CloseCode` value (any int in 1000..4999 is accepted on the wire)."""

    reason: str
    """A short human-readable explanation; may be empty."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """Grants the peer `n` more bytes of `data` on a channel."""

    channel: int
    """The channel whose window grows."""

    n: int
    """Bytes granted, in 1..2**32-1."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Cast:
    """One message of a host's broadcast (docs/protocol.md, "Broadcast").

    From a host to the relay `channel` is None: the relay copies it to every channel the host
    joined to `group`. From the relay to a teammate `channel` is the teammate's channel, and it
    costs `len(data)` bytes of that channel's window, as `data` does; it has no group.
    """

    channel: int | None
    data: bytes
    group: int = 0
    """The broadcast group (host to relay only); 0 is left out on the wire."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Join:
    """Host to relay: copy my casts of `group` to this channel, from the next one on; a channel
    joined to another group leaves it."""

    channel: int
    group: int = 0
    """The broadcast group; 0 is left out on the wire."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Part:
    """Host to relay: stop copying my casts to this channel."""

    channel: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Cut:
    """Relay to teammate: this channel fell too far behind and gets no more casts until the host
    joins it again."""

    channel: int


Frame: TypeAlias = Hello | Open | Data | Close | Window | Cast | Join | Part | Cut

_UNBOUNDED = Limits(
    max_message_size=None,
    max_data_size=None,
    max_string_length=None,
    max_meta_entries=None,
    max_meta_depth=None,
    max_channels=None,
)


# --- encoding ---------------------------------------------------------------------------------


def _local_channel(channel: object) -> int:
    if type(channel) is not int or not 0 <= channel <= MAX_CHANNEL_ID:
        raise LocalProtocolError("a channel id must be an int in 0..2**32-1")
    return channel


def check_group(group: object) -> int:
    """`group` if it is a broadcast group (an int in 0..MAX_CAST_GROUPS-1), else
    LocalProtocolError."""
    if type(group) is not int or not 0 <= group < MAX_CAST_GROUPS:
        raise LocalProtocolError(f"a broadcast group must be an int in 0..{MAX_CAST_GROUPS - 1}")
    return group


def _with_group(payload: dict[str, Any], group: int) -> dict[str, Any]:
    # Group 0 is left out: every frame of a host that uses no groups keeps its bytes.
    if group:
        payload["g"] = group
    return payload


def _wire(frame: Frame, checked: bool) -> dict[str, Any]:
    if isinstance(frame, Data):
        if not isinstance(frame.data, bytes | bytearray):
            raise LocalProtocolError("data must be bytes")
        if not frame.data:
            raise LocalProtocolError("data must not be empty")
        return {"c": _local_channel(frame.channel), "k": "data", "p": {"d": frame.data}}
    if isinstance(frame, Window):
        if type(frame.n) is not int or not 1 <= frame.n <= MAX_WINDOW:
            raise LocalProtocolError("a window grant must be an int in 1..2**32-1")
        return {"c": _local_channel(frame.channel), "k": "window", "p": {"n": frame.n}}
    if isinstance(frame, Open):
        path, meta = frame.path, frame.meta
        if not checked:
            check_str(path, "path", _UNBOUNDED, remote=False)
            check_map(meta, "meta", _UNBOUNDED, remote=False)
        payload: dict[str, Any] = {"path": path, "meta": meta}
        return {"c": _local_channel(frame.channel), "k": "open", "p": payload}
    if isinstance(frame, Close):
        if not isinstance(frame.code, int) or isinstance(frame.code, bool):
            raise LocalProtocolError("a close code must be an int")
        if not MIN_CLOSE_CODE <= frame.code <= MAX_CLOSE_CODE:
            raise LocalProtocolError("a close code must be in 1000..4999")
        reason = check_str(frame.reason, "reason", _UNBOUNDED, remote=False)
        payload = {"code": int(frame.code), "reason": reason}
        return {"c": _local_channel(frame.channel), "k": "close", "p": payload}
    if isinstance(frame, Hello):
        payload = frame.payload
        if not checked:
            check_map(payload, "hello payload", _UNBOUNDED, remote=False)
        return {"c": None, "k": "hello", "p": payload}
    if isinstance(frame, Cast):
        if not isinstance(frame.data, bytes | bytearray) or not frame.data:
            raise LocalProtocolError("a cast carries bytes, never empty")
        group = check_group(frame.group)
        if frame.channel is None:
            return {"c": None, "k": "cast", "p": _with_group({"d": frame.data}, group)}
        if group:
            raise LocalProtocolError("a cast to a channel has no group")
        return {"c": _local_channel(frame.channel), "k": "cast", "p": {"d": frame.data}}
    if isinstance(frame, Join):
        payload = _with_group({}, check_group(frame.group))
        return {"c": _local_channel(frame.channel), "k": "join", "p": payload}
    if isinstance(frame, Part | Cut):
        return {"c": _local_channel(frame.channel), "k": _SIGNAL_KINDS[type(frame)], "p": {}}
    raise LocalProtocolError("not a frame")


_SIGNAL_KINDS: dict[type[Part | Cut], str] = {Part: "part", Cut: "cut"}


# --- the fast path for `data` and `window` ---------------------------------------------------
#
# Nearly every frame on a busy link is a `data` or a `window` frame, and their msgpack form is a
# fixed byte string around two numbers (docs/protocol.md, "Frames"). These functions write and
# read exactly the bytes msgpack.packb writes for them, without building the maps; a message that
# is not in that form takes the general msgpack path, so what is accepted and refused is the same
# either way (tests/proto/test_frames.py checks both directions).

_HEAD = b"\x83\xa1c"
"""A map of 3 entries, then the key "c"."""
_DATA_MIDDLE = b"\xa1k\xa4data\xa1p\x81\xa1d"
"""Between the channel id and the bin of a `data` frame: "k": "data", "p": {"d": ...}."""
_CAST_MIDDLE = b"\xa1k\xa4cast\xa1p\x81\xa1d"
"""The same for a `cast` frame to a channel: "k": "cast", "p": {"d": ...}."""
_WINDOW_MIDDLE = b"\xa1k\xa6window\xa1p\x81\xa1n"
"""Between the channel id and the grant of a `window` frame: "k": "window", "p": {"n": ...}."""
_FAST_FORM_STRINGS = len("window")
"""The longest string of the fast forms (`payload_at`, `_decode_fast`), which read them without a
length check."""


def fast_form_fits(limits: Limits) -> bool:
    """Whether frames in the fast form may be taken as such under `limits`: only if
    `max_string_length` allows the fast forms' strings, which they read without a length check."""
    strings = limits.max_string_length
    return strings is None or strings >= _FAST_FORM_STRINGS


_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_SMALL_UINTS = [bytes((value,)) for value in range(0x80)]


def _pack_uint(value: int) -> bytes:
    """msgpack's shortest form of an int in 0..2**32-1, as msgpack.packb writes it."""
    if value < 0x80:
        return _SMALL_UINTS[value]
    if value <= 0xFF:
        return b"\xcc" + _U8.pack(value)
    if value <= 0xFFFF:
        return b"\xcd" + _U16.pack(value)
    return b"\xce" + _U32.pack(value)


def _bin_header(size: int) -> bytes:
    if size <= 0xFF:
        return b"\xc4" + _U8.pack(size)
    if size <= 0xFFFF:
        return b"\xc5" + _U16.pack(size)
    return b"\xc6" + _U32.pack(size)


def data_head(channel: int, size: int) -> bytes:
    """The wire bytes of a `data` frame on `channel` that come before its `size` bytes of data:
    the frame is this head followed by the data, unchanged (arguments already checked)."""
    return b"".join((_HEAD, _pack_uint(channel), _DATA_MIDDLE, _bin_header(size)))


def cast_head(channel: int, size: int) -> bytes:
    """The same as `data_head` for a `cast` frame to a channel."""
    return b"".join((_HEAD, _pack_uint(channel), _CAST_MIDDLE, _bin_header(size)))


def cast_channel(head: bytes) -> int | None:
    """The channel of a `cast_head`, or None for any other bytes (a `data_head` included)."""
    if not head.startswith(_HEAD):
        return None
    read = _read_uint(head, len(_HEAD))
    if read is None or not head.startswith(_CAST_MIDDLE, read[1]):
        return None
    return read[0]


def encode_data(channel: int, data: bytes) -> bytes:
    """The wire bytes of `Data(channel=channel, data=data)`, for arguments already checked."""
    return data_head(channel, len(data)) + data


def encode_cast(channel: int, data: bytes) -> bytes:
    """The wire bytes of `Cast(channel=channel, data=data)`, for arguments already checked: the
    relay writes one per teammate for every cast."""
    return cast_head(channel, len(data)) + data


def _read_uint(message: bytes, at: int) -> tuple[int, int] | None:
    """An unsigned int of up to 32 bits at `at` and the offset after it, or None if not one."""
    if at >= len(message):
        return None
    tag = message[at]
    if tag < 0x80:
        return tag, at + 1
    if tag == 0xCC and at + 2 <= len(message):
        return message[at + 1], at + 2
    if tag == 0xCD and at + 3 <= len(message):
        return _U16.unpack_from(message, at + 1)[0], at + 3
    if tag == 0xCE and at + 5 <= len(message):
        return _U32.unpack_from(message, at + 1)[0], at + 5
    return None


def payload_at(message: bytes, max_data_size: int | None) -> tuple[bool, int, int] | None:
    """Where the data of a valid `data` or `cast` frame in the form our encoder writes starts:
    (whether it is `data`, its channel, the offset of its data, which runs to the end), or None
    for any other message. `Connection` takes such frames without a frame object, and a relay
    forwards the data from there without copying it out."""
    if not message.startswith(_HEAD):
        return None
    read = _read_uint(message, len(_HEAD))
    if read is None:
        return None
    channel, at = read
    is_data = message.startswith(_DATA_MIDDLE, at)
    if not is_data and not message.startswith(_CAST_MIDDLE, at):
        return None
    at += len(_DATA_MIDDLE)  # as long as _CAST_MIDDLE
    if at >= len(message):
        return None
    tag = message[at]
    if tag == 0xC4 and at + 2 <= len(message):
        size, at = message[at + 1], at + 2
    elif tag == 0xC5 and at + 3 <= len(message):
        size, at = _U16.unpack_from(message, at + 1)[0], at + 3
    elif tag == 0xC6 and at + 5 <= len(message):
        size, at = _U32.unpack_from(message, at + 1)[0], at + 5
    else:
        return None
    if size == 0 or at + size != len(message):
        return None
    if max_data_size is not None and size > max_data_size:
        return None
    return is_data, channel, at


def _decode_fast(message: bytes, max_data_size: int | None) -> Frame | None:
    """A valid `data` or `window` frame in the form our encoder writes, or None for anything else
    (which the general decoder then accepts or refuses)."""
    if not message.startswith(_HEAD):
        return None
    read = _read_uint(message, len(_HEAD))
    if read is None:
        return None
    channel, at = read
    if message.startswith(_WINDOW_MIDDLE, at):
        read = _read_uint(message, at + len(_WINDOW_MIDDLE))
        if read is None or read[1] != len(message) or read[0] == 0:
            return None
        return Window(channel=channel, n=read[0])
    found = payload_at(message, max_data_size)
    if found is None:
        return None
    is_data, channel, at = found
    if is_data:
        return Data(channel=channel, data=message[at:])
    return Cast(channel=channel, data=message[at:])


def encode_frame(frame: Frame, *, checked: bool = False) -> bytes:
    """Return the wire bytes of `frame`: one WebSocket binary message.

    Checks types and ranges (raising `LocalProtocolError`), not `Limits`: `Connection` checks
    those against its own limits before it sends, and says so with `checked` (an `open`'s path
    and meta or a hello's payload, which it has just walked, are then not walked again).
    """
    if type(frame) is Data:
        data = frame.data
        if type(data) is bytes and data:
            return encode_data(_local_channel(frame.channel), data)
    elif type(frame) is Cast and type(frame.channel) is int:
        data = frame.data
        if type(data) is bytes and data and frame.group == 0:
            return encode_cast(_local_channel(frame.channel), data)
    elif type(frame) is Window and type(frame.n) is int and 1 <= frame.n <= MAX_WINDOW:
        channel = _local_channel(frame.channel)
        return b"".join((_HEAD, _pack_uint(channel), _WINDOW_MIDDLE, _pack_uint(frame.n)))
    wire = _wire(frame, checked)
    try:
        return msgpack.packb(wire, use_bin_type=True)
    except (ValueError, TypeError, OverflowError) as exc:
        # Only reachable through maps nested deeper than msgpack's own nesting limit.
        raise LocalProtocolError("frame cannot be encoded") from exc


# --- decoding ---------------------------------------------------------------------------------


def _reject_ext(code: int, data: bytes) -> NoReturn:
    raise FrameError("msgpack extension types are not allowed")


def _unpack_error(exc: Exception) -> ProtocolError:
    text = str(exc)
    # msgpack reports a header that declares more than a max_*_len as "N exceeds max_x_len(M)".
    if "exceeds max_" in text and "max_ext_len" not in text:
        return LimitError("a value in the frame exceeds a size limit")
    if isinstance(exc, ProtocolError):
        return exc
    return FrameError("not a valid msgpack frame")


def _remote_channel(channel: object) -> int:
    if type(channel) is not int or not 0 <= channel <= MAX_CHANNEL_ID:
        raise FrameError("a channel id must be an int in 0..2**32-1")
    return channel


def _keys(payload: dict[str, Any], keys: frozenset[str], kind: str) -> None:
    if payload.keys() != keys:
        raise FrameError(f"a {kind} payload must have exactly the keys {', '.join(sorted(keys))}")


_OPEN_KEYS = frozenset({"path", "meta"})
_DATA_KEYS = frozenset({"d"})
_GROUP_CAST_KEYS = frozenset({"d", "g"})
_CLOSE_KEYS = frozenset({"code", "reason"})
_WINDOW_KEYS = frozenset({"n"})
_FRAME_KEYS = frozenset({"c", "k", "p"})


def _decode_hello(c: object, p: dict[str, Any], limits: Limits) -> Frame:
    if c is not None:
        raise FrameError("a hello frame must have a nil channel")
    return Hello(payload=check_map(p, "hello payload", limits, remote=True))


def _decode_open(c: object, p: dict[str, Any], limits: Limits) -> Frame:
    _keys(p, _OPEN_KEYS, "open")
    return Open(
        channel=_remote_channel(c),
        path=check_str(p["path"], "path", limits, remote=True),
        meta=check_map(p["meta"], "meta", limits, remote=True),
    )


def _decode_data(c: object, p: dict[str, Any], limits: Limits) -> Frame:
    _keys(p, _DATA_KEYS, "data")
    d = p["d"]
    if type(d) is not bytes:
        raise FrameError("data must be bytes")
    if not d:
        raise FrameError("data must not be empty")
    if limits.max_data_size is not None and len(d) > limits.max_data_size:
        raise LimitError("data is larger than max_data_size")
    return Data(channel=_remote_channel(c), data=d)


def _decode_close(c: object, p: dict[str, Any], limits: Limits) -> Frame:
    _keys(p, _CLOSE_KEYS, "close")
    code = p["code"]
    if type(code) is not int or not MIN_CLOSE_CODE <= code <= MAX_CLOSE_CODE:
        raise FrameError("a close code must be an int in 1000..4999")
    reason = check_str(p["reason"], "reason", limits, remote=True)
    return Close(channel=_remote_channel(c), code=code, reason=reason)


def _decode_window(c: object, p: dict[str, Any], limits: Limits) -> Frame:
    _keys(p, _WINDOW_KEYS, "window")
    n = p["n"]
    if type(n) is not int or not 1 <= n <= MAX_WINDOW:
        raise FrameError("a window grant must be an int in 1..2**32-1")
    return Window(channel=_remote_channel(c), n=n)


_Decoder: TypeAlias = Callable[[object, dict[str, Any], Limits], Frame]


def _remote_group(p: dict[str, Any]) -> int:
    group = p["g"]
    if type(group) is not int or not 0 <= group < MAX_CAST_GROUPS:
        raise FrameError(f"a broadcast group must be an int in 0..{MAX_CAST_GROUPS - 1}")
    return group


def _decode_cast(c: object, p: dict[str, Any], limits: Limits) -> Frame:
    # Only a host's cast (no channel) names a group: the relay's copies never do.
    if c is not None or p.keys() != _GROUP_CAST_KEYS:
        _keys(p, _DATA_KEYS, "cast")
    d = p["d"]
    if type(d) is not bytes or not d:
        raise FrameError("a cast carries bytes, never empty")
    if limits.max_data_size is not None and len(d) > limits.max_data_size:
        raise LimitError("cast is larger than max_data_size")
    if c is None:
        return Cast(channel=None, data=d, group=_remote_group(p) if "g" in p else 0)
    return Cast(channel=_remote_channel(c), data=d)


def _decode_join(c: object, p: dict[str, Any], limits: Limits) -> Frame:
    if p and p.keys() != {"g"}:
        raise FrameError("a join payload is empty or has exactly the key g")
    return Join(channel=_remote_channel(c), group=_remote_group(p) if p else 0)


def _decode_signal(kind: type[Part | Cut]) -> _Decoder:
    def decode(c: object, p: dict[str, Any], limits: Limits) -> Frame:
        if p:
            raise FrameError(f"a {_SIGNAL_KINDS[kind]} payload must be empty")
        return kind(channel=_remote_channel(c))

    return decode


_DECODERS: dict[str, _Decoder] = {
    "hello": _decode_hello,
    "open": _decode_open,
    "data": _decode_data,
    "close": _decode_close,
    "window": _decode_window,
    "cast": _decode_cast,
    "join": _decode_join,
    "part": _decode_signal(Part),
    "cut": _decode_signal(Cut),
}

KINDS: tuple[str, ...] = tuple(_DECODERS)
"""The whitelist of frame kinds; nothing else is ever decoded."""


def decode_frame(
    data: bytes | bytearray | memoryview,
    *,
    limits: Limits = DEFAULT_LIMITS,
    **overrides: int | None,
) -> Frame:
    """Return the frame held by one WebSocket message, checked against `limits`.

    Keyword `overrides` replace single limits, e.g. `decode_frame(b, max_message_size=4096)`.
    Raises `RemoteProtocolError` (a `FrameError`, or a `LimitError` for a size over a limit) for
    any input that is not exactly one valid frame, and never any other exception.
    """
    if overrides:
        limits = dataclasses.replace(limits, **overrides)  # type: ignore[arg-type]
    received: object = data
    if not isinstance(received, bytes | bytearray | memoryview):
        # A text WebSocket message arrives as str: the peer broke the protocol.
        raise FrameError("a frame must be a binary message")
    size = received.nbytes if isinstance(received, memoryview) else len(received)
    if limits.max_message_size is not None and size > limits.max_message_size:
        raise LimitError("message is larger than max_message_size")
    data = received if isinstance(received, bytes) else bytes(received)
    if fast_form_fits(limits):
        fast = _decode_fast(data, limits.max_data_size)
        if fast is not None:
            return fast
    return _decode_general(data, limits)


def _decode_general(data: bytes, limits: Limits) -> Frame:
    """`decode_frame` through msgpack, for any message (the size limit already checked)."""
    size = len(data)
    strings = limits.max_string_length
    blobs = limits.max_data_size
    entries = limits.max_meta_entries
    # A limit that is off is still bounded by the message size.
    strings = size if strings is None else strings
    blobs = max(size if blobs is None else blobs, strings)
    entries = size if entries is None else entries
    # The unpacker's exceptions are not all documented, so any of them means a bad frame.
    try:
        # Every header is checked against a bound before anything is allocated.
        obj = msgpack.unpackb(
            data,
            raw=False,
            use_list=True,
            strict_map_key=True,
            timestamp=0,
            ext_hook=_reject_ext,
            max_ext_len=0,
            max_str_len=strings,
            max_bin_len=blobs,
            max_array_len=entries,
            max_map_len=max(entries, len(_FRAME_KEYS)),
        )
    except Exception as exc:
        raise _unpack_error(exc) from None
    if not isinstance(obj, dict) or obj.keys() != _FRAME_KEYS:
        raise FrameError("a frame must be a map with exactly the keys c, k and p")
    kind = obj["k"]
    decoder = _DECODERS.get(kind) if type(kind) is str else None
    if decoder is None:
        raise FrameError("unknown frame kind")
    payload = obj["p"]
    if type(payload) is not dict:
        raise FrameError("a frame payload must be a map")
    return decoder(obj["c"], payload, limits)
