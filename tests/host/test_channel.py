"""Checks the host makes on a teammate's `open` before any key is derived."""

from __future__ import annotations

import pytest

from tunnel.e2e.crypto import new_salt
from tunnel.host import ChannelRefusedError
from tunnel.host.channel import parse_open
from tunnel.proto.codes import CloseCode


def test_an_open_is_checked_before_any_key_is_derived() -> None:
    paths = frozenset({"session"})
    peer = {"name": "ann", "role": "drive"}
    good = {
        "role": "drive",
        "salt": new_salt(),
        "name": "x",
        "kx": bytes(32),
        "proof": bytes(32),
        "peer": peer,
    }
    request = parse_open("session", good, paths=paths)
    # The teammate's own name, which its keys bind; the relay's "peer" name is only a hint.
    assert (request.role, request.name) == ("drive", "x")
    cases = [
        ("other", good, CloseCode.REFUSED),
        ("session", {**good, "role": "admin"}, CloseCode.REFUSED),
        ("session", {**good, "salt": b"short"}, CloseCode.PROTOCOL_ERROR),
        ("session", {**good, "kx": b"short"}, CloseCode.PROTOCOL_ERROR),
        ("session", {**good, "proof": "text"}, CloseCode.PROTOCOL_ERROR),
        ("session", {**good, "kx": None}, CloseCode.PROTOCOL_ERROR),
        # An older client's open: no key exchange at all.
        ("session", {k: v for k, v in good.items() if k not in ("kx", "proof")}, 4000),
        ("session", {**good, "name": ""}, CloseCode.PROTOCOL_ERROR),
        ("session", {**good, "name": "n" * 65}, CloseCode.PROTOCOL_ERROR),
        ("session", {key: v for key, v in good.items() if key != "name"}, CloseCode.PROTOCOL_ERROR),
        ("session", {**good, "peer": {"name": "ann", "role": "view"}}, CloseCode.UNAUTHORIZED),
    ]
    for path, meta, code in cases:
        with pytest.raises(ChannelRefusedError) as caught:
            parse_open(path, meta, paths=paths)
        assert caught.value.code == code
