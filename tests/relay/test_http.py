"""The relay's plain HTTP routes and the Origin check of its WebSocket routes."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from websockets.asyncio.client import connect
from websockets.datastructures import Headers
from websockets.exceptions import InvalidStatus
from websockets.http11 import Request

from tests.support import RelayProcess
from tunnel.e2e.identity import HostIdentity
from tunnel.relay.http import HttpRouter, OriginPolicy
from tunnel.relay.metrics import RelayMetrics


def router(static: object = False) -> HttpRouter:
    return HttpRouter(
        origins=OriginPolicy.build("https://relay.example", ["https://app.example:8443"]),
        metrics=RelayMetrics(),
        static=static,  # type: ignore[arg-type]
    )


def request(path: str, origin: str | None = None) -> Request:
    headers = Headers()
    if origin is not None:
        headers["Origin"] = origin
    return Request(path, headers)


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        (None, True),  # not a browser: a host or the Python client
        ("https://relay.example", True),
        ("https://RELAY.example:443", True),  # the same origin, spelled differently
        ("https://app.example:8443", True),
        ("http://relay.example", False),  # scheme matters
        ("https://relay.example.evil.com", False),
        ("https://app.example", False),  # port matters
        ("null", False),
        ("garbage", False),
    ],
)
def test_browser_websockets_need_an_allowed_origin(origin: str | None, allowed: bool) -> None:
    for path in ("/v1/attach", "/v1/host"):
        result = router().route(request(path, origin))
        if allowed:
            assert result is None  # continue with the WebSocket handshake
        else:
            assert result is not None
            assert result.status_code == 403


def test_plain_routes() -> None:
    r = router()
    health = r.route(request("/healthz"))
    assert health is not None
    assert (health.status_code, health.body) == (200, b"ok\n")
    metrics = r.route(request("/metrics"))
    assert metrics is not None
    assert metrics.status_code == 200
    assert b"relay_hosts_online" in metrics.body
    missing = r.route(request("/etc/passwd"))
    assert missing is not None
    assert missing.status_code == 404


def test_other_paths_go_to_the_web_client_and_its_headers_are_kept() -> None:
    def static(path: str) -> tuple[int, list[tuple[str, str]], bytes] | None:
        if path == "/h/x":
            return 200, [("Content-Type", "text/html"), ("Cache-Control", "no-store")], b"<p>"
        return None

    r = router(static)
    page = r.route(request("/h/x?ignored=1"))
    assert page is not None
    assert (page.status_code, page.body) == (200, b"<p>")
    assert page.headers.get_all("Content-Type") == ["text/html"]
    assert page.headers["Cache-Control"] == "no-store"
    assert page.headers["Content-Length"] == "3"
    missing = r.route(request("/h/y"))
    assert missing is not None
    assert missing.status_code == 404


@pytest.mark.timeout(60)
def test_http_routes_of_a_running_relay(relay: RelayProcess) -> None:
    with urllib.request.urlopen(relay.url + "/healthz", timeout=10) as reply:
        assert reply.read() == b"ok\n"
    with urllib.request.urlopen(relay.url + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    for name in (
        "relay_hosts_online",
        "relay_teammates_attached",
        "relay_open_channels",
        "relay_connections",
    ):
        assert name in text
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(relay.url + "/nope", timeout=10)
    assert caught.value.code == 404
    caught.value.close()
    # The web client's page for a host id.
    page_url = f"{relay.url}/h/{HostIdentity.generate().host_id}"
    with urllib.request.urlopen(page_url, timeout=10) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("text/html")


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_a_cross_site_websocket_is_refused_with_403(relay: RelayProcess) -> None:
    url = relay.url.replace("http://", "ws://") + "/v1/attach"
    with pytest.raises(InvalidStatus) as caught:
        async with connect(url, origin="https://evil.example"):  # type: ignore[arg-type]
            pass
    assert caught.value.response.status_code == 403
    async with connect(url, origin=relay.url) as websocket:  # type: ignore[arg-type]
        assert isinstance(await websocket.recv(), bytes)  # the relay's hello
