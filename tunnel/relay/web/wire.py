"""The page's wire vocabulary (`wire.js`): an ES module generated from the Python constants.

Close codes, frame kinds and bounds, hello fields, crypto sizes and labels, the reconnect policy
and the application limits each have one home in Python; the page imports them from this module
instead of writing them a second time, so page and Python cannot drift apart. The text is built
once per process and served by `static_response` like any other asset (docs/web.md, "wire.js").
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence
from typing import TypeAlias

from tunnel.app import conversation_list, file_view, requests
from tunnel.e2e import broadcast, crypto, identity, opening
from tunnel.handshake import MAX_NAME_LENGTH, PROTOCOL_VERSION
from tunnel.log import chain
from tunnel.process import backoff
from tunnel.proto import frames, limits
from tunnel.proto.codes import FINAL_CODES, CloseCode

__all__ = ["WIRE_MODULE_NAME", "wire_module", "wire_values"]

WIRE_MODULE_NAME = "wire.js"
"""The file name the page imports (`./wire.js`); it exists only as this module's output."""

# A JSON value as json.dumps writes it; containers become frozen objects and arrays in JS.
JsonValue: TypeAlias = (
    bool | int | float | str | Sequence["JsonValue"] | Mapping[str, "JsonValue"] | None
)

_MS_PER_SECOND = 1000


def _ms(seconds: float) -> int | float:
    """`seconds` in milliseconds (the page's unit for timers), an int when it is a whole number."""
    ms = seconds * _MS_PER_SECOND
    return int(ms) if float(ms).is_integer() else ms


def _label(info: bytes) -> str:
    # HKDF info labels are ASCII; the page UTF-8-encodes the string back into the same bytes.
    return info.decode("ascii")


