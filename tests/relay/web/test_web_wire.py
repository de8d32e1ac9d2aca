"""wire.js in chromium carries exactly the values of the Python objects it is generated from."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from playwright.sync_api import Page

from tunnel import handshake
from tunnel.app import conversation_list, file_view
from tunnel.app import requests as app_requests
from tunnel.e2e import broadcast, crypto, identity, opening
from tunnel.log import chain
from tunnel.process import backoff
from tunnel.proto import codes, frames, limits

from .conftest import BLANK_PATH

pytestmark = [pytest.mark.browser, pytest.mark.timeout(60)]

# Runs in the page: every export of wire.js, whether it is frozen, and strings as UTF-8 bytes.
EXPORTS = """
async () => {
  const wire = await import("/static/wire.js");
  const out = {};
  for (const [name, value] of Object.entries(wire)) {
    out[name] = {
      value,
      type: Array.isArray(value) ? "array" : typeof value,
      frozen: Object.isFrozen(value),
      utf8: typeof value === "string" ? Array.from(new TextEncoder().encode(value)) : null,
    };
  }
  return out;
}
"""

# Runs in the page: which of these host ids the page's path check accepts.
HOST_IDS = """
async (ids) => {
  const c = await import("/static/crypto.js");
  return ids.map((id) => c.hostIdFromPath(`/h/${id}`) === id);
}
"""


JS_TYPES = {int: "number", float: "number", str: "string", list: "array", dict: "object"}


def python_values() -> dict[str, Any]:
    """What each export must be, read from the Python objects (bytes for the HKDF labels)."""
    default_limits = limits.Limits()
    return {
        "CloseCode": {code.name: int(code) for code in codes.CloseCode},
        "FINAL_CODES": sorted(int(code) for code in codes.FINAL_CODES),
        "KINDS": list(frames.KINDS),
        "MAX_CHANNEL_ID": frames.MAX_CHANNEL_ID,
        "MIN_CLOSE_CODE": frames.MIN_CLOSE_CODE,
        "MAX_CLOSE_CODE": frames.MAX_CLOSE_CODE,
        "MAX_WINDOW": limits.MAX_WINDOW,
        "DEFAULT_LIMITS": {
            field.name: getattr(default_limits, field.name)
            for field in dataclasses.fields(limits.Limits)
        },
        "PROTOCOL_VERSION": handshake.PROTOCOL_VERSION,
        "MAX_NAME_LENGTH": handshake.MAX_NAME_LENGTH,
        "ROLES": list(crypto.ROLES),
        "SECRET_SIZE": crypto.SECRET_SIZE,
        "SALT_SIZE": crypto.SALT_SIZE,
        "KEY_SIZE": crypto.KEY_SIZE,
        "NONCE_SIZE": crypto.NONCE_SIZE,
        "TAG_SIZE": crypto.TAG_SIZE,
        "RELAY_TOKEN_INFO": crypto.RELAY_TOKEN_INFO,
        "E2E_INFO": crypto.E2E_INFO,
        "TRANSCRIPT_LABEL": opening.TRANSCRIPT_LABEL,
        "PROOF_INFO": opening.PROOF_INFO,
        "UP_INFO": opening.UP_INFO,
        "DOWN_INFO": opening.DOWN_INFO,
        "ANSWER_SIGN_LABEL": opening.ANSWER_SIGN_LABEL,
        "EPHEMERAL_KEY_SIZE": opening.EPHEMERAL_KEY_SIZE,
        "PROOF_SIZE": opening.PROOF_SIZE,
        "ANSWER_SIZE": opening.ANSWER_SIZE,
        "EPOCH_SIZE": broadcast.EPOCH_SIZE,
        "COUNTER_SIZE": broadcast.COUNTER_SIZE,
        "SIGNATURE_SIZE": broadcast.SIGNATURE_SIZE,
        "SIGN_LABEL": broadcast.SIGN_LABEL,
        "HEAD_SIGN_LABEL": chain.HEAD_SIGN_LABEL,
        "PUBLIC_KEY_SIZE": identity.PUBLIC_KEY_SIZE,
        "HOST_ID_LENGTH": identity.HOST_ID_LENGTH,
        "HOST_ID_PATTERN": identity._HOST_ID_RE.pattern,
        "BACKOFF_INITIAL_MS": backoff.BACKOFF_INITIAL * 1000,
        "BACKOFF_FACTOR": backoff.BACKOFF_FACTOR,
        "TEAMMATE_MAX_BACKOFF_MS": backoff.TEAMMATE_MAX_BACKOFF * 1000,
        "JITTER": backoff.JITTER,
        "DEFAULT_HISTORY_ITEMS": app_requests.DEFAULT_HISTORY_ITEMS,
        "MAX_HISTORY_ITEMS": app_requests.MAX_HISTORY_ITEMS,
        "MAX_INPUT_SIZE": app_requests.MAX_INPUT_SIZE,
        "MAX_PROMPT_LENGTH": app_requests.MAX_PROMPT_LENGTH,
        "MAX_TERMINAL_SIDE": app_requests.MAX_TERMINAL_SIDE,
        "MIN_BROWSER_ID_LENGTH": app_requests.MIN_BROWSER_ID_LENGTH,
        "MAX_BROWSER_ID_LENGTH": app_requests.MAX_BROWSER_ID_LENGTH,
        "MAX_PUSH_ENDPOINT_LENGTH": app_requests.MAX_PUSH_ENDPOINT_LENGTH,
        "MAX_PROMPT_IMAGES": app_requests.MAX_PROMPT_IMAGES,
        "MAX_PROMPT_IMAGE_BYTES": app_requests.MAX_PROMPT_IMAGE_BYTES,
        "PROMPT_IMAGE_TYPES": list(app_requests.PROMPT_IMAGE_TYPES),
        "MAX_ID_LENGTH": app_requests.MAX_ID_LENGTH,
        "PUSH_KEY_SIZE": app_requests.PUSH_KEY_SIZE,
        "FILE_WINDOW_LINES": file_view.FILE_WINDOW_LINES,
        "MAX_FILE_FIND_LENGTH": file_view.MAX_FILE_FIND_LENGTH,
        "MAX_FILE_LINE_LENGTH": file_view.MAX_FILE_LINE_LENGTH,
        "MAX_FILE_PATH_LENGTH": file_view.MAX_FILE_PATH_LENGTH,
        "MAX_FILE_VIEW_BYTES": file_view.MAX_FILE_VIEW_BYTES,
        "MAX_AGENT_NAME_LENGTH": app_requests.MAX_AGENT_NAME_LENGTH,
        "MAX_CONVERSATION_LENGTH": opening.MAX_CONVERSATION_LENGTH,
        "CONVERSATION_STATES": list(conversation_list.CONVERSATION_STATES),
        "MAX_LISTED": conversation_list.MAX_LISTED,
    }


def test_every_wire_js_export_is_its_python_value(page: Page, static_server: str) -> None:
    page.goto(static_server + BLANK_PATH)
    got: dict[str, dict[str, Any]] = page.evaluate(EXPORTS)
    expected = python_values()
    assert sorted(got) == sorted(expected)
    for name, want in expected.items():
        export = got[name]
        if isinstance(want, bytes):
            assert export["type"] == "string", name
            assert bytes(export["utf8"]) == want, name
        else:
            assert export["value"] == want, name
            assert export["type"] == JS_TYPES[type(want)], name
        if isinstance(want, dict | list):
            # No page module can change what the others read.
            assert export["frozen"], name
    # Every close code and every final one, by name and number.
    assert got["CloseCode"]["value"]["REVOKED"] == codes.CloseCode.REVOKED
    assert set(got["FINAL_CODES"]["value"]) <= set(got["CloseCode"]["value"].values())


def test_the_page_accepts_the_host_ids_python_accepts(page: Page, static_server: str) -> None:
    page.goto(static_server + BLANK_PATH)
    samples = [
        identity.derive_host_id(bytes(32)),
        identity.derive_host_id(bytes(range(32))),
        "a" * identity.HOST_ID_LENGTH,
        "2" * identity.HOST_ID_LENGTH,
        "7" * identity.HOST_ID_LENGTH,
        "a" * (identity.HOST_ID_LENGTH - 1),
        "a" * (identity.HOST_ID_LENGTH + 1),
        "A" * identity.HOST_ID_LENGTH,
        "8" * identity.HOST_ID_LENGTH,
        "1" * identity.HOST_ID_LENGTH,
        "a" * (identity.HOST_ID_LENGTH - 1) + "-",
    ]
    got = page.evaluate(HOST_IDS, samples)
    assert got == [identity.is_host_id(sample) for sample in samples]
    assert True in got
    assert False in got
