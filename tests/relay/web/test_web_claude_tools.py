"""Tools reported as Claude Code's adapter reports them, on the page through the real stack: a
Read or Bash result wrapped in code fences shows its code as text, without the fences; and a
tool call a cancelled turn leaves open reads failed, as in attach (tests/terminal)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from .stack import running_host, running_relay
from .test_web_permission_merge import named, open_connected

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

AGENT = Path(__file__).resolve().parents[2] / "terminal" / "claude_tools_acp_agent.py"


def test_fenced_results_show_their_code_and_a_cancelled_turns_tool_reads_failed(
    browser: Browser, tmp_path: Path
) -> None:
    agent = "acp:" + shlex.join([sys.executable, str(AGENT)])
    context = browser.new_context(viewport={"width": 1200, "height": 860})
    try:
        with (
            running_relay(tmp_path / "relay") as relay,
            running_host(tmp_path / "host", relay.url, agent=agent) as host,
        ):
            page = context.new_page()
            page.set_default_timeout(15_000)
            open_connected(page, named(host.drive_link, "alice"))
            box = page.get_by_test_id("composer-input")
            box.fill("read")
            box.press("Enter")
            read = page.locator("[data-testid=tool-call][data-tool-call-id=read-1]")
            expect(read).to_have_attribute("data-status", "completed", timeout=30_000)
            expect(read.get_by_test_id("tool-result")).to_contain_text(
                "2      return '<b>[bold]x[/bold]</b>'"
            )
            bash = page.locator("[data-testid=tool-call][data-tool-call-id=bash-1]")
            expect(bash.get_by_test_id("tool-result").locator("pre")).to_have_text("$ echo hi\nhi")
            for card in (read, bash):
                expect(card).not_to_contain_text("```")
                expect(card.locator("b")).to_have_count(0)  # the code's markup stays text

            expect(page.get_by_test_id("cancel-button")).to_be_disabled(timeout=30_000)
            box.fill("wait quietly")
            box.press("Enter")
            waiting = page.locator("[data-testid=tool-call][data-tool-call-id=bash-2]")
            expect(waiting).to_have_attribute("data-status", "pending", timeout=30_000)
            page.get_by_test_id("cancel-button").click()
            expect(waiting).to_have_attribute("data-status", "failed", timeout=30_000)
    finally:
        context.close()
