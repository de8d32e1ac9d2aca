"""The browser client's HTTP surface: which paths are the web client's and what bytes they get.

The relay calls `static_response(path)` for every path that is not its API. Assets are read from
this package with importlib.resources, so they ship inside the wheel and need no build step.

URLs:
  /h/<host_id>               the page (index.html), never cached
  /h/<host_id>/manifest.webmanifest
                             the web app manifest that installs that page, never cached
  /static/<build>/<file>     an asset of this exact build: cached for a year, immutable
  /static/<file>             the same asset without a build id: revalidated every time
  /static/.../vendor/<file>  a vendored third-party asset (tunnel/relay/web/vendor/)
  /static/[<build>/]wire.js  the page's wire vocabulary, generated from Python (`wire.py`)
  /static/[<build>/]sw.js    the service worker (notifications), allowed the scope /h/<host_id>

`<build>` is a digest of every shipped asset, so a new release changes every asset URL and a
long-lived cache can never serve a stale mix of old and new modules.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import secrets
from collections.abc import Callable
from importlib import resources
from importlib.resources.abc import Traversable

from tunnel.e2e.identity import HOST_ID_PATTERN
from tunnel.relay.web.wire import WIRE_MODULE_NAME, wire_module

Headers = list[tuple[str, str]]
Response = tuple[int, Headers, bytes]

__all__ = ["build_id", "content_security_policy", "manifest", "static_response"]

# The page loads nothing but its own origin: no inline script, no third-party origin, no plugins,
# not frameable. 'self' in connect-src covers ws:/wss: to the same host (CSP 3).
# The terminal emulator (xterm.js) builds its theme as <style> elements and colours cells with
# style attributes. So <style> elements need the per-response nonce, which the page stamps on the
# elements it creates (DOMPurify drops every <style> and style attribute from rendered markdown),
# and style attributes are allowed: they cannot run script, and with every fetch limited to 'self'
# they cannot send anything anywhere. The service worker and the manifest come from the relay
# alone (docs/web.md, "The installed page and notifications").
_POLICY = (
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "style-src-elem 'self' 'nonce-{nonce}'",
    "style-src-attr 'unsafe-inline'",
    "connect-src 'self'",
    "img-src 'self' data:",
    "font-src 'self'",
    "worker-src 'self'",
    "manifest-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
)

_HOST_PAGE = re.compile(rf"/h/({HOST_ID_PATTERN})")
_MANIFEST = re.compile(rf"/h/({HOST_ID_PATTERN})/manifest\.webmanifest")
_BUILD = re.compile(r"[0-9a-f]{16}")
# One path segment of an asset: no dot files, no "..", nothing a filesystem treats specially.
_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_MAX_SEGMENTS = 4

_CONTENT_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".json": "application/json",
    ".map": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".woff2": "font/woff2",
    ".txt": "text/plain; charset=utf-8",
}

_CACHE_FOREVER = "public, max-age=31536000, immutable"
_CACHE_REVALIDATE = "no-cache"
# Assets built in memory from Python rather than read from static/: served, cached and counted in
# the build id exactly like the files next to them.
_GENERATED: dict[str, Callable[[], bytes]] = {WIRE_MODULE_NAME: wire_module}
_BUILD_PLACEHOLDER = b"{{build}}"
_NONCE_PLACEHOLDER = b"{{nonce}}"
_HOST_PLACEHOLDER = b"{{host}}"
_THEME_PLACEHOLDER = b"{{theme}}"

MANIFEST_CONTENT_TYPE = "application/manifest+json"
THEME_COLOR = "#2f6feb"
"""The installed page's title bar and the icons' background: the page's accent (app.css)."""
BACKGROUND_COLOR = "#f6f7f9"
"""The installed page's splash screen: the page's light background (app.css)."""
ICONS = (
    ("icon-192.png", 192, "any"),
    ("icon-512.png", 512, "any"),
    ("icon-maskable-512.png", 512, "maskable"),
)
"""(file in static/, side in pixels, purpose) of each icon of the manifest (scripts/web-icons)."""
SERVICE_WORKER = "sw.js"
# The service worker's own script may load nothing; its notifications show the relay's icons.
_SERVICE_WORKER_POLICY = "default-src 'none'; img-src 'self'; frame-ancestors 'none'"


def _root() -> Traversable:
    return resources.files(__name__)


def _asset_dirs() -> tuple[Traversable, Traversable]:
    root = _root()
    return root / "static", root / "vendor"


def _walk(directory: Traversable, prefix: str) -> list[tuple[str, Traversable]]:
    found: list[tuple[str, Traversable]] = []
    if not directory.is_dir():
        return found
    for entry in directory.iterdir():
        name = f"{prefix}{entry.name}"
        if entry.is_dir():
            found.extend(_walk(entry, f"{name}/"))
        else:
            found.append((name, entry))
    return found


@functools.cache
def build_id() -> str:
    """A 16-hex-digit digest of every shipped asset, wire.js included (once per process)."""
    digest = hashlib.sha256()
    static, vendor = _asset_dirs()
    assets = {
        name: entry.read_bytes for name, entry in _walk(static, "") + _walk(vendor, "vendor/")
    }
    assets.update(_GENERATED)
    for name in sorted(assets):
        digest.update(name.encode())
        digest.update(b"\0")
        digest.update(hashlib.sha256(assets[name]()).digest())
    digest.update(_root().joinpath("index.html").read_bytes())
    return digest.hexdigest()[:16]


