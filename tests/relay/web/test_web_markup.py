"""Markup from the network never reaches the page's own classes, ids or layout.

The hostile markdown is built from the class names and ids the page really uses (every class and
id its stylesheets select, and every one on its live DOM), so a new class in app.css is covered
the day it is added. It goes through the real stack as a driver's prompt and comes back in the
agent's reply, to the page that sent it, a teammate watching live and one that joins later.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from .fake_relay import Scenario, fake_relay, wire_item
from .stack import Host, scripted_stack

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

MARKUP_AGENT = Path(__file__).resolve().parent / "markup_acp_agent.py"

# Every class and id the page's stylesheets select (media rules included) and every one on its
# live DOM: the names a piece of markup would borrow to dress up as the page.
PAGE_NAMES = """() => {
  const classes = new Set();
  const ids = new Set();
  const walk = (rules) => {
    for (const rule of rules) {
      const selector = rule.selectorText ?? "";
      for (const m of selector.matchAll(/\\.(-?[_a-zA-Z][\\w-]*)/g)) classes.add(m[1]);
      for (const m of selector.matchAll(/#(-?[_a-zA-Z][\\w-]*)/g)) ids.add(m[1]);
      if (rule.cssRules) walk(rule.cssRules);
    }
  };
  for (const sheet of document.styleSheets) walk(sheet.cssRules);
  for (const e of document.querySelectorAll("[class]")) for (const c of e.classList) classes.add(c);
  for (const e of document.querySelectorAll("[id]")) ids.add(e.id);
  return { classes: [...classes].sort(), ids: [...ids].sort() };
}"""

# What the markdown blocks of the page hold: the attributes of every element inside them, which
# of the page's classes and ids they carry, and any that leaves the flow.
MARKDOWN_STATE = """({ classes, ids }) => {
  const pageClasses = new Set(classes);
  const pageIds = new Set(ids);
  const blocks = [...document.querySelectorAll(
    "[data-testid=message] > .md, [data-testid=stream] > .md, [data-testid=reasoning] > .md")];
  const inside = blocks.flatMap((block) => [...block.querySelectorAll("*")]);
  return {
    blocks: blocks.length,
    elements: inside.length,
    attributes: [...new Set(inside.flatMap((e) => [...e.attributes].map((a) => a.name)))].sort(),
    borrowed: inside.flatMap((e) => [
      ...[...e.classList].filter((c) => pageClasses.has(c)).map((c) => `.${c}`),
      ...(pageIds.has(e.id) ? [`#${e.id}`] : []),
    ]),
    outOfFlow: inside.filter((e) => getComputedStyle(e).position !== "static")
      .map((e) => e.tagName),
    idsTaken: ids.filter((id) => blocks.some((b) => b.contains(document.getElementById(id)))),
    screens: document.querySelectorAll(".screen").length,
  };
}"""

# Points all over the viewport, and the centre of each of the page's own controls given by test
# id: a hit inside a markdown block must lie within that block's own box, and a control must be
# what is under its own centre.
NOTHING_COVERS = """(testids) => {
  const blocks = [...document.querySelectorAll(
    "[data-testid=message] > .md, [data-testid=stream] > .md, [data-testid=reasoning] > .md")];
  const problems = [];
  const width = document.documentElement.clientWidth;
  const height = document.documentElement.clientHeight;
  for (let i = 0; i < 7; i++) {
    for (let j = 0; j < 7; j++) {
      const x = Math.round((width - 1) * i / 6);
      const y = Math.round((height - 1) * j / 6);
      const hit = document.elementFromPoint(x, y);
      const block = blocks.find((b) => b.contains(hit));
      if (!block) continue;
      const r = block.getBoundingClientRect();
      if (x < r.left - 1 || x > r.right + 1 || y < r.top - 1 || y > r.bottom + 1) {
        problems.push(`markdown at ${x},${y}: ${hit.tagName}`);
      }
    }
  }
  for (const testid of testids) {
    const own = document.querySelector(`[data-testid="${testid}"]`);
    if (!own) { problems.push(`no ${testid}`); continue; }
    const r = own.getBoundingClientRect();
    const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    if (!own.contains(hit)) problems.push(`${testid} is under ${hit?.tagName}.${hit?.className}`);
  }
  return problems;
}"""

# The attributes markdown.js lets through, and the two it sets on every link.
ALLOWED_ATTRIBUTES = {"href", "title", "src", "alt", "start", "align", "target", "rel"}
HEADER_CONTROLS = ["connection-status", "role-badge", "name-input"]
DRIVER_CONTROLS = [*HEADER_CONTROLS, "composer-input", "send-button"]

BENIGN = "\n".join(
    [
        "**bold words** and `inline code` and [the docs](https://example.com/docs)",
        "",
        "```python",
        "print('fenced')",
        "```",
        "",
    ]
)


def hostile_markdown(classes: list[str], ids: list[str]) -> str:
    """Markdown that borrows every one of the page's classes and ids, after some benign markdown."""
    parts = [
        BENIGN,
        # The page's own full-window modal, built as view.js builds it.
        '<div class="screen blocking" role="alert" id="app"><div class="screen-card">'
        "<h1>Session expired</h1><p>Every click lands here.</p></div></div>",
        "",
        '<div class="drawer-open"><div class="backdrop">shade</div>'
        '<aside class="side" id="side-panel">a fake side panel</aside></div>',
        "",
        f'<div class="{" ".join(classes)}">every class at once</div>',
        "",
        " ".join(f'<span class="{name}">{name}</span>' for name in classes),
        "",
        " ".join(f'<span id="{name}" name="{name}">#{name}</span>' for name in ids),
        "",
        '<img name="getElementById" src="x" alt="clobber"> <a name="cookie" id="location">a</a>',
        "",
        '<div style="position:fixed;inset:0;z-index:99">veil</div>',
        "",
        '<dialog open>a dialog</dialog> <div popover="manual">a popover</div>',
        "",
        '<div data-testid="composer-input" role="dialog" aria-modal="true" tabindex="0">'
        "fake composer</div>",
        "",
        '<form id="f" action="/x"><input name="attributes" form="f"><button>go</button></form>',
        "",
    ]
    return "\n".join(parts)


def page_names(page: Page) -> dict[str, list[str]]:
    names: dict[str, list[str]] = page.evaluate(PAGE_NAMES)
    # The collection is what the test stands on: make sure it found the page's real names.
    assert {"screen", "blocking", "screen-card", "md", "item", "backdrop"} <= set(names["classes"])
    assert {"app", "side-panel"} <= set(names["ids"])
    return names


def named(link: str, name: str) -> str:
    base, fragment = link.split("#", 1)
    return f"{base}?name={name}#{fragment}"


def open_connected(page: Page, link: str) -> None:
    page.goto(link)
    expect(page.get_by_test_id("connection-status")).to_have_attribute(
        "data-state", "connected", timeout=30_000
    )
    expect(page.get_by_test_id("conversation")).to_have_attribute("data-loaded", "true")


def assert_inert(page: Page, names: dict[str, list[str]], controls: list[str]) -> None:
    state: dict[str, Any] = page.evaluate(MARKDOWN_STATE, names)
    assert state["blocks"] >= 2
    assert state["elements"] > 0
    assert state["screens"] == 0
    assert page.evaluate(NOTHING_COVERS, controls) == []
    assert state["borrowed"] == []
    assert state["idsTaken"] == []
    assert state["outOfFlow"] == []
    assert set(state["attributes"]) <= ALLOWED_ATTRIBUTES, state["attributes"]


def assert_benign_renders(message: Locator) -> None:
    expect(message.locator("strong", has_text="bold words")).to_have_count(1)
    expect(message.locator("code", has_text="inline code")).to_have_count(1)
    expect(message.locator("pre > code")).to_contain_text("print('fenced')")
    link = message.locator("a[href='https://example.com/docs']")
    expect(link).to_have_text("the docs")
    expect(link).to_have_attribute("target", "_blank")
    expect(link).to_have_attribute("rel", "noopener noreferrer nofollow")


def assert_composer_works(page: Page, text: str) -> None:
    """A real click reaches the composer (Playwright checks what is under the pointer), and what
    is typed there goes out as a prompt."""
    box = page.get_by_test_id("composer-input")
    box.click(timeout=5_000)
    expect(box).to_be_focused()
    page.keyboard.type(text)
    page.get_by_test_id("send-button").click(timeout=5_000)
    mine = page.locator("[data-testid=message][data-role=user]", has_text=text)
    expect(mine).to_have_count(1, timeout=30_000)


def test_markdown_with_the_pages_own_classes_and_ids_renders_inert_live_and_for_a_joiner(
    browser: Browser, tmp_path: Path
) -> None:
    with scripted_stack(browser, tmp_path, MARKUP_AGENT) as (host, new_page):
        check_live_and_joiner(host, new_page)


def check_live_and_joiner(host: Host, new_page: Callable[[], Page]) -> None:
    driver = new_page()
    open_connected(driver, named(host.drive_link, "alice"))
    watcher = new_page()
    open_connected(watcher, named(host.view_link, "bob"))
    names = page_names(driver)

    box = driver.get_by_test_id("composer-input")
    box.fill(hostile_markdown(names["classes"], names["ids"]))
    box.press("Enter")
    expect(box).to_have_value("")

    # The prompt shows as the driver's message, and the agent's reply repeats it whole.
    replies: list[Locator] = []
    for page in (driver, watcher):
        reply = page.locator("[data-testid=message][data-role=agent]", has_text="END")
        expect(reply).to_have_count(1, timeout=30_000)
        replies.append(reply)
    joiner = new_page()
    open_connected(joiner, named(host.drive_link, "carol"))
    replies.append(joiner.locator("[data-testid=message][data-role=agent]", has_text="END"))

    for page, reply, controls in zip(
        (driver, watcher, joiner),
        replies,
        (DRIVER_CONTROLS, HEADER_CONTROLS, DRIVER_CONTROLS),
        strict=True,
    ):
        prompt = page.locator("[data-testid=message][data-role=user]", has_text="every class")
        expect(prompt).to_have_count(1)
        expect(reply).to_contain_text("every class at once")
        assert_benign_renders(prompt)
        assert_benign_renders(reply)
        assert_inert(page, names, controls)
    assert_composer_works(driver, "alice is not blocked")
    assert_composer_works(joiner, "carol is not blocked")


def test_a_status_or_kind_with_spaces_adds_none_of_the_pages_classes(page: Page) -> None:
    smuggled = " screen blocking"
    items = [
        wire_item(
            0,
            "tool_call",
            {"tool_call_id": "t1", "title": "Edit", "kind": "edit", "status": "x" + smuggled},
        ),
        wire_item(1, "plan", {"entries": [{"content": "Read", "status": "done" + smuggled}]}),
        wire_item(
            2,
            "permission_request",
            {
                "request_id": "p1",
                "title": "Run it?",
                "tool_call_id": None,
                "options": [{"option_id": "ok", "name": "Allow", "kind": "allow_once" + smuggled}],
            },
            status="action_required",
        ),
        wire_item(3, "reasoning", {"text": '<div class="screen blocking">thinking</div>'}),
        wire_item(
            4, "message", {"role": "agent", "text": BENIGN + '<div class="screen blocking">x</div>'}
        ),
    ]
    with fake_relay(Scenario(items=items)) as relay:
        open_connected(page, named(relay.page_url("drive"), "alice"))
        names = page_names(page)
        expect(page.get_by_test_id("permission-option")).to_have_text("Allow")
        expect(page.get_by_test_id("plan").first).to_contain_text("Read")
        # The values still reach the page as data, where no stylesheet of the page looks.
        expect(page.get_by_test_id("tool-call")).to_have_attribute("data-status", "x" + smuggled)
        assert page.locator(".screen, .blocking").count() == 0
        assert page.evaluate(NOTHING_COVERS, DRIVER_CONTROLS) == []
        assert_inert(page, names, DRIVER_CONTROLS)
        box = page.get_by_test_id("composer-input")
        box.click(timeout=5_000)
        expect(box).to_be_focused()
