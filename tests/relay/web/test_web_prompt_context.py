"""What goes with a prompt from the page, against the real stack (`tunnel relay`, `tunnel host`
and tests/agents/fake_acp_agent.py, which says what it got): images pasted into the composer, one
as it is, one too large scaled down to a JPEG that fits, and everyone sees that the prompt had
them; `@path` completed from the host's workspace, the file then embedded."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tunnel.app.requests import MAX_PROMPT_IMAGE_BYTES

from .stack import scripted_stack
from .test_web_stack import FAKE_ACP_AGENT, connected, named, prompt

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

PASTE = """async ([side, noise]) => {
  const canvas = document.createElement("canvas");
  canvas.width = side;
  canvas.height = side;
  const context = canvas.getContext("2d");
  const pixels = context.createImageData(side, side);
  for (let i = 0; i < pixels.data.length; i += 1) {
    pixels.data[i] = noise ? Math.floor(Math.random() * 256) : (i % 4 === 3 ? 255 : 40);
  }
  context.putImageData(pixels, 0, 0);
  const blob = await new Promise((resolve) => canvas.toBlob(resolve, "image/png"));
  const data = new DataTransfer();
  data.items.add(new File([blob], "shot.png", { type: "image/png" }));
  const input = document.querySelector("[data-testid=composer-input]");
  const event = { clipboardData: data, bubbles: true, cancelable: true };
  input.dispatchEvent(new ClipboardEvent("paste", event));
}"""


def paste(page: Page, side: int, *, noise: bool = False) -> None:
    page.evaluate(PASTE, [side, noise])


def test_pasted_images_reach_the_agent_within_the_budget(browser: Browser, tmp_path: Path) -> None:
    with scripted_stack(browser, tmp_path, FAKE_ACP_AGENT) as (host, new_page):
        alice = new_page()
        alice.goto(named(host.drive_link, "alice"))
        connected(alice)
        paste(alice, 32)
        paste(alice, 900, noise=True)  # megabytes as a PNG
        expect(alice.get_by_test_id("prompt-image")).to_have_count(2)
        prompt(alice, "context look")
        expect(alice.get_by_test_id("prompt-image")).to_have_count(0)
        said = alice.locator("[data-testid=message][data-role=agent]")
        expect(said).to_contain_text("image image/png", timeout=30_000)
        text = said.inner_text()
        sizes = [int(n) for n in re.findall(r"image image/(?:png|jpeg) (\d+) bytes", text)]
        assert "image/jpeg" in text
        assert len(sizes) == 2
        assert sum(sizes) <= MAX_PROMPT_IMAGE_BYTES
        victor = new_page()
        victor.goto(named(host.view_link, "victor"))
        connected(victor)
        expect(victor.get_by_test_id("message-images")).to_contain_text("With 2 images: image/png")


def test_an_at_path_is_completed_from_the_workspace_and_its_file_goes_with_the_prompt(
    browser: Browser, tmp_path: Path
) -> None:
    with scripted_stack(browser, tmp_path, FAKE_ACP_AGENT) as (host, new_page):
        workspace = tmp_path / "host" / "workspace"
        (workspace / "docs").mkdir()
        (workspace / "docs" / "guide.md").write_text("# Guide\n")
        (workspace / ".secret").write_text("hidden\n")
        alice = new_page()
        alice.goto(named(host.drive_link, "alice"))
        connected(alice)
        box = alice.get_by_test_id("composer-input")
        box.press_sequentially("context @")
        options = alice.get_by_test_id("path-option")
        expect(options).to_have_count(2)  # the dot file only for a typed dot
        assert options.evaluate_all("os => os.map(o => o.dataset.path)") == [
            "README.md",
            "docs/",
        ]
        box.press_sequentially("d")
        expect(options).to_have_count(1)
        box.press("Tab")  # a directory: the list goes on inside it
        expect(options).to_have_text(["@docs/guide.md"])
        box.press("Enter")
        expect(box).to_have_value("context @docs/guide.md ")
        box.press("Enter")
        guide = (workspace / "docs" / "guide.md").resolve().as_uri()
        said = alice.locator("[data-testid=message][data-role=agent]")
        expect(said).to_have_text(re.compile(f"embedded {re.escape(guide)}: # Guide"))
        # Nothing outside the workspace is listed.
        box.press_sequentially("@../")
        alice.wait_for_timeout(500)
        expect(options).to_have_count(0)