# Assets are never rendered as documents; if one is opened directly it may load nothing at all.
_ASSET_POLICY = "default-src 'none'; frame-ancestors 'none'"


def content_security_policy(nonce: str) -> str:
    """The page's Content-Security-Policy for a response whose <style> nonce is `nonce`."""
    return "; ".join(_POLICY).replace("{nonce}", nonce)


def _security_headers(policy: str) -> Headers:
    return [
        ("Content-Security-Policy", policy),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        ("Cross-Origin-Opener-Policy", "same-origin"),
        ("Cross-Origin-Resource-Policy", "same-origin"),
        ("X-Frame-Options", "DENY"),
    ]


def _page(host_id: str) -> Response:
    body = _root().joinpath("index.html").read_bytes()
    # A fresh nonce per response: it only ever authorizes <style> elements, never script.
    nonce = secrets.token_urlsafe(18)
    body = body.replace(_BUILD_PLACEHOLDER, build_id().encode())
    body = body.replace(_NONCE_PLACEHOLDER, nonce.encode())
    # The host id matched HOST_ID_PATTERN (lowercase base32): nothing in it needs escaping.
    body = body.replace(_HOST_PLACEHOLDER, host_id.encode())
    body = body.replace(_THEME_PLACEHOLDER, THEME_COLOR.encode())
    headers = [
        ("Content-Type", _CONTENT_TYPES[".html"]),
        ("Cache-Control", _CACHE_REVALIDATE),
        *_security_headers(content_security_policy(nonce)),
    ]
    return 200, headers, body


def manifest(host_id: str) -> dict[str, object]:
    """The web app manifest of the page of `host_id`: one installed app per host.

    It starts at the page without a fragment: the link's secret is never in it, and the page
    asks for the link when it has none (docs/web.md, "The installed page and notifications").
    """
    page = f"/h/{host_id}"
    return {
        "id": page,
        "name": f"agent-tunnel {host_id[:6]}",
        "short_name": "agent-tunnel",
        "description": "A coding agent's session, shared through agent-tunnel",
        "start_url": page,
        "scope": page,
        "display": "standalone",
        "theme_color": THEME_COLOR,
        "background_color": BACKGROUND_COLOR,
        "icons": [
            {
                "src": f"/static/{build_id()}/{name}",
                "sizes": f"{size}x{size}",
                "type": "image/png",
                "purpose": purpose,
            }
            for name, size, purpose in ICONS
        ],
    }


def _manifest(host_id: str) -> Response:
    body = json.dumps(manifest(host_id), indent=1).encode()
    headers = [
        ("Content-Type", MANIFEST_CONTENT_TYPE),
        ("Cache-Control", _CACHE_REVALIDATE),
        *_security_headers(_ASSET_POLICY),
    ]
    return 200, headers, body


def _asset(segments: list[str], *, versioned: bool) -> Response | None:
    if not 1 <= len(segments) <= _MAX_SEGMENTS:
        return None
    if not all(_SEGMENT.fullmatch(s) and ".." not in s for s in segments):
        return None
    name = segments[-1]
    dot = name.rfind(".")
    content_type = _CONTENT_TYPES.get(name[dot:]) if dot > 0 else None
    if content_type is None:
        return None
    static, vendor = _asset_dirs()
    generated = _GENERATED.get(name) if len(segments) == 1 else None
    if generated is not None:
        body = generated()
    else:
        base, rest = (vendor, segments[1:]) if segments[0] == "vendor" else (static, segments)
        if not rest:
            return None
        entry = base.joinpath(*rest)
        if not entry.is_file():
            return None
        body = entry.read_bytes()
    headers = [
        ("Content-Type", content_type),
        ("Cache-Control", _CACHE_FOREVER if versioned else _CACHE_REVALIDATE),
    ]
    if segments == [SERVICE_WORKER]:
        # Registered by the page of /h/<host_id> with that page as its scope, outside the
        # script's own folder: the browser allows that only when the script says so.
        headers += [("Service-Worker-Allowed", "/h/"), *_security_headers(_SERVICE_WORKER_POLICY)]
    else:
        headers += _security_headers(_ASSET_POLICY)
    return 200, headers, body


def static_response(path: str) -> Response | None:
    """The web client's response for `path`, or None when the path is not the web client's.

    `path` is the request target's path (a query string, if any, is ignored). The result is
    (status, headers, body); the caller adds Content-Length and sends it as is.
    """
    path = path.split("?", 1)[0].split("#", 1)[0]
    if page := _HOST_PAGE.fullmatch(path):
        return _page(page[1])
    if found := _MANIFEST.fullmatch(path):
        return _manifest(found[1])
    if not path.startswith("/static/"):
        return None
    segments = path[len("/static/") :].split("/")
    if _BUILD.fullmatch(segments[0]):
        # An asset of another build is still served, but must not be cached as immutable.
        return _asset(segments[1:], versioned=segments[0] == build_id())
    return _asset(segments, versioned=False)
