"""Small pure pieces of the network layer: URLs, backoff, hello checks, open checks."""

from __future__ import annotations

import hashlib
import random

import pytest

from tunnel.e2e.crypto import ShareSecrets, new_salt
from tunnel.e2e.identity import HostIdentity
from tunnel.handshake import PROTOCOL_VERSION, HelloError, parse_host_hello, parse_teammate_hello
from tunnel.host import Backoff, ChannelRefusedError
from tunnel.host.channel import parse_open
from tunnel.link import http_base_url, websocket_url
from tunnel.proto.codes import CloseCode
from tunnel.relay.admission import match_role


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("https://relay.example", "https://relay.example"),
        ("https://relay.example/", "https://relay.example"),
        ("wss://relay.example:8443/", "https://relay.example:8443"),
        ("ws://127.0.0.1:8765", "http://127.0.0.1:8765"),
    ],
)
def test_relay_urls_normalize_to_what_the_host_signs(given: str, expected: str) -> None:
    assert http_base_url(given) == expected


@pytest.mark.parametrize(
    "bad", ["ftp://relay.example", "https://relay.example/sub", "relay.example", "https://u@x"]
)
def test_relay_urls_with_anything_else_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="relay URL"):
        http_base_url(bad)


def test_websocket_urls_follow_the_scheme() -> None:
    assert websocket_url("https://relay.example", "/v1/host") == "wss://relay.example/v1/host"
    assert websocket_url("http://127.0.0.1:1", "/v1/attach") == "ws://127.0.0.1:1/v1/attach"


def test_backoff_grows_is_capped_jittered_and_resets() -> None:
    backoff = Backoff(initial=0.5, maximum=4.0, rng=random.Random(7))
    delays = [backoff.next_delay() for _ in range(10)]
    ceilings = [min(4.0, 0.5 * 2**n) for n in range(10)]
    assert all(c / 2 <= d <= c for d, c in zip(delays, ceilings, strict=True))
    assert len(set(delays)) == len(delays)  # jittered
    backoff.reset()
    assert backoff.next_delay() <= 0.5
    for _ in range(10_000):
        assert backoff.next_delay() <= 4.0


def host_hello(identity: HostIdentity, challenge: bytes, url: str) -> dict[str, object]:
    return {
        "role": "host",
        "version": PROTOCOL_VERSION,
        "pubkey": identity.public_key,
        "sig": identity.sign_hello(challenge, url),
        "capabilities": ["chat"],
        "verifiers": ShareSecrets.generate().verifiers(identity.host_id),
    }


def test_a_host_hello_is_checked_against_challenge_url_and_authorized_keys() -> None:
    identity = HostIdentity.generate()
    challenge = bytes(32)
    url = "https://relay.example"
    hello = parse_host_hello(
        host_hello(identity, challenge, url),
        challenge=challenge,
        public_url=url,
        authorized_keys=None,
    )
    assert hello.host_id == identity.host_id
    assert hello.capabilities == ("chat",)
    for kwargs, code in [
        ({"challenge": bytes([1]) * 32, "public_url": url, "authorized_keys": None}, 4002),
        ({"challenge": challenge, "public_url": "https://other", "authorized_keys": None}, 4002),
        ({"challenge": challenge, "public_url": url, "authorized_keys": frozenset()}, 4002),
    ]:
        with pytest.raises(HelloError) as caught:
            parse_host_hello(host_hello(identity, challenge, url), **kwargs)  # type: ignore[arg-type]
        assert caught.value.code == code


@pytest.mark.parametrize(
    "change",
    [
        {"role": "teammate"},
        {"version": 2},
        {"version": True},
        {"pubkey": b"short"},
        {"verifiers": {"view": bytes(32)}},
        {"capabilities": "chat"},
        {"extra": 1},
    ],
)
def test_a_malformed_host_hello_is_a_protocol_error(change: dict[str, object]) -> None:
    identity = HostIdentity.generate()
    payload = {**host_hello(identity, bytes(32), "https://r"), **change}
    with pytest.raises(HelloError) as caught:
        parse_host_hello(payload, challenge=bytes(32), public_url="https://r", authorized_keys=None)
    assert caught.value.code == CloseCode.PROTOCOL_ERROR


def test_teammate_hellos_keep_only_a_hash_of_the_token_and_match_one_role() -> None:
    host_id = HostIdentity.generate().host_id
    hello = parse_teammate_hello(
        {"role": "teammate", "version": 1, "host_id": host_id, "token": b"t" * 32, "name": "ann"}
    )
    assert hello.token_hash == hashlib.sha256(b"t" * 32).digest()
    assert "t" * 32 not in repr(hello)
    verifiers = {"view": hashlib.sha256(b"v").digest(), "drive": hello.token_hash}
    assert match_role(hello.token_hash, verifiers) == "drive"
    assert match_role(hashlib.sha256(b"x").digest(), verifiers) is None
    for bad in ({"host_id": "NOT-AN-ID"}, {"name": "n" * 65}, {"token": "text"}, {"x": 1}):
        with pytest.raises(HelloError):
            parse_teammate_hello(
                {"role": "teammate", "version": 1, "host_id": host_id, "token": b"t", **bad}
            )


def test_an_open_is_checked_before_any_key_is_derived() -> None:
    paths = frozenset({"session"})
    peer = {"name": "ann", "role": "drive"}
    good = {"role": "drive", "salt": new_salt(), "name": "x", "peer": peer}
    request = parse_open("session", good, paths=paths)
    # The teammate's own name, which its keys bind; the relay's "peer" name is only a hint.
    assert (request.role, request.name) == ("drive", "x")
    cases = [
        ("other", good, CloseCode.REFUSED),
        ("session", {**good, "role": "admin"}, CloseCode.REFUSED),
        ("session", {**good, "salt": b"short"}, CloseCode.PROTOCOL_ERROR),
        ("session", {**good, "name": ""}, CloseCode.PROTOCOL_ERROR),
        ("session", {**good, "name": "n" * 65}, CloseCode.PROTOCOL_ERROR),
        ("session", {key: v for key, v in good.items() if key != "name"}, CloseCode.PROTOCOL_ERROR),
        ("session", {**good, "peer": {"name": "ann", "role": "view"}}, CloseCode.UNAUTHORIZED),
    ]
    for path, meta, code in cases:
        with pytest.raises(ChannelRefusedError) as caught:
            parse_open(path, meta, paths=paths)
        assert caught.value.code == code
