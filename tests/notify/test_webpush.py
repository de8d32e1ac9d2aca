"""Web Push encryption and VAPID against RFC 8291's Appendix A and an independent reader."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric import ec

from tests.notify.push_keys import BrowserKeys, b64d, b64e, verify_vapid
from tunnel.e2e.identity import KeyFileError
from tunnel.notify.vapid import VapidKey, b64url_decode, origin_of
from tunnel.notify.webpush import (
    MAX_PLAINTEXT,
    MAX_PUSH_BODY,
    Option,
    encrypt,
    push_headers,
    request_payload,
    topic_of,
    withdraw_payload,
)

# RFC 8291, Appendix A: every value as the RFC prints it.
PLAINTEXT = b"When I grow up, I want to be a watermelon"
AS_PRIVATE = "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"
AS_PUBLIC = (
    "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8"
)
UA_PRIVATE = "q1dXpw3UpT5VOmu_cf_v6ih07Aems3njxI-JWgLcM94"
UA_PUBLIC = (
    "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
)
AUTH = "BTBZMqHH6r4Tts7J_aSIgg"
SALT = "DGv6ra1nlYgDCS1FRnbzlw"
BODY = """
DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27ml
mlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPT
pK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN
"""


def _private(text: str) -> ec.EllipticCurvePrivateKey:
    return ec.derive_private_key(int.from_bytes(b64d(text), "big"), ec.SECP256R1())


def test_encryption_reproduces_rfc8291_appendix_a() -> None:
    body = encrypt(
        PLAINTEXT,
        p256dh=b64d(UA_PUBLIC),
        auth=b64d(AUTH),
        salt=b64d(SALT),
        sender=_private(AS_PRIVATE),
    )
    assert body == b64d(BODY)
    assert body[21:86] == b64d(AS_PUBLIC)


def test_the_rfc8291_example_decrypts_with_the_user_agents_keys() -> None:
    browser = BrowserKeys(private=_private(UA_PRIVATE), auth=b64d(AUTH))
    assert browser.public == b64d(UA_PUBLIC)
    assert browser.decrypt(b64d(BODY)) == PLAINTEXT


def test_a_fresh_push_decrypts_at_the_browser_and_nowhere_else() -> None:
    browser = BrowserKeys()
    body = encrypt(b"allow?", p256dh=browser.public, auth=browser.auth)
    assert browser.decrypt(body) == b"allow?"
    other = BrowserKeys(private=browser.private)  # the right key, another auth secret
    with pytest.raises(InvalidTag):
        other.decrypt(body)


@pytest.mark.parametrize(
    ("p256dh", "auth"),
    [
        (b"\x04" + bytes(64), os.urandom(16)),  # not on the curve
        (BrowserKeys().public[:33], os.urandom(16)),  # compressed length
        (BrowserKeys().public, os.urandom(15)),
    ],
    ids=["off-curve", "compressed", "short-auth"],
)
def test_keys_of_the_wrong_shape_are_refused(p256dh: bytes, auth: bytes) -> None:
    with pytest.raises(ValueError, match=r"p256dh|auth"):
        encrypt(b"x", p256dh=p256dh, auth=auth)


def test_the_largest_payload_fits_a_push_and_a_larger_one_is_refused() -> None:
    browser = BrowserKeys()
    body = encrypt(b"x" * MAX_PLAINTEXT, p256dh=browser.public, auth=browser.auth)
    assert len(body) == MAX_PUSH_BODY
    with pytest.raises(ValueError, match="at most"):
        encrypt(b"x" * (MAX_PLAINTEXT + 1), p256dh=browser.public, auth=browser.auth)


def test_a_long_request_is_cut_to_fit_command_first() -> None:
    payload = request_payload(
        host_id="h",
        request_id="perm_1",
        agent="demo",
        title="Run a long command — " * 100,
        kind="execute",
        command="ls -la " * 2000,
        options=[Option(option_id="allow_once", name="Allow", kind="allow_once")],
        reminder=False,
    )
    assert len(payload) <= MAX_PLAINTEXT
    message = json.loads(payload)
    assert message["command"].endswith("…")
    assert message["title"].startswith("Run a long command")
    assert message["options"] == [
        {"option_id": "allow_once", "name": "Allow", "kind": "allow_once"}
    ]


def test_payload_shapes() -> None:
    request = json.loads(
        request_payload(
            host_id="h",
            request_id="perm_1",
            agent="demo",
            title="Allow?",
            kind="read",
            command=None,
            options=[],
            reminder=True,
        )
    )
    assert request == {
        "v": 1,
        "type": "request",
        "tag": "h/perm_1",
        "host": "h",
        "request_id": "perm_1",
        "agent": "demo",
        "title": "Allow?",
        "kind": "read",
        "command": None,
        "options": [],
        "reminder": True,
    }
    assert json.loads(withdraw_payload(host_id="h", request_id="perm_1")) == {
        "v": 1,
        "type": "withdraw",
        "tag": "h/perm_1",
        "host": "h",
        "request_id": "perm_1",
    }


def test_vapid_jwt_verifies_with_the_hosts_public_key(tmp_path: Path) -> None:
    key = VapidKey.load_or_create(tmp_path / "host_key.vapid")
    now = time.time()
    endpoint = "https://fcm.googleapis.com/fcm/send/abc:def"
    headers = push_headers(
        key, endpoint, contact="mailto:ops@example.org", now=now, topic=topic_of("h/perm_1")
    )
    claims = verify_vapid(headers["Authorization"], audience="https://fcm.googleapis.com", now=now)
    assert claims["k"] == key.public_key
    assert claims["sub"] == "mailto:ops@example.org"
    assert headers["Content-Encoding"] == "aes128gcm"
    assert headers["Urgency"] == "high"
    assert len(headers["Topic"]) == 32
    assert int(headers["TTL"]) > 0
    assert b64url_decode(key.application_server_key) == key.public_key
    assert len(key.public_key) == 65


def test_the_vapid_key_is_kept_private_and_reloaded(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "host_key.vapid"
    first = VapidKey.load_or_create(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert VapidKey.load_or_create(path).public_key == first.public_key
    path.chmod(0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        VapidKey.load_or_create(path)


def test_the_audience_is_the_endpoints_origin() -> None:
    assert origin_of("https://Updates.Push.Services.Mozilla.com/wpush/v2/x") == (
        "https://updates.push.services.mozilla.com"
    )
    assert origin_of("http://127.0.0.1:8080/push/1") == "http://127.0.0.1:8080"
    assert b64e(b64d(AUTH)) == AUTH
