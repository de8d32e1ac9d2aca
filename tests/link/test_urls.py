"""The relay URL in its two spellings: what a host signs and links carry, and what is dialed."""

from __future__ import annotations

import pytest

from tunnel.link import http_base_url, websocket_url


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("https://relay.example", "https://relay.example"),
        ("https://relay.example/", "https://relay.example"),
        ("wss://relay.example:8443/", "https://relay.example:8443"),
        ("ws://127.0.0.1:8765", "http://127.0.0.1:8765"),
        # Scheme and host case, default ports and IPv6 brackets: the browser's origin.
        ("http://LOCALHOST:8765/", "http://localhost:8765"),
        ("WSS://Relay.Example:443", "https://relay.example"),
        ("ws://relay.example:80", "http://relay.example"),
        ("wss://[::1]:8443/", "https://[::1]:8443"),
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
