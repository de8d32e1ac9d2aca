"""Node-to-node signatures: only a node holding the cluster secret gets through, each signature
opens one connection (also once the node restarted). That the owner counts a carried teammate
under the address the entry node saw is in test_node_link.py."""

from __future__ import annotations

import time

import pytest
from websockets.datastructures import Headers

from tunnel.relay.node_forward import SeenSignatures, sign_headers, verified_client

KEY = b"k" * 32
NODE = "http://10.0.0.2:8765"
RUN = "0f" * 16


def _verify(
    headers: dict[str, str],
    *,
    key: bytes = KEY,
    node: str = NODE,
    run: str = RUN,
    seen: SeenSignatures | None = None,
    now: float | None = None,
) -> str | None:
    # A record of its own per test unless given: the process-wide one would carry state across.
    record = SeenSignatures() if seen is None else seen
    return verified_client(
        Headers(headers), key, node_url=node, run=run, max_skew=30, now=now, seen=record
    )


def _sign(client: str = "203.0.113.7", now: float | None = None) -> dict[str, str]:
    return sign_headers(KEY, target=NODE, run=RUN, client=client, now=now)


def test_a_signature_names_the_client_for_the_node_it_was_made_for() -> None:
    assert _verify(_sign("203.0.113.7")) == "203.0.113.7"
    assert _verify(_sign("2001:db8::1")) == "2001:db8::1"


@pytest.mark.parametrize(
    "change",
    [
        "other secret",
        "other node",
        "the node's earlier run",
        "client changed",
        "too old",
        "from the future",
        "no signature",
        "no nonce",
        "nonce changed",
        "not an address",
    ],
)
def test_a_signature_that_does_not_hold_lets_nothing_through(change: str) -> None:
    now = time.time()
    headers = _sign(now=now)
    key, node, run = KEY, NODE, RUN
    if change == "other secret":
        key = b"x" * 32
    elif change == "other node":
        node = "http://10.0.0.3:8765"
    elif change == "the node's earlier run":
        run = "a1" * 16
    elif change == "client changed":
        headers["Tunnel-Node-Client"] = "203.0.113.8"
    elif change == "too old":
        headers = _sign(now=now - 31)
    elif change == "from the future":
        headers = _sign(now=now + 31)
    elif change == "no signature":
        del headers["Tunnel-Node-Signature"]
    elif change == "no nonce":
        del headers["Tunnel-Node-Nonce"]
    elif change == "nonce changed":
        headers["Tunnel-Node-Nonce"] = "another nonce"
    else:
        headers = _sign("not-an-ip")
    assert _verify(headers, key=key, node=node, run=run) is None


def test_a_signed_request_replayed_to_the_same_node_is_refused() -> None:
    seen = SeenSignatures()
    headers = _sign()
    assert _verify(headers, seen=seen) == "203.0.113.7"
    assert _verify(headers, seen=seen) is None
    # Every signing makes a new nonce: the same client again, freshly signed, gets through.
    assert _verify(_sign(), seen=seen) is not None


def test_signatures_are_forgotten_once_too_old_to_be_accepted() -> None:
    seen = SeenSignatures()
    now = time.time()
    old = _sign(now=now)
    assert _verify(old, seen=seen, now=now) is not None
    assert len(seen) == 1
    # 31 s on, the old signature is past its window: dropped from the record, and still refused.
    later = now + 31
    fresh = _sign("203.0.113.8", now=later)
    assert _verify(fresh, seen=seen, now=later) == "203.0.113.8"
    assert len(seen) == 1
    assert _verify(old, seen=seen, now=later) is None
    assert len(seen) == 1


def test_a_full_record_refuses_new_signatures_rather_than_growing() -> None:
    seen = SeenSignatures(max_entries=2)
    now = time.time()

    def fresh(at: float) -> dict[str, str]:
        return _sign(now=at)

    assert _verify(fresh(now), seen=seen, now=now) is not None
    assert _verify(fresh(now), seen=seen, now=now) is not None
    assert _verify(fresh(now), seen=seen, now=now) is None
    assert len(seen) == 2
    # Once the two expire there is room again.
    later = now + 31
    assert _verify(fresh(later), seen=seen, now=later) is not None
    assert len(seen) == 1
