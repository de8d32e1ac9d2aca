"""The relay's base URL: its one normal form (`normalize_relay_url`), http(s) for links and
signatures, ws(s) for dialing."""

from __future__ import annotations

from typing import Final
from urllib.parse import SplitResult, urlsplit

_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
"""The port a relay URL leaves out."""


def normalize_relay_url(url: str) -> str:
    """Return `url` in the one form a relay URL has everywhere: "scheme://host[:port]".

    The scheme and host are lowercased, the scheme's default port (80, 443) and a trailing "/"
    are dropped, and an IPv6 host keeps its brackets: the browser's `location.origin`. A host
    signs the relay URL it dials in this form, the relay checks the signature against its public
    URL in this form, share links start with it and Origin headers are compared in it, so
    `http://LOCALHOST:80/` and `http://localhost` are one relay.

    Raises ValueError for anything but an http(s) origin (no path, query, fragment or user info).
    """
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise ValueError("the relay URL must start with https:// (or http:// for local tests)")
    check_origin(parts)
    if parts.path not in ("", "/") or parts.query or parts.fragment or "#" in url:
        raise ValueError("the relay URL must be just scheme://host[:port], with no path or query")
    host = parts.hostname or ""  # lowercased, brackets removed; _check_origin saw it is there
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    if port is None or port == _DEFAULT_PORTS[scheme]:
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


def check_origin(parts: SplitResult) -> None:
    """Raise ValueError unless `parts` names a host (and a valid port) with no user info."""
    if not parts.netloc or not parts.hostname:
        raise ValueError("the relay URL has no host")
    if "@" in parts.netloc:
        raise ValueError("the relay URL must not contain user info")
    try:
        _ = parts.port
    except ValueError:
        raise ValueError("the relay URL has an invalid port") from None


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
