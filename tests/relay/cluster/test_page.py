"""The page, served by one node, attached to a host on another: it drives the session and shows
exactly the host's items; a viewer's page on a third node sees the same."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.relay.cluster.support import SECRET, Node, RedisServer, free_port
from tests.relay.web.conftest import CHROMIUM_ARGS, require_chromium
from tests.relay.web.stack import Host
from tests.relay.web.test_web_layout import idle
from tests.relay.web.test_web_stack import connected, named, prompt, seqs
from tests.support import RelayProcess

pytestmark = [pytest.mark.browser, pytest.mark.cluster, pytest.mark.timeout(180)]


@pytest.fixture
def browser() -> Iterator[Browser]:
    # Function scope: Playwright's sync API runs an event loop in this thread while it is alive,
    # and the other tests of this package need the thread for their own.
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(require_chromium()), args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def nodes(tmp_path: Path, redis_server: RedisServer) -> Iterator[list[Node]]:
    ports = [free_port() for _ in range(3)]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    secret = tmp_path / "cluster-secret"
    secret.write_text(SECRET)
    started: list[Node] = []
    try:
        for port in ports:
            # The host dials node 1, so that is the public URL it signs; the pages are loaded
            # from nodes 2 and 3, whose origins are allowed to open WebSockets.
            args = ["--cluster", redis_server.url, "--node-url", f"ws://127.0.0.1:{port}"]
            args += ["--cluster-secret-file", str(secret), "--public-url", urls[0]]
            args += ["--allowed-origin", urls[1], "--allowed-origin", urls[2]]
            process = RelayProcess(tmp_path, *args, port=port).start()
            started.append(Node(process=process, port=port))
        for node in started:
            for _ in range(200):
                if "cluster: member" in node.health():
                    break
                time.sleep(0.05)
            else:
                raise AssertionError(f"{node.url} did not join the cluster")
        yield started
    finally:
        for node in started:
            node.process.stop()


def _answer_permission(page: Page) -> None:
    pending = page.locator("[data-testid=permission-request][data-state=pending]").first
    expect(pending).to_be_visible(timeout=30_000)
    pending.locator("[data-testid=permission-option][data-kind=allow_once]").click()


def test_pages_on_two_other_nodes_drive_and_watch_the_host_with_its_exact_items(
    tmp_path: Path, nodes: list[Node], browser: Browser
) -> None:
    node1, node2, node3 = nodes
    home = tmp_path / "host"
    home.mkdir()
    host = Host.start(home, node1.url)
    try:
        context = browser.new_context(viewport={"width": 1200, "height": 860})
        driver, viewer = context.new_page(), context.new_page()
        driver.goto(named(host.drive_link.replace(node1.url, node2.url, 1), "alice"))
        viewer.goto(named(host.view_link.replace(node1.url, node3.url, 1), "victor"))
        connected(driver)
        connected(viewer)
        prompt(driver, "Count the lines, please")
        _answer_permission(driver)
        for page in (driver, viewer):
            expect(page.get_by_test_id("tool-result").first).to_be_visible(timeout=30_000)
            expect(page.locator("[data-testid=message][data-role=agent]").last).to_be_visible()
        # The turn's last items (the plan, the usage) come after its reply: read the host's log
        # only once the agent is idle again.
        idle(driver)
        conversation = driver.evaluate("window.__tunnel.session.conversationId")
        expected = [item["seq"] for item in host.log_items(conversation)]
        for page in (driver, viewer):
            page.wait_for_function(
                f"window.__tunnel.session.items.length >= {len(expected)}", timeout=30_000
            )
            # Every item the host logged, once, in order; and what the page shows is among them.
            assert page.evaluate("window.__tunnel.session.items.map((i) => i.seq)") == expected
            assert page.evaluate("window.__tunnel.session.stats.duplicates") == 0
            assert set(seqs(page)) <= set(expected)
        assert "relay_cluster_forwarded_connections 1.0" in node2.metrics()
        assert "relay_cluster_forwarded_connections 1.0" in node3.metrics()
        assert "relay_teammates_attached 2.0" in node1.metrics()
        context.close()
    finally:
        host.process.stop()
