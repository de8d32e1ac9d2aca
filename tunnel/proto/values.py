"""The rules for the free-form maps of a frame: `meta` of `open` and the hello payload.

They hold msgpack values only (nil, bool, int, finite float, str, bin, array, map with str keys),
bounded in entries, depth and string length (docs/protocol.md, "Maps").
"""

from __future__ import annotations

import math
from typing import Any

from tunnel.proto.codes import CloseCode
from tunnel.proto.errors import FrameError, LimitError, LocalProtocolError, ProtocolError
from tunnel.proto.limits import Limits

_INT_MIN = -(2**63)
_INT_MAX = 2**64 - 1


def _fail(message: str, *, remote: bool, limit: bool) -> ProtocolError:
    if remote:
        return LimitError(message) if limit else FrameError(message)
    return LocalProtocolError(message, code=CloseCode.LIMIT_REACHED if limit else None)


def check_str(value: object, what: str, limits: Limits, *, remote: bool) -> str:
    """Return `value` if it is a str within `max_string_length` UTF-8 bytes."""
    if not isinstance(value, str):
        raise _fail(f"{what} must be a str", remote=remote, limit=False)
    if not remote:
        # The decoder bounds received strings by their header; ours are measured here, and a
        # lone surrogate (not encodable as UTF-8) is caught before msgpack trips on it.
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            raise _fail(f"{what} is not valid Unicode", remote=remote, limit=False) from None
        if limits.max_string_length is not None and size > limits.max_string_length:
            raise _fail(f"{what} is longer than max_string_length", remote=remote, limit=True)
    return value


def check_map(value: object, what: str, limits: Limits, *, remote: bool) -> dict[str, Any]:
    """Return `value` if it is a map that may travel as `meta` or a hello payload.

    `remote` picks the error: a `RemoteProtocolError` for what the peer sent, a
    `LocalProtocolError` for what the caller tries to send. Iterative, so depth costs no stack.
    """
    if not isinstance(value, dict):
        raise _fail(f"{what} must be a map", remote=remote, limit=False)
    max_entries = limits.max_meta_entries
    max_depth = limits.max_meta_depth
    max_string = limits.max_string_length
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if item is None or isinstance(item, bool):
            continue
        if isinstance(item, dict | list):
            if max_depth is not None and depth > max_depth:
                raise _fail(f"{what} is nested too deeply", remote=remote, limit=True)
            if max_entries is not None and len(item) > max_entries:
                raise _fail(f"{what} has too many entries", remote=remote, limit=True)
            if isinstance(item, dict):
                for key, child in item.items():
                    check_str(key, f"a key in {what}", limits, remote=remote)
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, str):
            check_str(item, f"a string in {what}", limits, remote=remote)
        elif isinstance(item, bytes):
            if max_string is not None and len(item) > max_string:
                raise _fail(f"a binary in {what} is too long", remote=remote, limit=True)
        elif isinstance(item, int):
            if not _INT_MIN <= item <= _INT_MAX:
                raise _fail(f"an int in {what} is out of range", remote=remote, limit=False)
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise _fail(f"a float in {what} is not finite", remote=remote, limit=False)
        else:
            raise _fail(f"{what} holds a value of an unsupported type", remote=remote, limit=False)
    return value
