"""Which push endpoints the host POSTs to: the SSRF guard (docs/security.md, "Notifications").

A subscription's endpoint comes from whoever holds a link, so the host would otherwise POST
wherever a hostile teammate points it: at a service on the host's own network, or at a
loopback admin port. Only https endpoints on the browsers' own push services are taken, and
origins the host user adds (`tunnel host --push-service ORIGIN`).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from tunnel.app.requests import MAX_PUSH_ENDPOINT_LENGTH
from tunnel.notify.vapid import origin_of

PUSH_SERVICES = (
    "fcm.googleapis.com",
    "updates.push.services.mozilla.com",
    "*.push.services.mozilla.com",
    "*.notify.windows.com",
    "web.push.apple.com",
    "*.push.apple.com",
)
"""The push services of Chrome, Edge (through FCM or WNS), Firefox and Safari; `*.` is any
subdomain."""


_HOST_NAME = re.compile(r"[a-z0-9-]+(\.[a-z0-9-]+)*")


class EndpointRefused(ValueError):
    """An endpoint the host will not POST to; the message says why, for the teammate."""


def normalize_origin(text: str) -> str:
    """`--push-service ORIGIN` as an origin (`scheme://host[:port]`); ValueError if it is not
    an http(s) origin."""
    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--push-service {text!r}: give an origin such as https://push.example")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise ValueError(f"--push-service {text!r}: an origin has no path, query or user")
    try:
        parts.port  # noqa: B018 - raises for a port that is not a number
    except ValueError:
        raise ValueError(f"--push-service {text!r}: bad port") from None
    return origin_of(text.strip())


def check_endpoint(endpoint: str, extra_origins: frozenset[str] = frozenset()) -> str:
    """`endpoint` if the host may POST pushes to it, else EndpointRefused."""
    if len(endpoint) > MAX_PUSH_ENDPOINT_LENGTH:
        raise EndpointRefused("the push endpoint is too long")
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in endpoint):
        raise EndpointRefused("the push endpoint holds spaces or control characters")
    if not endpoint.isascii():
        # A browser's endpoint is ASCII; urlsplit lower-cases a name as Unicode does (the
        # Kelvin sign becomes "k"), the HTTP client maps it with IDNA: neither is ours to trust.
        raise EndpointRefused("the push endpoint is not a push service's URL")
    try:
        parts = urlsplit(endpoint)
        parts.port  # noqa: B018 - raises for a port that is not a number
    except ValueError:
        raise EndpointRefused("the push endpoint is not a URL") from None
    if parts.username is not None or parts.password is not None or not parts.hostname:
        raise EndpointRefused("the push endpoint is not a push service's URL")
    if origin_of(endpoint) in extra_origins:
        return endpoint
    if parts.scheme != "https":
        raise EndpointRefused("the push endpoint must be https")
    if parts.port not in (None, 443):
        raise EndpointRefused("the push endpoint is not on a known push service")
    host = parts.hostname.lower()
    if not _HOST_NAME.fullmatch(host):
        # A push service's name is plain letters, digits, hyphens and dots: anything else (a
        # percent sign, a backslash, a semicolon, a trailing dot) is a name the HTTP client,
        # the resolver and this check might each read apart.
        raise EndpointRefused("the push endpoint is not on a known push service")
    for service in PUSH_SERVICES:
        if service.startswith("*."):
            if host.endswith(service[1:]) and len(host) > len(service) - 1:
                return endpoint
        elif host == service:
            return endpoint
    raise EndpointRefused(
        "the push endpoint is not on a known push service (the host may add one with"
        " --push-service)"
    )
