"""The page's link frames: what it encodes, Python decodes; what it decodes, it checks."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from playwright.sync_api import Page

from tunnel.proto import Close, Data, Hello, Open, ProtocolError, Window, decode_frame, encode_frame
from tunnel.proto.frames import MAX_CLOSE_CODE
from tunnel.proto.limits import MAX_WINDOW

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
  const wire = await import("/static/wire.js");
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
      if (!wire.KINDS.includes(frame.k)) counts.other.push("unchecked kind");
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


# Runs in the page: "ok" or "refused:<code>" for each frame, as the page's decoder sees it.
VERDICTS = """
async (frames) => {
  const f = await import("/static/frames.js");
  const bytes = (h) => Uint8Array.from(h.match(/../g) ?? [], (x) => parseInt(x, 16));
  return frames.map((h) => {
    try {
      f.decodeFrame(bytes(h));
      return "ok";
    } catch (error) {
      return error instanceof f.ProtocolError ? `refused:${error.code}` : `other:${error}`;
    }
  });
}
"""


def python_verdict(frame: bytes) -> str:
    try:
        decode_frame(frame)
    except ProtocolError as error:
        return f"refused:{int(error.code)}"
    return "ok"


def raw_frame(c: object, k: str, p: object, *, single_float: bool = False) -> bytes:
    # Built by hand: encode_frame refuses the malformed frames this test is about.
    packed: bytes = msgpack.packb(
        {"c": c, "k": k, "p": p}, use_bin_type=True, use_single_float=single_float
    )
    return packed


WINDOW_GRANTS: dict[str, bytes] = {
    "n=0": raw_frame(1, "window", {"n": 0}),
    "n=1": raw_frame(1, "window", {"n": 1}),
    "n=-1": raw_frame(1, "window", {"n": -1}),
    "n=2**32-1": raw_frame(1, "window", {"n": MAX_WINDOW}),
    "n=2**32": raw_frame(1, "window", {"n": MAX_WINDOW + 1}),
    "n=2**64-1": raw_frame(1, "window", {"n": 2**64 - 1}),
    "n=-2**63": raw_frame(1, "window", {"n": -(2**63)}),
    "n=4096.0": raw_frame(1, "window", {"n": 4096.0}),
    "n=4096.0 (float32)": raw_frame(1, "window", {"n": 4096.0}, single_float=True),
    "n=true": raw_frame(1, "window", {"n": True}),
    "n=nil": raw_frame(1, "window", {"n": None}),
    "n='1'": raw_frame(1, "window", {"n": "1"}),
    "no n": raw_frame(1, "window", {}),
    "n and more": raw_frame(1, "window", {"n": 1, "x": 1}),
    "channel 1.0": raw_frame(1.0, "window", {"n": 1}),
}

CLOSE_CODES: dict[str, bytes] = {
    "code=999": raw_frame(1, "close", {"code": 999, "reason": ""}),
    "code=1000": raw_frame(1, "close", {"code": 1000, "reason": ""}),
    "code=1001": raw_frame(1, "close", {"code": 1001, "reason": "bye"}),
    "code=4000": raw_frame(1, "close", {"code": 4000, "reason": ""}),
    "code=4999": raw_frame(1, "close", {"code": MAX_CLOSE_CODE, "reason": ""}),
    "code=5000": raw_frame(1, "close", {"code": MAX_CLOSE_CODE + 1, "reason": ""}),
    "code=0": raw_frame(1, "close", {"code": 0, "reason": ""}),
    "code=-4000": raw_frame(1, "close", {"code": -4000, "reason": ""}),
    "code=65535": raw_frame(1, "close", {"code": 65535, "reason": ""}),
    "code=2**32+4000": raw_frame(1, "close", {"code": 2**32 + 4000, "reason": ""}),
    "code=4000.0": raw_frame(1, "close", {"code": 4000.0, "reason": ""}),
    "code=4000.0 (float32)": raw_frame(
        1, "close", {"code": 4000.0, "reason": ""}, single_float=True
    ),
    "code=true": raw_frame(1, "close", {"code": True, "reason": ""}),
    "code='4000'": raw_frame(1, "close", {"code": "4000", "reason": ""}),
    "reason nil": raw_frame(1, "close", {"code": 4000, "reason": None}),
    "no reason": raw_frame(1, "close", {"code": 4000}),
    "code, reason and more": raw_frame(1, "close", {"code": 4000, "reason": "", "x": 1}),
    "channel 3.0": raw_frame(3.0, "close", {"code": 4000, "reason": ""}),
}


@pytest.mark.parametrize(
    "cases", [WINDOW_GRANTS, CLOSE_CODES], ids=["window-grants", "close-codes"]
)
def test_window_and_close_frames_are_refused_exactly_where_python_refuses_them(
    page: Page, static_server: str, cases: dict[str, bytes]
) -> None:
    page.goto(static_server + BLANK_PATH)
    got = dict(zip(cases, page.evaluate(VERDICTS, [f.hex() for f in cases.values()]), strict=True))
    expected = {name: python_verdict(frame) for name, frame in cases.items()}
    assert got == expected
    # The drifts this guards against: a grant of nothing, codes outside 1000..4999, floats.
    if cases is WINDOW_GRANTS:
        assert got["n=0"] == got["n=4096.0"] == "refused:4000"
        assert got["n=1"] == got["n=2**32-1"] == "ok"
    else:
        assert got["code=999"] == got["code=5000"] == got["code=4000.0"] == "refused:4000"
        assert got["code=1000"] == got["code=4999"] == "ok"
