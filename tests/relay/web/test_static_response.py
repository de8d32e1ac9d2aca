"""What tunnel.relay.web serves: the page, its assets, its headers, and nothing else."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tunnel.relay.web import build_id, content_security_policy, static_response

HOST_ID = "et3o22wl7yiatqbq27ffm7btzj"
WEB = Path(__file__).resolve().parents[3] / "tunnel" / "relay" / "web"


def headers_of(path: str) -> dict[str, str]:
    result = static_response(path)
    assert result is not None, path
    return dict(result[1])


def test_host_page_is_the_index_with_this_build_and_a_fresh_nonce() -> None:
    first = static_response(f"/h/{HOST_ID}")
    second = static_response(f"/h/{HOST_ID}")
    assert first is not None
    assert second is not None
    status, headers, body = first
    assert status == 200
    fields = dict(headers)
    assert fields["Content-Type"] == "text/html; charset=utf-8"
    assert fields["Cache-Control"] == "no-cache"
    assert f"/static/{build_id()}/app.js".encode() in body
    assert b"{{" not in body
    nonce = re.search(rb'name="style-nonce" content="([A-Za-z0-9_-]+)"', body)
    assert nonce is not None
    assert f"'nonce-{nonce.group(1).decode()}'" in fields["Content-Security-Policy"]
    assert dict(second[1])["Content-Security-Policy"] != fields["Content-Security-Policy"]


def test_page_policy_forbids_inline_script_and_other_origins() -> None:
    policy = dict(
        d.strip().split(" ", 1)
        for d in headers_of(f"/h/{HOST_ID}")["Content-Security-Policy"].split(";")
    )
    assert policy["default-src"] == "'self'"
    assert policy["script-src"] == "'self'"
    assert policy["connect-src"] == "'self'"
    assert policy["object-src"] == "'none'"
    assert policy["base-uri"] == "'none'"
    assert policy["frame-ancestors"] == "'none'"
    assert policy["img-src"] == "'self' data:"
    assert policy["worker-src"] == "'self'"
    assert policy["manifest-src"] == "'self'"
    assert "unsafe-inline" not in policy["script-src"]
    assert "unsafe-eval" not in policy["script-src"]
    assert "unsafe-inline" not in policy["style-src-elem"]
    assert content_security_policy("abc").count("'nonce-abc'") == 1


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/static/app.js", "text/javascript; charset=utf-8"),
        ("/static/wire.js", "text/javascript; charset=utf-8"),
        ("/static/app.css", "text/css; charset=utf-8"),
        ("/static/vendor/xterm.mjs", "text/javascript; charset=utf-8"),
        ("/static/vendor/xterm.css", "text/css; charset=utf-8"),
        ("/static/vendor/msgpack/utils/int.mjs", "text/javascript; charset=utf-8"),
        ("/static/vendor/licenses/marked.txt", "text/plain; charset=utf-8"),
    ],
)
def test_assets_have_their_content_type_and_safe_headers(path: str, content_type: str) -> None:
    fields = headers_of(path)
    assert fields["Content-Type"] == content_type
    assert fields["X-Content-Type-Options"] == "nosniff"
    assert fields["Referrer-Policy"] == "no-referrer"
    assert fields["Cache-Control"] == "no-cache"
    versioned = headers_of(path.replace("/static/", f"/static/{build_id()}/", 1))
    assert versioned["Cache-Control"] == "public, max-age=31536000, immutable"
    # Another build's URL still works but is never cached as immutable.
    stale = headers_of(path.replace("/static/", "/static/0123456789abcdef/", 1))
    assert stale["Cache-Control"] == "no-cache"


def test_asset_bytes_are_the_packaged_files() -> None:
    result = static_response("/static/vendor/marked.esm.js")
    assert result is not None
    assert result[2] == (WEB / "vendor" / "marked.esm.js").read_bytes()


def test_each_host_page_has_its_manifest_and_the_worker_may_serve_it() -> None:
    status, headers, body = static_response(f"/h/{HOST_ID}/manifest.webmanifest") or (0, [], b"")
    assert status == 200
    fields = dict(headers)
    assert fields["Content-Type"] == "application/manifest+json"
    assert fields["Cache-Control"] == "no-cache"
    assert fields["X-Content-Type-Options"] == "nosniff"
    manifest = json.loads(body)
    assert manifest["start_url"] == manifest["scope"] == manifest["id"] == f"/h/{HOST_ID}"
    for icon in manifest["icons"]:
        assert icon["src"].startswith(f"/static/{build_id()}/")
        assert static_response(icon["src"]) is not None
    page = static_response(f"/h/{HOST_ID}")
    assert page is not None
    assert f'href="/h/{HOST_ID}/manifest.webmanifest"'.encode() in page[2]
    assert b'name="theme-color" content="#' in page[2]
    worker = headers_of(f"/static/{build_id()}/sw.js")
    assert worker["Service-Worker-Allowed"] == "/h/"
    assert worker["Content-Type"] == "text/javascript; charset=utf-8"
    assert worker["Content-Security-Policy"].startswith("default-src 'none'")
    assert "Service-Worker-Allowed" not in headers_of("/static/app.js")


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/h/",
        "/h/short",
        f"/h/{HOST_ID}/extra",
        f"/h/{HOST_ID}/manifest.json",
        f"/h/{HOST_ID.upper()}/manifest.webmanifest",
        "/h/manifest.webmanifest",
        "/static/manifest.webmanifest",
        f"/h/{HOST_ID.upper()}",
        "/h/0123456789012345678901234a",
        "/static/",
        "/static/../__init__.py",
        "/static/%2e%2e/__init__.py",
        "/static/..%2f__init__.py",
        "/static/vendor/../../__init__.py",
        "/static/vendor/..",
        "/static/vendor",
        "/static/vendor/",
        "/static/.hidden.js",
        "/static/app.js/",
        "/static//app.js",
        "/static/app.py",
        "/static/__init__.py",
        "/static/vendor/README.md",
        "/static/missing.js",
        "/static/vendor/wire.js",
        "/static/sub/wire.js",
        "/static/a/b/c/d/e.js",
        "/static\\app.js",
        "/favicon.ico",
        "/v1/attach",
        "/healthz",
    ],
)
def test_other_paths_are_not_the_web_clients(path: str) -> None:
    assert static_response(path) is None


def test_query_strings_are_ignored() -> None:
    assert static_response(f"/h/{HOST_ID}?name=alice") is not None
    assert static_response("/static/app.js?v=1") is not None


def test_build_id_is_stable_and_hex() -> None:
    assert re.fullmatch(r"[0-9a-f]{16}", build_id())
    assert build_id() == build_id()


def test_vendor_readme_records_the_locked_versions() -> None:
    lock = json.loads((WEB.parents[2] / "scripts" / "web-lock" / "package-lock.json").read_text())
    readme = (WEB / "vendor" / "README.md").read_text()
    for name in ("marked", "dompurify", "@xterm/xterm", "@xterm/addon-fit", "@msgpack/msgpack"):
        version = lock["packages"][f"node_modules/{name}"]["version"]
        assert f"| {name} | {version} |" in readme, name
