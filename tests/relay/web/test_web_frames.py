"""The page's link frames: what it encodes, Python decodes; what it decodes, it checks."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page

from tunnel.proto import Close, Data, Hello, Open, Window, decode_frame, encode_frame

from .conftest import BLANK_PATH

pytestmark = [pytest.mark.browser, pytest.mark.timeout(90)]

ENCODE = """
async () => {
  const f = await import("/static/frames.js");
  const hex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return [
    f.encodeFrame({ k: "hello", p: { role: "teammate", version: 1, host_id: "h",
      token: new Uint8Array([1, 2, 3]), name: "alice" } }),
    f.encodeFrame({ c: 1, k: "open", p: { path: "session",
      meta: { role: "drive", salt: new Uint8Array(16), name: "alice" } } }),
    f.encodeFrame({ c: 1, k: "data", p: { d: new Uint8Array([0, 255, 7]) } }),
    f.encodeFrame({ c: 1, k: "window", p: { n: 131072 } }),
    f.encodeFrame({ c: 3, k: "close", p: { code: 4003, reason: "decryption failed" } }),
  ].map(hex);
}
"""

DECODE = """
async (frames) => {
  const f = await import("/static/frames.js");
  const bytes = (h) => Uint8Array.from(h.match(/../g), (x) => parseInt(x, 16));
  return frames.map((h) => {
    const frame = f.decodeFrame(bytes(h));
    if (frame.p.d) frame.p.d = Array.from(frame.p.d);
    return frame;
  });
}
"""

# Random bytes, and valid frames with bytes flipped, cut or appended: decodeFrame either returns
# a checked frame or throws ProtocolError, never anything else.
FUZZ = """
async ([seeds, rounds]) => {
  const f = await import("/static/frames.js");
  const bytes = (h) => Uint8Array.from(h.match(/../g), (x) => parseInt(x, 16));
  let state = 12345;
  const rand = (n) => {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    return state % n;
  };
  const inputs = [];
  for (let i = 0; i < rounds; i++) {
    const seed = bytes(seeds[rand(seeds.length)]);
    let input;
    switch (rand(4)) {
      case 0: input = crypto.getRandomValues(new Uint8Array(rand(64))); break;
      case 1: input = seed.slice(0, rand(seed.length + 1)); break;
      case 2: {
        input = seed.slice();
        for (let k = 0; k <= rand(4); k++) input[rand(input.length)] = rand(256);
        break;
      }
      default: {
        input = new Uint8Array(seed.length + 1 + rand(8));
        input.set(seed);
        break;
      }
    }
    inputs.push(input);
  }
  const counts = { ok: 0, protocol: 0, other: [] };
  for (const input of inputs) {
    try {
      const frame = f.decodeFrame(input);
      if (!f.KINDS.includes(frame.k)) counts.other.push("unchecked kind");
      counts.ok++;
    } catch (error) {
      if (error instanceof f.ProtocolError && Number.isInteger(error.code)) counts.protocol++;
      else counts.other.push(String(error));
    }
  }
  return counts;
}
"""


def python_frames() -> list[bytes]:
    return [
        encode_frame(Hello(payload={"role": "relay", "version": 1, "challenge": b"\x01" * 32})),
        encode_frame(Data(channel=1, data=b"\x00\xff")),
        encode_frame(Window(channel=1, n=4096)),
        encode_frame(Close(channel=1, code=4008, reason="revoked")),
        encode_frame(Open(channel=2, path="session", meta={"x": 1})),
    ]


def test_frames_from_the_page_decode_in_python(page: Page, static_server: str) -> None:
    page.goto(static_server + BLANK_PATH)
    frames = [decode_frame(bytes.fromhex(h)) for h in page.evaluate(ENCODE)]
    hello, opened, data, window, close = frames
    assert isinstance(hello, Hello)
    assert hello.payload["token"] == b"\x01\x02\x03"
    assert opened == Open(
        channel=1, path="session", meta={"role": "drive", "salt": bytes(16), "name": "alice"}
    )
    assert data == Data(channel=1, data=b"\x00\xff\x07")
    assert window == Window(channel=1, n=131072)
    assert close == Close(channel=3, code=4003, reason="decryption failed")


def test_frames_from_python_decode_in_the_page(page: Page, static_server: str) -> None:
    page.goto(static_server + BLANK_PATH)
    got: list[dict[str, Any]] = page.evaluate(DECODE, [f.hex() for f in python_frames()])
    assert [(f["c"], f["k"]) for f in got] == [
        (None, "hello"),
        (1, "data"),
        (1, "window"),
        (1, "close"),
        (2, "open"),
    ]
    assert got[1]["p"]["d"] == [0, 255]
    assert got[2]["p"]["n"] == 4096
    assert got[3]["p"] == {"code": 4008, "reason": "revoked"}


def test_decoding_junk_raises_only_protocol_errors(page: Page, static_server: str) -> None:
    page.goto(static_server + BLANK_PATH)
    seeds = [f.hex() for f in python_frames()]
    counts = page.evaluate(FUZZ, [seeds, 20_000])
    assert counts["other"] == []
    assert counts["protocol"] > 1000
    assert counts["ok"] + counts["protocol"] == 20_000
