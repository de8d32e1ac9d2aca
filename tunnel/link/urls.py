"""The relay's base URL in two spellings: http(s) for links and signatures, ws(s) for dialing."""

from __future__ import annotations

from urllib.parse import urlsplit

from tunnel.e2e.crypto import normalize_relay_url

_TO_HTTP = {"ws": "http", "wss": "https", "http": "http", "https": "https"}


def http_base_url(url: str) -> str:
    """Return the relay URL as "http(s)://host[:port]", in normal form (`normalize_relay_url`).

    ws:// and wss:// become http:// and https://; the scheme and host are lowercased, a default
    port and a trailing slash dropped. This exact string is what a host signs in its hello
    (docs/relay.md, "Hello") and what share links start with, and the relay puts its public URL
    in the same form, so host and relay agree however either was spelled.
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
