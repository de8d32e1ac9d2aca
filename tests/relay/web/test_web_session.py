"""The page's session (session.js) ends and retries as Python decides: FINAL_CODES and Backoff.

The session runs in chromium with a scripted link and view, and with setTimeout and Math.random
replaced, so every ending and every delay is observed exactly.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from playwright.sync_api import Page

from tunnel.process.backoff import (
    BACKOFF_FACTOR,
    BACKOFF_INITIAL,
    JITTER,
    TEAMMATE_MAX_BACKOFF,
    Backoff,
)
from tunnel.proto.codes import FINAL_CODES, CloseCode
from tunnel.proto.frames import MAX_CLOSE_CODE

from .conftest import BLANK_PATH

pytestmark = [pytest.mark.browser, pytest.mark.timeout(60)]

# Runs in the page: for each code, a session whose first link ends with it. Retry timers are
# recorded instead of waited for, and the first one is fired by hand.
ENDINGS = """
async (codes) => {
  const s = await import("/static/session.js");
  const v = await import("/static/view.js");
  const realSetTimeout = window.setTimeout;
  const timers = [];
  window.setTimeout = (callback, ms) => timers.push({ callback, ms });
  const out = [];
  try {
    for (const code of codes) {
      timers.length = 0;
      const calls = [];
      const view = new Proxy({}, { get: (_, method) => (...args) => calls.push([method, args]) });
      let links = 0;
      const linkFactory = (options) => {
        links += 1;
        const first = links === 1;
        return {
          ended: false,
          start: async () => { if (first) options.onEnd({ code, reason: "scripted" }); },
          close() {},
          send() { return true; },
        };
      };
      const session = new s.Session({ location, hostId: "a".repeat(26), role: "view",
        secret: new Uint8Array(32), name: "t", view, linkFactory });
      session.start();
      const screens = calls.filter(([m]) => m === "finalScreen").map(([, args]) => args[0]);
      const states = calls.filter(([m]) => m === "connection").map(([, args]) => args[0]);
      const retries = timers.length;
      if (retries) timers[0].callback();
      out.push({ code, screens, states, retries, stopped: session.stopped, links });
    }
  } finally {
    window.setTimeout = realSetTimeout;
  }
  return { out, screens: Object.keys(v.SCREENS), finalScreens: [...s.FINAL_SCREENS] };
}
"""

# Runs in the page: the delays a session waits after `randoms.length` failed attempts in a row,
# with Math.random returning `randoms`, and backoffDelay itself for each (attempt, random).
DELAYS = """
async (randoms) => {
  const s = await import("/static/session.js");
  const realRandom = Math.random;
  const realSetTimeout = window.setTimeout;
  const next = [...randoms];
  Math.random = () => next.shift();
  const waits = [];
  window.setTimeout = () => 0;
  try {
    const view = new Proxy({}, {
      get: (_, method) => (_state, detail) => {
        if (method === "connection" && detail?.retryInMs !== undefined) {
          waits.push(detail.retryInMs);
        }
      },
    });
    const linkFactory = () => ({ ended: false, start: async () => {}, close() {} });
    const session = new s.Session({ location, hostId: "a".repeat(26), role: "view",
      secret: new Uint8Array(32), name: "t", view, linkFactory });
    for (let i = 0; i < randoms.length; i++) session.onEnd({ code: 1006, reason: "" });
  } finally {
    Math.random = realRandom;
    window.setTimeout = realSetTimeout;
  }
  const exact = randoms.map((r, attempt) => s.backoffDelay(attempt, r));
  return { waits, exact };
}
"""


class Replay(random.Random):
    """A Random whose random() returns the given numbers in order."""

    def __init__(self, values: list[float]) -> None:
        super().__init__()
        self.values = list(values)

    def random(self) -> float:
        return self.values.pop(0)


def endings(page: Page, codes: list[int]) -> dict[str, Any]:
    result: dict[str, Any] = page.evaluate(ENDINGS, codes)
    return result


def test_the_page_stops_on_every_final_code_with_its_screen(page: Page, static_server: str) -> None:
    page.goto(static_server + BLANK_PATH)
    final = sorted(int(code) for code in FINAL_CODES)
    got = endings(page, final)
    screens = dict(got["finalScreens"])
    # Every final code has a screen of its own, and only final codes have one.
    assert sorted(screens) == final
    assert set(screens.values()) <= set(got["screens"])
    for ending in got["out"]:
        code = ending["code"]
        assert ending["screens"] == [screens[code]], code
        assert ending["states"] == ["connecting", "closed"], code
        assert ending["stopped"] is True, code
        assert ending["retries"] == 0, code
        assert ending["links"] == 1, code


def test_the_page_retries_on_every_other_code(page: Page, static_server: str) -> None:
    page.goto(static_server + BLANK_PATH)
    known = {int(code) for code in CloseCode}
    # Codes no member has: the first free one of ours, the last one, one of the WebSocket range.
    unknown = [min(set(range(4000, MAX_CLOSE_CODE + 1)) - known), MAX_CLOSE_CODE, 3000]
    others = [int(code) for code in CloseCode if code not in FINAL_CODES] + unknown
    got = endings(page, others)
    for ending in got["out"]:
        code = ending["code"]
        assert ending["screens"] == [], code
        retrying = "host-offline" if code == CloseCode.HOST_GONE else "reconnecting"
        assert ending["states"][:2] == ["connecting", retrying], code
        assert ending["stopped"] is False, code
        assert ending["retries"] == 1, code
        # The retry connected again.
        assert ending["links"] == 2, code


def test_backoff_delays_are_pythons_for_the_same_random_numbers(
    page: Page, static_server: str
) -> None:
    page.goto(static_server + BLANK_PATH)
    # Both ends of the jitter range, and a seeded run long enough to reach the cap.
    seeded = random.Random(20250101)
    randoms = [0.0, 0.999999, 0.5, 0.0, 0.999999] + [seeded.random() for _ in range(15)]
    got = page.evaluate(DELAYS, randoms)
    python = Backoff(maximum=TEAMMATE_MAX_BACKOFF, rng=Replay(randoms))
    expected_ms = [python.next_delay() * 1000 for _ in randoms]
    assert got["exact"] == pytest.approx(expected_ms, rel=1e-12)
    assert got["waits"] == [round(ms) for ms in got["exact"]]
    for attempt, wait in enumerate(got["waits"]):
        ceiling = min(TEAMMATE_MAX_BACKOFF, BACKOFF_INITIAL * BACKOFF_FACTOR**attempt) * 1000
        assert (1 - JITTER) * ceiling <= wait <= ceiling, attempt
    # The first try comes within BACKOFF_INITIAL, later ones never wait past the teammate cap.
    assert got["waits"][0] == round((1 - JITTER) * BACKOFF_INITIAL * 1000)
    assert max(got["waits"]) <= TEAMMATE_MAX_BACKOFF * 1000
    assert max(got["waits"]) > (1 - JITTER) * TEAMMATE_MAX_BACKOFF * 1000
