"""Fixtures of the browser suite: Debian's chromium through Playwright, and a loopback server.

The suite never downloads a browser and never skips: without /usr/bin/chromium it fails and
says how to install it.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Playwright, sync_playwright

from tunnel.relay.web import content_security_policy, static_response

CHROMIUM = Path("/usr/bin/chromium")
# A name that resolves to loopback but is not "localhost": pages served under it are not a
# secure context, which is how the "needs https" screen is tested without leaving the machine.
INSECURE_HOST = "insecure.test"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    f"--host-resolver-rules=MAP {INSECURE_HOST} 127.0.0.1",
]
BLANK_PATH = "/test/blank"


def require_chromium() -> Path:
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: the browser tests need Debian's chromium "
            "(apt-get install -y chromium); they never download a browser",
            pytrace=False,
        )
    return CHROMIUM


# Package scope, not session: Playwright's sync API runs an event loop in the main thread while
# it is alive, and the rest of the suite needs that thread for its own (anyio) event loops.
@pytest.fixture(scope="package")
def playwright_instance() -> Iterator[Playwright]:
    require_chromium()
    with sync_playwright() as playwright:
        yield playwright


@pytest.fixture(scope="package")
def browser(playwright_instance: Playwright) -> Iterator[Browser]:
    browser = playwright_instance.chromium.launch(
        executable_path=str(require_chromium()), args=CHROMIUM_ARGS
    )
    yield browser
    browser.close()


@dataclass
class PageLog:
    """What a page reported: console errors, uncaught exceptions, CSP violations."""

    errors: list[str] = field(default_factory=list)

    def on_console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(f"console: {message.text}")

    def on_page_error(self, error: Exception) -> None:
        self.errors.append(f"pageerror: {error}")


@pytest.fixture
def page_log() -> PageLog:
    return PageLog()


@pytest.fixture
def page(browser: Browser, page_log: PageLog) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1200, "height": 860})
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.on("console", page_log.on_console)
    page.on("pageerror", page_log.on_page_error)
    yield page
    context.close()


class _StaticHandler(http.server.BaseHTTPRequestHandler):
    """Serves exactly what the relay serves for the web client, plus a blank test page."""

    def do_GET(self) -> None:
        if self.path == BLANK_PATH:
            body = b'<!doctype html><title>blank</title><link rel="icon" href="data:,">'
            headers = [
                ("Content-Type", "text/html; charset=utf-8"),
                ("Content-Security-Policy", content_security_policy("unused")),
            ]
            result: tuple[int, list[tuple[str, str]], bytes] | None = (200, headers, body)
        else:
            result = static_response(self.path)
        if result is None:
            self.send_error(404)
            return
        status, headers, body = result
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="session")
def static_server() -> Iterator[str]:
    """Base URL (http://127.0.0.1:PORT) of a loopback server of the web client's files."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _StaticHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
