"""The agent asks for a login at its start, through the real stack: the page shows its methods,
a driver's button has the host log it in (a failing method says why, the next one works and the
agent answers), and a viewer sees the methods with no button."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from ...agents.test_acp import FAKE_AGENT
from .stack import Host, isolated_env, running_relay
from .test_web_permission_merge import named, open_connected

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]


def test_a_driver_logs_the_agent_in_from_the_page(browser: Browser, tmp_path: Path) -> None:
    home = tmp_path / "host"
    home.mkdir()
    env = isolated_env(home) | {"FAKE_ACP_AUTH": "1"}
    env.pop("FAKE_ACP_KEY", None)
    agent = "acp:" + shlex.join([sys.executable, str(FAKE_AGENT)])
    context = browser.new_context(viewport={"width": 1200, "height": 860})
    try:
        with running_relay(tmp_path / "relay") as relay:
            host = Host.start(home, relay.url, agent=agent, env=env)
            try:
                viewer = context.new_page()
                open_connected(viewer, named(host.view_link, "bob"))
                card = viewer.get_by_test_id("auth-required")
                expect(card.get_by_test_id("login-method")).to_have_count(3, timeout=30_000)
                expect(card.get_by_test_id("login-button")).to_have_count(0)
                expect(card).to_contain_text("A driver can log it in.")

                driver = context.new_page()
                open_connected(driver, named(host.drive_link, "alice"))
                methods = driver.get_by_test_id("auth-required").get_by_test_id("login-method")
                methods.filter(has_text="Browser login").get_by_test_id("login-button").click()
                expect(driver.locator("[data-what=auth_failed]")).to_contain_text(
                    "The login (browser) failed: the agent did not start with it"
                )
                methods.filter(has_text="Password").get_by_test_id("login-button").click()
                expect(driver.locator("[data-what=authenticated]")).to_contain_text(
                    "The agent is logged in (password)."
                )
                driver.get_by_test_id("composer-input").fill("hi")
                driver.get_by_test_id("composer-input").press("Enter")
                expect(viewer.get_by_test_id("message").last).to_contain_text("echo: hi")
            finally:
                host.process.stop()
    finally:
        context.close()
