"""The relay's base URL in two spellings: http(s) for links and signatures, ws(s) for dialing."""

from __future__ import annotations

from urllib.parse import urlsplit

from tunnel.e2e.crypto import normalize_relay_url

_TO_HTTP = {"ws": "http", "wss": "https", "http": "http", "https": "https"}


def http_base_url(url: str) -> str:
    """Return the relay URL as "http(s)://host[:port]" without trailing slash.

    ws:// and wss:// become http:// and https://. This exact string is what a host signs in its
    hello (docs/relay.md, "Hello") and what share links start with, so host and relay must agree.
    Raises ValueError for anything else (paths, queries, user info, other schemes).
    """
    text = url.strip()
    parts = urlsplit(text)
    scheme = _TO_HTTP.get(parts.scheme.lower())
    if scheme is None:
        raise ValueError(f"the relay URL starts with https://, wss://, http:// or ws://: {url!r}")
    rest = text[len(parts.scheme) :]
    return normalize_relay_url(scheme + rest)


def websocket_url(base_url: str, path: str) -> str:
    """Return the ws(s):// URL of `path` on the relay at `base_url` (any accepted spelling)."""
    base = http_base_url(base_url)
    scheme, rest = base.split("://", 1)
    return f"{'wss' if scheme == 'https' else 'ws'}://{rest}{path}"
