"""A replay link in the page, against the real stack: `tunnel relay` and `tunnel host` as
subprocesses, the link minted with /share-replay at the host console. The page shows the
timeline and no prompt box; a jump shows the conversation up to a prompt; play at 16x reveals
every item again (docs/web.md, "Replays")."""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from playwright.sync_api import Page, expect

from tests.host.host_process import HostProcess
from tunnel.log import NewItem

from .stack import Relay, _append, running_relay
from .test_web_stack import named, seqs

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

REPLAY_LINE = re.compile(r"replay link (\S+) \((\S+) up to item (\d+)\): (\S+)")
# Every error the page is told, as it shows it: a replay channel answers anything but a read
# with `forbidden`, so a page that sends nothing else is never told one.
TOASTS = """
window.__toasts = [];
new MutationObserver(() => {
  const toast = document.querySelector("[data-testid=op-error]");
  if (toast && !toast.hidden && !window.__toasts.includes(toast.textContent)) {
    window.__toasts.push(toast.textContent);
  }
}).observe(document, { subtree: true, childList: true, attributes: true, characterData: true });
"""


def _recorded() -> list[NewItem]:
    """Two prompts a minute apart, each answered, the second through a permission decision."""
    start = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

    def at(seconds: float) -> datetime:
        return start + timedelta(seconds=seconds)

    def said(who: str, role: str, text: str, when: float) -> NewItem:
        data = {"role": role, "text": text}
        return NewItem(type="message", data=data, created_by=who, created_at=at(when))

    request = {
        "request_id": "perm-1",
        "title": "Allow reading README.md?",
        "tool_call_id": None,
        "options": [
            {"option_id": "allow_once", "name": "Allow once", "kind": "allow_once"},
            {"option_id": "reject_once", "name": "Reject", "kind": "reject_once"},
        ],
    }
    decision = {
        "request_id": "perm-1",
        "outcome": "selected",
        "option_id": "allow_once",
        "option_name": "Allow once",
        "option_kind": "allow_once",
    }
    return [
        said("ann", "user", "first prompt of the replay", 0),
        said("agent", "agent", "first answer", 2),
        said("bo", "user", "second prompt of the replay", 60),
        NewItem(
            type="permission_request",
            data=request,
            created_by="agent",
            status="action_required",
            created_at=at(61),
        ),
        NewItem(
            type="permission_decision",
            data=decision,
            created_by="bo",
            status="completed",
            created_at=at(75),
        ),
        said("agent", "agent", "second answer", 76),
    ]


@pytest.fixture
def replay_link(tmp_path: Path) -> Iterator[str]:
    """A host whose conversation holds `_recorded()`, and a replay link of it as it stands."""
    with running_relay(tmp_path / "relay") as relay:
        yield from _replay_link(tmp_path / "host", relay)


def _replay_link(home: Path, relay: Relay) -> Iterator[str]:
    workspace = home / "workspace"
    workspace.mkdir(parents=True)
    db = home / "log.sqlite3"
    # In a thread of its own: playwright runs an event loop in the test's thread.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(anyio.run, _append, db, _recorded()).result()
    host = HostProcess(relay.url, home, agent="demo", workspace=workspace, log_db=db)
    host.start()
    try:
        host.type("/share-replay")
        match = REPLAY_LINE.search(host.wait_output(REPLAY_LINE.pattern).group(0))
        assert match is not None
        yield match.group(4)
    finally:
        host.stop()


def test_the_page_replays_a_conversation_on_its_timeline(page: Page, replay_link: str) -> None:
    page.add_init_script(TOASTS)
    page.goto(named(replay_link, "rita"))
    expect(page.get_by_test_id("connection-status")).to_have_attribute(
        "data-state", "connected", timeout=30_000
    )
    timeline = page.get_by_test_id("timeline")
    expect(timeline).to_be_visible()
    # A replay only reads: no prompt box, and the notice says what it is.
    expect(page.get_by_test_id("composer-input")).to_have_count(0)
    expect(page.get_by_test_id("viewer-notice")).to_contain_text("replay")
    total = int(timeline.get_attribute("data-total") or "0")
    assert total >= 6
    # It opens on the whole conversation, as it stood.
    expect(timeline).to_have_attribute("data-shown", str(total))
    expect(page.get_by_test_id("conversation")).to_contain_text("second answer")
    # Nothing to drive with: no fork from a message, no list to start or close one from.
    expect(page.get_by_test_id("fork-here")).to_have_count(0)
    expect(page.get_by_test_id("new-conversation")).to_have_count(0)
    expect(page.get_by_test_id("conversations-toggle")).to_be_hidden()
    everything = seqs(page)

    marks = page.get_by_test_id("timeline-mark")
    expect(marks).to_have_count(3)
    assert marks.evaluate_all("els => els.map(e => e.dataset.kind)") == [
        "prompt",
        "prompt",
        "decision",
    ]
    expect(marks.nth(2)).to_contain_text("bo: Allow once")

    # Jump to the second prompt: the conversation up to it, nothing after.
    marks.nth(1).click()
    expect(timeline).to_have_attribute("data-shown", "3")
    conversation = page.get_by_test_id("conversation")
    expect(conversation).to_contain_text("second prompt of the replay")
    expect(conversation).not_to_contain_text("second answer")
    assert seqs(page) == [seq for seq in everything if seq <= 2]

    # Play at 16x from there: every item again, in order, then it stops.
    page.get_by_test_id("timeline-speed").select_option("16")
    page.get_by_test_id("timeline-play").click()
    expect(timeline).to_have_attribute("data-playing", "true")
    expect(timeline).to_have_attribute("data-shown", str(total), timeout=20_000)
    expect(timeline).to_have_attribute("data-playing", "false")
    expect(conversation).to_contain_text("second answer")
    assert seqs(page) == everything

    # The slider goes anywhere: back to nothing at all.
    page.get_by_test_id("timeline-slider").fill("0")
    expect(timeline).to_have_attribute("data-shown", "0")
    assert seqs(page) == []
    # The page asked for nothing a replay channel refuses, from its start to now: playing,
    # jumping and seeking only show what it holds.
    assert page.evaluate("() => window.__toasts") == []
