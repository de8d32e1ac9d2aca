"""The relay's plain HTTP routes and the Origin check of its WebSocket routes."""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.datastructures import Headers
from websockets.exceptions import InvalidStatus
from websockets.http11 import Request

from tests.support import RelayProcess
from tunnel.e2e.identity import HostIdentity
from tunnel.process.exit_codes import EXIT_CONFIG
from tunnel.relay.http import HttpRouter, OriginPolicy
from tunnel.relay.metrics import RelayMetrics
from tunnel.relay.server import loopback_only

RELAY_FRAMINGS = True
"""Tests that take `relay` run on websockets and on picows (tests/relay/conftest.py)."""


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


def test_a_websocket_with_two_origin_headers_is_a_bad_request() -> None:
    headers = Headers([("Origin", "https://relay.example"), ("Origin", "https://evil.example")])
    result = router().route(Request("/v1/attach", headers))
    assert result is not None
    assert result.status_code == 400


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_a_running_relay_answers_two_origin_headers_with_400_and_no_traceback(
    relay: RelayProcess,
) -> None:
    url = relay.url.replace("http://", "ws://") + "/v1/attach"
    extra = [("Origin", relay.url), ("Origin", relay.url)]
    with pytest.raises(InvalidStatus) as caught:
        async with connect(url, additional_headers=extra):
            pass
    assert caught.value.response.status_code == 400
    # The relay still serves, and its log holds no traceback for it.
    with urllib.request.urlopen(relay.url + "/healthz", timeout=10) as reply:
        assert reply.read() == b"ok\n"
    assert "Traceback" not in relay.stderr()


# --- /metrics behind a token ----------------------------------------------------------------------

TOKEN = "s3cret-metrics-token"


def token_router() -> HttpRouter:
    return HttpRouter(
        origins=OriginPolicy.build("https://relay.example"),
        metrics=RelayMetrics(),
        static=False,
        metrics_token=TOKEN,
    )


@pytest.mark.parametrize(
    ("authorization", "status"),
    [
        (None, 401),
        ("Bearer wrong", 401),
        (f"Bearer {TOKEN}x", 401),
        (f"Basic {TOKEN}", 401),
        (TOKEN, 401),
        (f"Bearer {TOKEN}", 200),
        (f"bearer  {TOKEN} ", 200),  # the scheme is case-insensitive, spaces are not the token
    ],
)
def test_metrics_with_a_token_need_it_as_a_bearer_token(
    authorization: str | None, status: int
) -> None:
    headers = Headers()
    if authorization is not None:
        headers["Authorization"] = authorization
    result = token_router().route(Request("/metrics", headers))
    assert result is not None
    assert result.status_code == status
    if status == 401:
        assert result.headers["WWW-Authenticate"].startswith("Bearer")
        assert b"relay_" not in result.body
    else:
        assert b"relay_hosts_online" in result.body


def test_two_authorization_headers_never_read_the_metrics() -> None:
    headers = Headers([("Authorization", f"Bearer {TOKEN}"), ("Authorization", "Bearer x")])
    result = token_router().route(Request("/metrics", headers))
    assert result is not None
    assert result.status_code == 401


def test_healthz_stays_open_with_a_metrics_token() -> None:
    health = token_router().route(request("/healthz"))
    assert health is not None
    assert (health.status_code, health.body) == (200, b"ok\n")


class FakeSocket:
    def __init__(self, address: str) -> None:
        self.address = address

    def getsockname(self) -> tuple[str, int]:
        return (self.address, 8765)


@pytest.mark.parametrize(
    ("addresses", "loopback"),
    [
        (["127.0.0.1"], True),
        (["127.0.0.1", "::1"], True),
        (["0.0.0.0"], False),
        (["::"], False),
        (["127.0.0.1", "192.0.2.7"], False),
        (["fe80::1%eth0"], False),
    ],
)
def test_an_open_metrics_endpoint_is_warned_about_only_beyond_loopback(
    addresses: list[str], loopback: bool
) -> None:
    assert loopback_only([FakeSocket(a) for a in addresses]) is loopback  # type: ignore[misc]


def _get(url: str, authorization: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url)
    if authorization is not None:
        req.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(req, timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, ""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("given_by", ["file", "environment"])
def test_a_running_relay_serves_metrics_only_with_its_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given_by: str
) -> None:
    args: list[str] = []
    if given_by == "file":
        token_file = tmp_path / "metrics_token"
        token_file.write_text(TOKEN + "\n")
        args = ["--metrics-token-file", str(token_file)]
    else:
        monkeypatch.setenv("TUNNEL_RELAY_METRICS_TOKEN", TOKEN)
    relay = RelayProcess(tmp_path, *args).start()
    try:
        assert _get(relay.url + "/metrics")[0] == 401
        assert _get(relay.url + "/metrics", "Bearer wrong")[0] == 401
        status, text = _get(relay.url + "/metrics", f"Bearer {TOKEN}")
        assert status == 200
        assert "relay_hosts_online" in text
        assert _get(relay.url + "/healthz") == (200, "ok\n")
    finally:
        relay.stop()
    assert TOKEN not in relay.stderr()


@pytest.mark.timeout(60)
def test_an_open_metrics_endpoint_on_loopback_logs_no_warning(relay: RelayProcess) -> None:
    assert _get(relay.url + "/metrics")[0] == 200
    assert "/metrics is open" not in relay.stderr()


@pytest.mark.timeout(60)
def test_the_relay_refuses_a_metrics_token_given_twice(tmp_path: Path) -> None:
    token_file = tmp_path / "metrics_token"
    token_file.write_text(TOKEN)
    both = ["--metrics-token", TOKEN, "--metrics-token-file", str(token_file)]
    result = subprocess.run(
        [sys.executable, "-m", "tunnel.cli", "relay", "--port", "0", *both],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == EXIT_CONFIG
    assert result.stderr.strip().splitlines() == [
        "tunnel relay: give --metrics-token or --metrics-token-file, not both"
    ]
    assert TOKEN not in result.stderr
