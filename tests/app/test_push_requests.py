"""`push_on`, `push_off` and `focus` through the strict decoder: exact fields, exact sizes."""

from __future__ import annotations

import base64
import os
from typing import Any

import msgpack
import pytest

from tests.notify.push_keys import BrowserKeys
from tunnel.app.errors import BadRequest
from tunnel.app.requests import Focus, PushOff, PushOn, decode_request, encode_request

ENDPOINT = "https://fcm.googleapis.com/fcm/send/abc"
BROWSER = "Qw3rty-Uiop_Asdf1234"


def b64(data: bytes, pad: bool = False) -> str:
    text = base64.urlsafe_b64encode(data).decode()
    return text if pad else text.rstrip("=")


def push_on(**changes: Any) -> bytes:
    message = {
        "op": "push_on",
        "endpoint": ENDPOINT,
        "p256dh": b64(BrowserKeys().public),
        "auth": b64(os.urandom(16)),
        "browser": BROWSER,
    }
    message.update(changes)
    message = {k: v for k, v in message.items() if v is not ...}
    packed: bytes = msgpack.packb(message)
    return packed


def test_a_subscription_as_the_browser_gives_it_decodes_and_round_trips() -> None:
    keys = BrowserKeys()
    request = decode_request(push_on(p256dh=b64(keys.public), auth=b64(keys.auth, pad=True)))
    assert request == PushOn(endpoint=ENDPOINT, p256dh=keys.public, auth=keys.auth, browser=BROWSER)
    assert decode_request(encode_request(request)) == request
    for other in (PushOff(endpoint=ENDPOINT), Focus(focused=True, browser=BROWSER)):
        assert decode_request(encode_request(other)) == other


@pytest.mark.parametrize(
    "changes",
    [
        {"p256dh": b64(b"\x04" + bytes(64))},  # not on the curve
        {"p256dh": b64(BrowserKeys().public[:33])},
        {"p256dh": "not base64!"},
        {"p256dh": "A" * 5000},
        {"auth": b64(os.urandom(15))},
        {"auth": 16},
        {"endpoint": ""},
        {"endpoint": "https://x/" + "a" * 3000},
        {"browser": "short"},
        {"browser": "has spaces in it, sixteen+"},
        {"browser": "b" * 65},
        {"browser": ...},
        {"extra": 1},
    ],
)
def test_a_malformed_push_on_is_a_bad_request(changes: dict[str, Any]) -> None:
    with pytest.raises(BadRequest):
        decode_request(push_on(**changes))


def test_focus_takes_only_a_boolean() -> None:
    with pytest.raises(BadRequest):
        decode_request(msgpack.packb({"op": "focus", "focused": 1, "browser": BROWSER}))
