"""Files a tool call names, through the real stack: a viewer opens a location in the file panel
(line numbers, the line marked, text only), a location outside the workspace is refused in words
and the page goes on reading; diffs show hunks under a header per file, open on a desktop and
folded on a phone, and a snippet gets the current file's lines around it."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from .stack import scripted_stack
from .test_web_permission_merge import named, open_connected

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

AGENT = Path(__file__).with_name("edit_acp_agent.py")


def card(page: Page, tool_call_id: str) -> Locator:
    return page.locator(f"[data-testid=tool-call][data-tool-call-id={tool_call_id}]")


def test_locations_open_the_file_and_diffs_show_hunks(browser: Browser, tmp_path: Path) -> None:
    with scripted_stack(browser, tmp_path, AGENT) as (host, new_page):
        driver = new_page()
        open_connected(driver, named(host.drive_link, "alice"))
        driver.get_by_test_id("composer-input").fill("edit")
        driver.get_by_test_id("composer-input").press("Enter")
        expect(card(driver, "edit-2")).to_have_count(1, timeout=30_000)

        viewer = new_page()
        open_connected(viewer, named(host.view_link, "bob"))
        panel = viewer.get_by_test_id("file-panel")
        card(viewer, "read-1").get_by_test_id("file-link").click()
        expect(panel).to_have_attribute("data-state", "shown")
        expect(viewer.get_by_test_id("file-title")).to_have_text("src/app.py:120")
        target = viewer.get_by_test_id("file-target")
        expect(target).to_have_attribute("data-line", "120")
        expect(target.locator(".file-text")).to_have_text("line 120")
        expect(panel.locator(".file-line")).to_have_count(200)

        card(viewer, "read-2").get_by_test_id("file-link").click()
        expect(panel).to_have_attribute("data-state", "refused")
        expect(viewer.get_by_test_id("file-note")).to_contain_text("outside the workspace")
        expect(panel.locator(".file-line")).to_have_count(0)
        # The channel goes on: the next read is answered.
        card(viewer, "read-1").get_by_test_id("file-link").click()
        expect(panel).to_have_attribute("data-state", "shown")

        whole = card(viewer, "edit-2").get_by_test_id("diff")
        expect(whole.locator("figcaption")).to_contain_text("notes.txt")
        expect(whole.get_by_test_id("diff-stat")).to_have_text("+1 \u22121")
        expect(whole.get_by_test_id("diff-fold")).to_have_attribute("open", "")
        expect(whole.locator(".diff-del")).to_have_text(["- note 20"])
        expect(whole.locator(".diff-del")).to_have_attribute("data-old", "20")
        expect(whole.locator(".diff-ctx")).to_have_count(6)  # three lines each side
        expect(whole.locator(".diff-gap")).to_have_text(
            ["⋯ 16 unchanged lines", "⋯ 17 unchanged lines"]
        )
        whole.get_by_test_id("diff-toggle").click()
        expect(whole.get_by_test_id("diff-body")).to_be_hidden()

        snippet = card(viewer, "edit-1").get_by_test_id("diff")
        expect(snippet).to_have_attribute("data-context", "file")
        expect(snippet.locator(".diff-add")).to_have_attribute("data-new", "150")
        expect(snippet.locator(".diff-file").first).to_have_text("  line 145")
        expect(snippet.locator(".diff-file").last).to_have_text("  line 155")


def test_a_diff_starts_folded_on_a_phone(browser: Browser, tmp_path: Path) -> None:
    with scripted_stack(browser, tmp_path, AGENT) as (host, new_page):
        driver = new_page()
        driver.set_viewport_size({"width": 390, "height": 844})
        open_connected(driver, named(host.drive_link, "alice"))
        driver.get_by_test_id("composer-input").fill("edit")
        driver.get_by_test_id("composer-input").press("Enter")
        diff = card(driver, "edit-2").get_by_test_id("diff")
        toggle = diff.get_by_test_id("diff-toggle")
        expect(toggle).to_have_text("Show", timeout=30_000)
        expect(diff.get_by_test_id("diff-fold")).not_to_have_attribute("open", "")
        expect(diff.get_by_test_id("diff-body")).to_be_hidden()
        expect(diff.get_by_test_id("diff-stat")).to_have_text("+1 \u22121")
        toggle.click()
        expect(diff.get_by_test_id("diff-body")).to_be_visible()
        expect(diff.locator(".diff-add")).to_have_text(["+ note twenty"])
        # The file panel takes the whole screen there.
        card(driver, "read-1").get_by_test_id("file-link").click()
        expect(driver.get_by_test_id("file-target")).to_be_visible()
        box = driver.get_by_test_id("file-panel").bounding_box()
        assert box is not None
        assert box["width"] == 390
