"""Sealed Redis values, without Redis: a record or an announcement opens only with the cluster
secret, for the key or channel it was written to, while it holds; refusals are logged once in a
while, not once each."""

from __future__ import annotations

import json
import logging

import pytest

from tunnel.relay.cluster_auth import (
    Announcement,
    Owner,
    ThrottledWarnings,
    UnverifiedError,
    open_announcement,
    open_record,
    seal_announcement,
    seal_record,
)

SECRET = b"s" * 32
KEY = "agent-tunnel:host:aaaa"
CHANNEL = "agent-tunnel:owners"
NOW = 1_700_000_000
OWNER = Owner(node_url="http://10.0.0.1:8765", run="01" * 16, instance=b"\x07" * 16)
ANNOUNCEMENT = Announcement(
    host_id="aaaa", node_url="http://10.0.0.1:8765", run="01" * 16, issued=NOW, nonce="n-1"
)


def _open_record(raw: bytes | str, *, key: str = KEY, now: float = NOW) -> Owner:
    return open_record(SECRET, key, raw, now=now, max_skew=30)


def _open_announcement(raw: bytes | str, *, channel: str = CHANNEL, now: float = NOW) -> object:
    return open_announcement(SECRET, channel, raw, now=now, max_skew=30)


def _tampered(sealed: str, **changes: object) -> str:
    mac, _, body = sealed.partition(".")
    value = json.loads(body)
    value.update(changes)
    return mac + "." + json.dumps(value, sort_keys=True, separators=(",", ":"))


def test_a_record_opens_with_the_secret_for_its_own_key_until_it_expires() -> None:
    sealed = seal_record(SECRET, KEY, OWNER, expires=NOW + 15)
    assert _open_record(sealed) == OWNER
    assert _open_record(sealed.encode()) == OWNER
    # The writer's clock may be behind ours by the allowed skew: still valid that much longer.
    assert _open_record(sealed, now=NOW + 15 + 30) == OWNER
    anonymous = Owner(node_url=OWNER.node_url, run=OWNER.run, instance=None)
    assert _open_record(seal_record(SECRET, KEY, anonymous, expires=NOW + 15)) == anonymous


@pytest.mark.parametrize(
    "forgery",
    [
        "unsigned, as records were once written",
        "another secret",
        "another host's key",
        "body changed",
        "expired",
        "an announcement",
        "not text",
        "too long",
        "empty",
    ],
)
def test_a_record_that_no_node_wrote_for_this_key_is_refused(forgery: str) -> None:
    sealed = seal_record(SECRET, KEY, OWNER, expires=NOW + 15)
    key, now = KEY, float(NOW)
    raw: bytes | str = sealed
    if forgery.startswith("unsigned"):
        raw = json.dumps({"instance": None, "node": "http://203.0.113.9", "run": "x"})
    elif forgery == "another secret":
        raw = seal_record(b"o" * 32, KEY, OWNER, expires=NOW + 15)
    elif forgery == "another host's key":
        key = "agent-tunnel:host:bbbb"
    elif forgery == "body changed":
        raw = _tampered(sealed, node="http://203.0.113.9")
    elif forgery == "expired":
        now = NOW + 15 + 31
    elif forgery == "an announcement":
        raw = seal_announcement(SECRET, KEY, ANNOUNCEMENT)
    elif forgery == "not text":
        raw = b"\xff" + sealed.encode()
    elif forgery == "too long":
        raw = sealed + " " * 5000
    else:
        raw = ""
    with pytest.raises(UnverifiedError):
        _open_record(raw, key=key, now=now)


def test_an_announcement_opens_with_the_secret_on_its_channel_while_it_is_recent() -> None:
    sealed = seal_announcement(SECRET, CHANNEL, ANNOUNCEMENT)
    assert _open_announcement(sealed) == ANNOUNCEMENT
    assert _open_announcement(sealed.encode(), now=NOW - 30) == ANNOUNCEMENT
    assert _open_announcement(sealed, now=NOW + 30) == ANNOUNCEMENT


@pytest.mark.parametrize(
    "forgery",
    [
        "unsigned, as announcements were once sent",
        "another secret",
        "another channel",
        "another host",
        "too old",
        "from the future",
        "a record",
    ],
)
def test_an_announcement_that_no_node_sent_now_is_refused(forgery: str) -> None:
    sealed = seal_announcement(SECRET, CHANNEL, ANNOUNCEMENT)
    channel, now = CHANNEL, float(NOW)
    raw: bytes | str = sealed
    if forgery.startswith("unsigned"):
        raw = json.dumps({"host": "aaaa", "node": "http://x", "run": "x", "code": 4009})
    elif forgery == "another secret":
        raw = seal_announcement(b"o" * 32, CHANNEL, ANNOUNCEMENT)
    elif forgery == "another channel":
        channel = "agent-tunnel:other"
    elif forgery == "another host":
        raw = _tampered(sealed, host="bbbb")
    elif forgery == "too old":
        now = NOW + 31
    elif forgery == "from the future":
        now = NOW - 31
    else:
        raw = seal_record(SECRET, CHANNEL, OWNER, expires=NOW + 15)
    with pytest.raises(UnverifiedError):
        _open_announcement(raw, channel=channel, now=now)


def test_refusals_are_logged_once_in_a_while_with_how_many_were_held_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = [0.0]
    warnings = ThrottledWarnings(logging.getLogger("test.throttled"), clock=lambda: clock[0])
    with caplog.at_level(logging.WARNING, logger="test.throttled"):
        for _ in range(1000):
            warnings.warning("refused a forgery (%s)", "bad signature")
        warnings.warning("refused something else")
        clock[0] = 61.0
        warnings.warning("refused a forgery (%s)", "expired")
    assert [record.getMessage() for record in caplog.records] == [
        "refused a forgery (bad signature)",
        "refused something else",
        "refused a forgery (expired) (and 999 more like it since)",
    ]
