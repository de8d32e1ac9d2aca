"""timeline.js in chromium, without a host: a live page's view is left alone, a replay's items
are held and shown as the position says, play waits each recorded pause compressed and divided
by the speed, and the jump marks are the prompts and the decisions (docs/web.md, "Replays")."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page

from .conftest import BLANK_PATH

pytestmark = [pytest.mark.browser, pytest.mark.timeout(60)]

SCRIPT = """
async () => {
  const t = await import("/static/timeline.js");
  const at = (s) => new Date(Date.UTC(2026, 0, 5, 9, 0, s)).toISOString();
  const items = [
    { seq: 0, type: "message", created_by: "ann", created_at: at(0),
      data: { role: "user", text: "first\\nsecond line" } },
    { seq: 1, type: "message", created_by: "agent", created_at: at(1),
      data: { role: "agent", text: "answer" } },
    { seq: 2, type: "permission_decision", created_by: "bo", created_at: at(50),
      data: { outcome: "selected", option_name: "Allow once" } },
    { seq: 3, type: "permission_decision", created_by: "host", created_at: "not a time",
      data: { outcome: "cancelled" } },
    { seq: 4, type: "message", created_by: 7, created_at: at(51),
      data: { role: "user", text: { not: "text" } } },
  ];
  const calls = [];
  const makeView = () => {
    const root = document.createElement("div");
    const footer = document.createElement("footer");
    return {
      root, footer, shown: [],
      ready(info) { calls.push(["ready", info.conversation_id]); },
      item(item) { this.shown.push(item.seq); },
      replayItems(list) { this.shown = list.map((i) => i.seq); },
      snapshotDone() { calls.push(["snapshotDone"]); },
      resetConversation() { this.shown = []; },
      jumpToEnd() {},
    };
  };
  // A live page: every call reaches the view, nothing is built.
  const live = new t.Timeline();
  const liveView = makeView();
  const watchedLive = live.watch(liveView);
  watchedLive.ready({ conversation_id: "main" });
  watchedLive.item(items[0]);
  watchedLive.snapshotDone();
  const liveResult = { shown: liveView.shown, footer: liveView.footer.children.length,
    replay: live.replay };

  // A replay, with timers the test runs by hand.
  const timers = [];
  const setTimer = (f, ms) => { timers.push([f, ms]); return timers.length; };
  const replay = new t.Timeline({ setTimer, clearTimer: () => {} });
  const view = makeView();
  const watched = replay.watch(view);
  watched.ready({ conversation_id: "main", replay: { conversation: "main", upto: 4 } });
  for (const item of items) watched.item(item);
  const beforeDone = [...view.shown];
  watched.snapshotDone();
  const afterDone = [...view.shown];
  replay.jumpTo(1);
  const afterJump = [...view.shown];
  replay.setSpeed(16);
  replay.play();
  const waits = [];
  while (timers.length > 0 && waits.length < 10) {
    const [f, ms] = timers.shift();
    waits.push(ms);
    f();
  }
  return {
    gaps: t.gaps(items), marks: t.marks(items), speeds: t.SPEEDS, max: t.MAX_GAP_MS,
    min: t.MIN_GAP_MS, live: liveResult, beforeDone, afterDone, afterJump, waits,
    afterPlay: view.shown, playing: replay.playing,
    built: view.footer.querySelector('[data-testid="timeline"]') !== null,
    markButtons: [...view.footer.querySelectorAll('[data-testid="timeline-mark"]')]
      .map((b) => b.dataset.kind),
    replayMark: view.root.dataset.replay,
  };
}
"""


def _run(page: Page, static_server: str) -> dict[str, Any]:
    page.goto(static_server + BLANK_PATH)
    result: dict[str, Any] = page.evaluate(SCRIPT)
    return result


def test_the_timeline_holds_a_replays_items_and_plays_them_compressed(
    page: Page, static_server: str
) -> None:
    result = _run(page, static_server)
    assert result["speeds"] == [1, 2, 4, 8, 16]
    # Pauses: the first item and a bad time at least the minimum, a long pause cut to the most.
    assert result["gaps"] == [
        result["min"],
        1000,
        result["max"],
        result["min"],
        1000,
    ]
    assert [(m["seq"], m["kind"], m["label"]) for m in result["marks"]] == [
        (0, "prompt", "ann: first"),
        (2, "decision", "bo: Allow once"),
        (3, "decision", "host: cancelled"),
        (4, "prompt", "someone: "),
    ]
    # A live page is left alone.
    assert result["live"] == {"shown": [0], "footer": 0, "replay": None}
    # A replay: nothing shown while the snapshot comes, everything once it is in.
    assert result["built"]
    assert result["replayMark"] == "true"
    assert result["markButtons"] == ["prompt", "decision", "decision", "prompt"]
    assert result["beforeDone"] == []
    assert result["afterDone"] == [0, 1, 2, 3, 4]
    assert result["afterJump"] == [0, 1]
    # Play at 16x from there: each remaining item after its pause divided by 16, then it stops.
    assert result["waits"] == [result["max"] / 16, result["min"] / 16, 1000 / 16]
    assert result["afterPlay"] == [0, 1, 2, 3, 4]
    assert result["playing"] is False


LONG = """
async (count) => {
  const t = await import("/static/timeline.js");
  const root = document.createElement("div");
  const footer = document.createElement("footer");
  const view = { root, footer, shown: 0, rebuilds: 0, ready() {}, snapshotDone() {},
    item() { this.shown += 1; },
    replayItems(list) { this.shown = list.length; this.rebuilds += 1; },
    resetConversation() {}, jumpToEnd() {} };
  const timeline = new t.Timeline();
  const watched = timeline.watch(view);
  watched.ready({ conversation_id: "main", replay: { conversation: "main", upto: count - 1 } });
  const by = '<img src=x onerror="window.__owned=1">';
  const prompt = (seq) => ({ seq, type: "message", created_by: by,
    created_at: "2026-01-05T09:00:00Z", data: { role: "user", text: `prompt ${seq}` } });
  for (let seq = 0; seq < count; seq += 1) watched.item(prompt(seq));
  watched.item(prompt(count - 1));
  watched.snapshotDone();
  const buttons = [...footer.querySelectorAll('[data-testid="timeline-mark"]')];
  const shown = view.shown;
  // Back to the start rebuilds the view; forward again only adds the items passed.
  timeline.seek(0);
  const rebuilds = view.rebuilds;
  timeline.seek(count);
  const forward = { shown: view.shown, rebuilds: view.rebuilds - rebuilds };
  timeline.seek(count / 2);
  const back = { shown: view.shown, rebuilds: view.rebuilds - rebuilds };
  return { most: t.MAX_MARKS, held: timeline.items.length, shown, forward, back,
    marks: buttons.length, first: buttons[0]?.dataset.seq, label: buttons[0]?.textContent,
    images: footer.querySelectorAll("img").length,
    spread: buttons.length > 1 ? Number(buttons.at(-1).dataset.seq) : null };
}
"""


def test_a_long_replay_is_held_once_and_offers_a_bounded_number_of_jumps(
    page: Page, static_server: str
) -> None:
    page.goto(static_server + BLANK_PATH)
    count = 20_000
    result = page.evaluate(LONG, count)
    # Every item once (one given twice is held once), all of them shown to start with.
    assert result["held"] == count
    assert result["shown"] == count
    # Not a button per prompt: at most MAX_MARKS, from the first to near the end.
    assert 0 < result["marks"] <= result["most"]
    assert result["first"] == "0"
    # What the host's items say is text: a name with markup stays a name.
    assert result["label"] == '<img src=x onerror="window.__owned=1">: prompt 0'
    assert result["images"] == 0
    assert result["spread"] >= count - count // result["most"] - 1
    # The slider forward shows the items passed, without rebuilding the view from the first
    # (which, for a long replay, takes seconds); back, the view is rebuilt.
    assert result["forward"] == {"shown": count, "rebuilds": 0}
    assert result["back"] == {"shown": count // 2, "rebuilds": 1}