def _groups() -> list[tuple[str, dict[str, JsonValue]]]:
    """(Python home, {JS name: value}) for every export, grouped by where the value lives."""
    return [
        (
            "tunnel.proto.codes",
            {
                "CloseCode": {code.name: int(code) for code in CloseCode},
                "FINAL_CODES": sorted(int(code) for code in FINAL_CODES),
            },
        ),
        (
            "tunnel.proto.frames",
            {
                "KINDS": list(frames.KINDS),
                "MAX_CHANNEL_ID": frames.MAX_CHANNEL_ID,
                "MAX_CLOSE_CODE": frames.MAX_CLOSE_CODE,
                "MIN_CLOSE_CODE": frames.MIN_CLOSE_CODE,
            },
        ),
        (
            "tunnel.proto.limits",
            {
                # The defaults a link starts from; a relay's hello may advertise others.
                "DEFAULT_LIMITS": dataclasses.asdict(limits.DEFAULT_LIMITS),
                "MAX_WINDOW": limits.MAX_WINDOW,
            },
        ),
        (
            "tunnel.handshake",
            {"MAX_NAME_LENGTH": MAX_NAME_LENGTH, "PROTOCOL_VERSION": PROTOCOL_VERSION},
        ),
        (
            "tunnel.e2e.crypto",
            {
                "E2E_INFO": _label(crypto.E2E_INFO),
                "KEY_SIZE": crypto.KEY_SIZE,
                "NONCE_SIZE": crypto.NONCE_SIZE,
                "RELAY_TOKEN_INFO": _label(crypto.RELAY_TOKEN_INFO),
                "ROLES": list(crypto.ROLES),
                "SALT_SIZE": crypto.SALT_SIZE,
                "SECRET_SIZE": crypto.SECRET_SIZE,
                "TAG_SIZE": crypto.TAG_SIZE,
            },
        ),
        (
            "tunnel.e2e.opening",
            {
                "ANSWER_SIGN_LABEL": _label(opening.ANSWER_SIGN_LABEL),
                "ANSWER_SIZE": opening.ANSWER_SIZE,
                "DOWN_INFO": _label(opening.DOWN_INFO),
                "EPHEMERAL_KEY_SIZE": opening.EPHEMERAL_KEY_SIZE,
                "PROOF_INFO": _label(opening.PROOF_INFO),
                "PROOF_SIZE": opening.PROOF_SIZE,
                "TRANSCRIPT_LABEL": _label(opening.TRANSCRIPT_LABEL),
                "UP_INFO": _label(opening.UP_INFO),
                "MAX_CONVERSATION_LENGTH": opening.MAX_CONVERSATION_LENGTH,
            },
        ),
        (
            "tunnel.e2e.broadcast",
            {
                "COUNTER_SIZE": broadcast.COUNTER_SIZE,
                "EPOCH_SIZE": broadcast.EPOCH_SIZE,
                "SIGNATURE_SIZE": broadcast.SIGNATURE_SIZE,
                "SIGN_LABEL": _label(broadcast.SIGN_LABEL),
            },
        ),
        (
            "tunnel.log.chain",
            {"HEAD_SIGN_LABEL": _label(chain.HEAD_SIGN_LABEL)},
        ),
        (
            "tunnel.e2e.identity",
            {
                "HOST_ID_LENGTH": identity.HOST_ID_LENGTH,
                "PUBLIC_KEY_SIZE": identity.PUBLIC_KEY_SIZE,
                # Python's own regex (it has no public name yet); the page anchors it itself.
                "HOST_ID_PATTERN": identity.HOST_ID_PATTERN,
            },
        ),
        (
            "tunnel.process.backoff (seconds there, milliseconds here)",
            {
                "BACKOFF_FACTOR": backoff.BACKOFF_FACTOR,
                "BACKOFF_INITIAL_MS": _ms(backoff.BACKOFF_INITIAL),
                "JITTER": backoff.JITTER,
                "TEAMMATE_MAX_BACKOFF_MS": _ms(backoff.TEAMMATE_MAX_BACKOFF),
            },
        ),
        (
            "tunnel.app.requests",
            {
                "DEFAULT_HISTORY_ITEMS": requests.DEFAULT_HISTORY_ITEMS,
                "MAX_HISTORY_ITEMS": requests.MAX_HISTORY_ITEMS,
                "MAX_INPUT_SIZE": requests.MAX_INPUT_SIZE,
                "MAX_PROMPT_LENGTH": requests.MAX_PROMPT_LENGTH,
                "MAX_PROMPT_IMAGES": requests.MAX_PROMPT_IMAGES,
                "MAX_PROMPT_IMAGE_BYTES": requests.MAX_PROMPT_IMAGE_BYTES,
                "PROMPT_IMAGE_TYPES": list(requests.PROMPT_IMAGE_TYPES),
                "MAX_TERMINAL_SIDE": requests.MAX_TERMINAL_SIDE,
                "MIN_BROWSER_ID_LENGTH": requests.MIN_BROWSER_ID_LENGTH,
                "MAX_BROWSER_ID_LENGTH": requests.MAX_BROWSER_ID_LENGTH,
                "MAX_PUSH_ENDPOINT_LENGTH": requests.MAX_PUSH_ENDPOINT_LENGTH,
                "MAX_ID_LENGTH": requests.MAX_ID_LENGTH,
                "PUSH_KEY_SIZE": requests.PUSH_KEY_SIZE,
                "MAX_AGENT_NAME_LENGTH": requests.MAX_AGENT_NAME_LENGTH,
            },
        ),
        (
            "tunnel.app.conversation_list",
            {
                "CONVERSATION_STATES": list(conversation_list.CONVERSATION_STATES),
                "MAX_LISTED": conversation_list.MAX_LISTED,
            },
        ),
        (
            "tunnel.app.file_view",
            {
                "FILE_WINDOW_LINES": file_view.FILE_WINDOW_LINES,
                "MAX_FILE_FIND_LENGTH": file_view.MAX_FILE_FIND_LENGTH,
                "MAX_FILE_LINE_LENGTH": file_view.MAX_FILE_LINE_LENGTH,
                "MAX_FILE_PATH_LENGTH": file_view.MAX_FILE_PATH_LENGTH,
                "MAX_FILE_VIEW_BYTES": file_view.MAX_FILE_VIEW_BYTES,
            },
        ),
    ]


def wire_values() -> dict[str, JsonValue]:
    """Every export of wire.js by its JS name, as the JSON value the module carries."""
    values: dict[str, JsonValue] = {}
    for _home, group in _groups():
        for name, value in group.items():
            if name in values:
                raise AssertionError(f"wire.js would export {name} twice")
            values[name] = value
    return values


def _js(value: JsonValue) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=True, allow_nan=False)
    # Frozen, so no page module can change what every other module reads.
    return f"Object.freeze({text})" if isinstance(value, Mapping | list) else text


@functools.cache
def wire_module() -> bytes:
    """The UTF-8 text of wire.js (computed once per process; deterministic for given constants)."""
    lines = [
        f"// {WIRE_MODULE_NAME}: generated from the Python constants by {__name__}, which",
        "// serves it; it is never written to disk. Do not copy these values into other modules:",
        "// import them. The comment above each group names the Python module it is read from.",
    ]
    for home, group in _groups():
        lines.append("")
        lines.append(f"// {home}")
        lines.extend(f"export const {name} = {_js(group[name])};" for name in sorted(group))
    return ("\n".join(lines) + "\n").encode()
