"""The page's side of the host's broadcast (docs/protocol.md and docs/application.md, "Broadcast"
and "The broadcast"): frames.js decodes the new kinds as Python does, link.js hands casts to the
session in their place among the data and grants their window back, and session.js opens them,
skips what it holds, and resumes by cursor when the broadcast breaks. Casts are sealed and signed
by the Python reference (tunnel.e2e.broadcast); the link and session run in chromium with a
scripted WebSocket or link.
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from playwright.sync_api import Page

from tunnel.e2e.broadcast import BroadcastKey, CastSealer
from tunnel.e2e.identity import HostIdentity
from tunnel.e2e.opening import ANSWER_SIZE
from tunnel.proto import Cast, Cut, Join, Part, decode_frame, encode_frame
from tunnel.proto.frames import MAX_CHANNEL_ID
from tunnel.proto.limits import DEFAULT_LIMITS

from .conftest import BLANK_PATH, PageLog
from .test_web_frames import FUZZ, VERDICTS, python_verdict, raw_frame

pytestmark = [pytest.mark.browser, pytest.mark.timeout(90)]

# The host of tests/vectors/crypto.json, whose id the scripted session is attached to.
HOST = HostIdentity.from_seed(bytes(range(0x20, 0x40)))
_max_data = DEFAULT_LIMITS.max_data_size
assert _max_data is not None
MAX_DATA: int = _max_data

BROADCAST_FRAMES: dict[str, bytes] = {
    "cast c=nil": raw_frame(None, "cast", {"d": b"x"}),
    "cast c=1": raw_frame(1, "cast", {"d": b"x"}),
    "cast c=0": raw_frame(0, "cast", {"d": b"x"}),
    "cast c=2**32-1": raw_frame(MAX_CHANNEL_ID, "cast", {"d": b"x"}),
    "cast c=2**32": raw_frame(MAX_CHANNEL_ID + 1, "cast", {"d": b"x"}),
    "cast c=-1": raw_frame(-1, "cast", {"d": b"x"}),
    "cast c=1.0": raw_frame(1.0, "cast", {"d": b"x"}),
    "cast c=true": raw_frame(True, "cast", {"d": b"x"}),
    "cast c='1'": raw_frame("1", "cast", {"d": b"x"}),
    "cast d empty": raw_frame(1, "cast", {"d": b""}),
    "cast d str": raw_frame(1, "cast", {"d": "x"}),
    "cast d int": raw_frame(1, "cast", {"d": 1}),
    "cast no d": raw_frame(1, "cast", {}),
    "cast d and more": raw_frame(1, "cast", {"d": b"x", "e": 1}),
    "cast p nil": raw_frame(1, "cast", None),
    "cast d max_data_size": raw_frame(1, "cast", {"d": bytes(MAX_DATA)}),
    "cast d max_data_size+1": raw_frame(1, "cast", {"d": bytes(MAX_DATA + 1)}),
    "cast d max_data_size+1 c=1.0": raw_frame(1.0, "cast", {"d": bytes(MAX_DATA + 1)}),
    "join c=1": raw_frame(1, "join", {}),
    "join c=nil": raw_frame(None, "join", {}),
    "join c=1.0": raw_frame(1.0, "join", {}),
    "join p={x}": raw_frame(1, "join", {"x": 1}),
    "join p nil": raw_frame(1, "join", None),
    "part c=3": raw_frame(3, "part", {}),
    "part c=2**32": raw_frame(MAX_CHANNEL_ID + 1, "part", {}),
    "part p={d}": raw_frame(3, "part", {"d": b"x"}),
    "cut c=1": raw_frame(1, "cut", {}),
    "cut c=nil": raw_frame(None, "cut", {}),
    "cut c=-1": raw_frame(-1, "cut", {}),
    "cut p=[]": raw_frame(1, "cut", []),
    # data follows the same payload rules as cast (one helper in frames.js for both).
    "data d empty": raw_frame(1, "data", {"d": b""}),
    "data d and more": raw_frame(1, "data", {"d": b"x", "e": 1}),
    "data c=1.0": raw_frame(1.0, "data", {"d": b"x"}),
    "data c=nil": raw_frame(None, "data", {"d": b"x"}),
    "data d max_data_size+1": raw_frame(1, "data", {"d": bytes(MAX_DATA + 1)}),
}


def test_broadcast_frames_are_refused_exactly_where_python_refuses_them(
    page: Page, static_server: str
) -> None:
    page.goto(static_server + BLANK_PATH)
    frames = BROADCAST_FRAMES
    got = dict(
        zip(frames, page.evaluate(VERDICTS, [f.hex() for f in frames.values()]), strict=True)
    )
    expected = {name: python_verdict(frame) for name, frame in frames.items()}
    assert got == expected
    # The drifts this guards against: an empty cast, a nil id on join or cut, a float id.
    assert got["cast c=nil"] == got["cast c=1"] == got["join c=1"] == got["cut c=1"] == "ok"
    assert got["cast d empty"] == got["join c=nil"] == got["cut c=nil"] == "refused:4000"
    assert got["cast c=1.0"] == got["join c=1.0"] == "refused:4000"
    assert got["cast d max_data_size+1"] == "refused:4006"


def broadcast_seeds() -> list[str]:
    frames = [
        encode_frame(Cast(channel=None, data=b"\x01\x02")),
        encode_frame(Cast(channel=7, data=bytes(300))),
        encode_frame(Join(channel=3)),
        encode_frame(Part(channel=70000)),
        encode_frame(Cut(channel=1)),
    ]
    for frame in frames:
        decode_frame(frame)
    return [frame.hex() for frame in frames]


def test_decoding_broken_broadcast_frames_raises_only_protocol_errors(
    page: Page, static_server: str
) -> None:
    page.goto(static_server + BLANK_PATH)
    counts = page.evaluate(FUZZ, [broadcast_seeds(), 20_000])
    assert counts["other"] == []
    assert counts["protocol"] > 1000
    assert counts["ok"] + counts["protocol"] == 20_000


# Runs in the page: a SessionLink over a scripted WebSocket. The relay's hello sets the window;
# the host's signed answer (made here, with a host key of the page's own) opens the channel;
# then `frames` arrive all at once (data as {op, n} messages sealed with the channel's down key,
# casts and cuts as given). onCast takes its time, so a frame after a cast is handled before it
# only if the link does not wait.
LINK = """
async ([limits, frames]) => {
  const l = await import("/static/link.js");
  const f = await import("/static/frames.js");
  const c = await import("/static/crypto.js");
  const identity = await crypto.subtle.generateKey("Ed25519", false, ["sign", "verify"]);
  const hostPublicKey = new Uint8Array(await crypto.subtle.exportKey("raw", identity.publicKey));
  const hostId = await c.deriveHostId(hostPublicKey);
  const secret = new Uint8Array(32).fill(7);
  let socket = null;
  class FakeSocket {
    static CONNECTING = 0;
    static OPEN = 1;
    static CLOSING = 2;
    static CLOSED = 3;
    constructor() {
      socket = this;
      this.readyState = FakeSocket.OPEN;
      this.sent = [];
      this.closedWith = null;
    }
    send(bytes) { this.sent.push(f.decodeMsgpack(bytes)); }
    close(code) { this.closedWith = code; this.readyState = FakeSocket.CLOSED; }
  }
  const deliver = (frame) => socket.onmessage({ data: f.encodeFrame(frame).slice().buffer });
  const granted = () => socket.sent.filter((frame) => frame.k === "window")
    .reduce((total, frame) => total + frame.p.n, 0);
  const log = [];
  let ending = null;
  const realWebSocket = window.WebSocket;
  window.WebSocket = FakeSocket;
  try {
    const link = new l.SessionLink({
      url: "ws://relay.test/v1/attach", hostId, role: "view", secret, name: "t",
      onMessage: (message) => { log.push(["message", message.n]); },
      onCast: async (cast) => {
        const entry = ["cast", cast.length, granted()];
        await new Promise((resolve) => setTimeout(resolve, 20));
        log.push(entry);
      },
      onCut: () => { log.push(["cut"]); },
      onEnd: (end) => { ending = end; },
    });
    await link.start();
    deliver({ c: null, k: "hello", p: { role: "relay", version: 1,
      challenge: new Uint8Array(32), limits } });
    const { meta } = socket.sent.find((frame) => frame.k === "open").p;
    const ephemeral = await c.x25519KeyPair();
    const offerHash = await c.hashOffer({ hostId, role: meta.role,
      name: meta.name, salt: meta.salt, teammateKey: meta.kx });
    const transcript = await c.hashTranscript(offerHash, meta.proof, hostPublicKey,
      ephemeral.publicKey);
    const signature = new Uint8Array(await crypto.subtle.sign("Ed25519", identity.privateKey,
      c.answerSignedMessage(transcript)));
    const answer = new Uint8Array([...hostPublicKey, ...ephemeral.publicKey, ...signature]);
    deliver({ c: 1, k: "data", p: { d: answer } });
    const shared = await c.sharedSecret(ephemeral.privateKey, meta.kx);
    const root = await c.e2eRoot(secret, hostId);
    const [, down] = await c.channelKeys(root, shared, transcript);
    const host = await c.ChannelCipher.create(down, hostId);
    let received = answer.length;
    for (const frame of frames) {
      if (frame.k === "data") {
        const d = await host.encrypt(f.encodeMsgpack({ op: "event", n: frame.n }));
        received += d.length;
        deliver({ c: 1, k: "data", p: { d } });
      } else {
        if (frame.k === "cast") received += frame.size;
        const p = frame.k === "cast" ? { d: new Uint8Array(frame.size) } : {};
        deliver({ c: frame.c, k: frame.k, p });
      }
    }
    for (let i = 0; i < 200 && (link.draining || link.inbox.length > 0); i++) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    return { log, ending, closedWith: socket.closedWith, received, granted: granted(),
      windows: socket.sent.filter((frame) => frame.k === "window").map((frame) => frame.p.n) };
  } finally {
    window.WebSocket = realWebSocket;
  }
}
"""


def run_link(page: Page, limits: dict[str, int], frames: list[dict[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = page.evaluate(LINK, [limits, frames])
    return result


def test_casts_and_cuts_reach_the_session_in_their_place_among_the_data(
    page: Page, static_server: str, page_log: PageLog
) -> None:
    page.goto(static_server + BLANK_PATH)
    frames = [
        {"k": "data", "n": 0},
        {"k": "cast", "c": 1, "size": 100},
        {"k": "data", "n": 1},
        {"k": "cast", "c": 1, "size": 200},
        {"k": "cut", "c": 1},
        {"k": "data", "n": 2},
    ]
    # The default limits: no grant before half the window is consumed.
    window = DEFAULT_LIMITS.initial_window
    assert window is not None
    defaults = {"initial_window": window, "max_data_size": MAX_DATA}
    got = run_link(page, defaults, frames)
    assert got["ending"] is None
    assert [entry[:2] for entry in got["log"]] == [
        ["message", 0],
        ["cast", 100],
        ["message", 1],
        ["cast", 200],
        ["cut"],
        ["message", 2],
    ]
    assert got["windows"] == []
    assert page_log.errors == []


def test_a_cast_costs_its_window_and_is_granted_back_once_taken(
    page: Page, static_server: str
) -> None:
    page.goto(static_server + BLANK_PATH)
    # Largest message 50 in a window of 480: a grant once 240 bytes are consumed.
    frames = [{"k": "cast", "c": 1, "size": 40} for _ in range(3)]
    got = run_link(page, {"initial_window": 480, "max_data_size": 50}, frames)
    assert got["ending"] is None
    # The host's answer and three casts, granted in one window frame after the third cast was
    # taken: none of a cast's bytes is granted while the session holds it.
    assert got["windows"] == [ANSWER_SIZE + 3 * 40]
    assert [entry[2] for entry in got["log"]] == [0, 0, 0]
    assert got["granted"] == got["received"]


def test_a_cast_beyond_the_window_is_a_flow_control_error(page: Page, static_server: str) -> None:
    page.goto(static_server + BLANK_PATH)
    frames = [{"k": "cast", "c": 1, "size": 60}, {"k": "cast", "c": 1, "size": 130}]
    limits = {"initial_window": 200, "max_data_size": 200}
    got = run_link(page, limits, frames)
    # The answer is granted back at once (it is more than half the window), the first cast's 60
    # bytes too (the peer's window fell below the largest message), so the second cast fits;
    # one byte more than the window does not.
    assert got["ending"] is None
    got = run_link(page, limits, [{"k": "cast", "c": 1, "size": 201}])
    assert got["ending"]["code"] == 4004
    assert got["closedWith"] == 4004


@pytest.mark.parametrize(
    "frame",
    [
        {"k": "cast", "c": None, "size": 10},
        {"k": "join", "c": 1},
        {"k": "part", "c": 1},
        {"k": "cast", "c": 3, "size": 10},
        {"k": "cut", "c": 3},
    ],
    ids=["cast-without-channel", "join", "part", "cast-other-channel", "cut-other-channel"],
)
def test_broadcast_frames_a_teammate_never_gets_end_the_link_with_4000(
    page: Page, static_server: str, frame: dict[str, Any]
) -> None:
    page.goto(static_server + BLANK_PATH)
    got = run_link(page, {}, [{"k": "data", "n": 0}, frame, {"k": "data", "n": 1}])
    assert got["ending"]["code"] == 4000
    assert got["closedWith"] == 4000
    # Nothing after the bad frame reached the session.
    assert got["log"] == [["message", 0]]


# Runs in the page: a Session over a scripted link. Each step is a host message on the channel
# ({message}), a cast ({cast: hex}) or a cut ({cut: true}); after each, what the session did.
SESSION = """
async (steps) => {
  const s = await import("/static/session.js");
  const c = await import("/static/crypto.js");
  const shown = [];
  let presence = [];
  const view = new Proxy({}, {
    get: (_, method) => (...args) => {
      if (method === "item") shown.push(args[0].seq);
      if (method === "presence") presence = args[0];
    },
  });
  let options = null;
  const sent = [];
  let closed = null;
  const linkFactory = (o) => {
    options = o;
    return {
      ended: false,
      start: async () => {},
      close(code, reason) { closed = { code, reason }; },
      send(message) { sent.push(message); return true; },
    };
  };
  const warnings = [];
  const realWarn = console.warn;
  console.warn = (...args) => warnings.push(args.join(" "));
  const trace = [];
  try {
    const session = new s.Session({ location, hostId: "et3o22wl7yiatqbq27ffm7btzj",
      role: "view", secret: new Uint8Array(32), name: "t", view, linkFactory });
    session.start();
    for (const step of steps) {
      let error = null;
      try {
        if (step.message) {
          const message = { ...step.message };
          for (const field of ["epoch", "key", "public_key"]) {
            if (typeof message[field] === "string") message[field] = c.fromHex(message[field]);
          }
          await options.onMessage(message);
        } else if (step.cast) {
          await options.onCast(c.fromHex(step.cast));
        } else {
          await options.onCut();
        }
      } catch (e) {
        error = Number.isInteger(e.code) ? e.code : String(e);
      }
      trace.push({
        shown: [...shown],
        // The first went in the open.
        subscribes: [options.subscribe.after,
          ...sent.filter((m) => m.op === "subscribe").map((m) => m.after)],
        breaks: session.stats.breaks,
        presence: presence.map((m) => `${m.name}${m.you ? "*" : ""}`),
        error,
        warnings: warnings.length,
      });
    }
  } finally {
    console.warn = realWarn;
  }
  return { trace, closed };
}
"""

READY = {
    "op": "ready",
    "conversation_id": "conv-1",
    "role": "view",
    "name": "t",
    "agent": {"name": "scripted", "kind": "chat"},
}


def item(seq: int) -> dict[str, Any]:
    return {"op": "item", "item": {"seq": seq, "type": "message", "data": {"text": str(seq)}}}


def snapshot(seqs: list[int], last_seq: int) -> dict[str, Any]:
    return {
        "op": "snapshot",
        "items": [item(seq)["item"] for seq in seqs],
        "last_seq": last_seq,
        "more": False,
        "reset": False,
        "first_seq": 0,
        "earlier": False,
    }


def member(id_: int, name: str, role: str = "view") -> dict[str, Any]:
    return {"id": id_, "name": name, "role": role}


class Caster:
    """The host's side of one epoch: seals lists of host messages as casts."""

    def __init__(self, identity: HostIdentity = HOST, *, counter: int = 0) -> None:
        self.identity = identity
        self.key = BroadcastKey.generate()
        self.sealer = CastSealer(identity, self.key, counter=counter)

    def start(self, members: list[dict[str, Any]], you: int) -> dict[str, Any]:
        """The `broadcast` message for the next cast (bytes as hex, for the page)."""
        return {
            "message": {
                "op": "broadcast",
                "epoch": self.key.epoch.hex(),
                "key": self.key.key.hex(),
                "public_key": self.identity.public_key.hex(),
                "counter": self.sealer.counter,
                "members": members,
                "count": len(members),
                "you": you,
            }
        }

    def cast(self, *messages: dict[str, Any]) -> dict[str, Any]:
        return {"cast": self.seal_raw([msgpack.packb(m) for m in messages]).hex()}

    def seal_raw(self, value: object) -> bytes:
        return self.sealer.seal(msgpack.packb(value, use_bin_type=True))


def run_session(page: Page, steps: list[dict[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = page.evaluate(SESSION, steps)
    return result


def test_the_session_takes_the_live_tail_from_casts_and_resumes_by_cursor(
    page: Page, static_server: str, page_log: PageLog
) -> None:
    page.goto(static_server + BLANK_PATH)
    first = Caster(counter=3)
    early = Caster().cast(item(3))
    members = [member(1, "host", "host"), member(2, "t")]
    steps = [
        {"message": READY},
        {"message": snapshot([0, 1, 2], 2)},
        # Not joined yet: a cast before the `broadcast` message is not for this channel.
        early,
        {"message": item(3)},
        first.start(members, 2),
        # Item 3 came on the channel already.
        first.cast(
            item(3),
            item(4),
            {"op": "presence", "joined": [member(3, "bob")], "left": [], "count": 3},
        ),
        first.cast(item(5)),
    ]
    first.cast(item(6))  # counter 5: lost on the way
    steps += [
        # The cast of counter 5 never came: this one is out of order.
        first.cast(item(7)),
        # Ignored until the next `broadcast` message, and so is a cut meanwhile.
        first.cast(item(8)),
        {"cut": True},
        {"message": snapshot([5, 6, 7, 8], 8)},
    ]
    second = Caster()
    steps += [
        second.start([*members, member(3, "bob"), member(4, "eve")], 2),
        # Item 10 is missing: a gap, with item 9 before it still taken.
        second.cast(item(9), item(11)),
        {"message": snapshot([10, 11], 11)},
    ]
    second.cast(item(12))  # cast while this channel was out of the broadcast
    steps += [
        second.start(members, 2),
        second.cast(item(12), {"op": "presence", "joined": [], "left": [1], "count": 1}),
        {"cut": True},
        second.cast(item(13)),
        {"message": snapshot([13], 13)},
    ]
    got = run_session(page, steps)
    trace = got["trace"]
    assert [step["error"] for step in trace] == [None] * len(steps)
    after = {index: step for index, step in enumerate(trace)}
    # Before the broadcast: the snapshot, the early cast ignored, item 3 on the channel.
    assert after[2]["shown"] == [0, 1, 2]
    assert after[3]["shown"] == [0, 1, 2, 3]
    assert after[4]["presence"] == ["host", "t*"]
    # Casts: item 3 skipped (held), 4 and 5 taken, presence deltas applied.
    assert after[5]["shown"] == [0, 1, 2, 3, 4]
    assert after[5]["presence"] == ["host", "t*", "bob"]
    assert after[6]["shown"] == [0, 1, 2, 3, 4, 5]
    # Out of order: one break, one resubscribe after the cursor, one log line.
    assert after[7]["breaks"] == 1
    assert after[7]["subscribes"] == [None, 5]
    assert after[7]["warnings"] == 1
    assert after[9]["subscribes"] == [None, 5]
    assert after[9]["breaks"] == 1
    assert after[9]["shown"] == after[6]["shown"]
    # The resume's snapshot: item 5 held already, 6 to 8 new.
    assert after[10]["shown"] == list(range(9))
    # A new epoch; its list replaces the one held.
    assert after[11]["presence"] == ["host", "t*", "bob", "eve"]
    assert after[12]["shown"] == list(range(10))
    assert after[12]["subscribes"] == [None, 5, 9]
    assert after[13]["shown"] == list(range(12))
    assert after[15]["shown"] == list(range(13))
    assert after[15]["presence"] == ["t*"]
    # The relay's cut.
    assert after[16]["breaks"] == 3
    assert after[16]["subscribes"] == [None, 5, 9, 12]
    assert after[17]["shown"] == list(range(13))
    assert after[18]["shown"] == list(range(14))
    assert trace[-1]["warnings"] == 3
    assert got["closed"] is None
    assert page_log.errors == []


def test_a_tampered_or_malformed_cast_breaks_the_broadcast(page: Page, static_server: str) -> None:
    page.goto(static_server + BLANK_PATH)
    caster = Caster()
    tampered = bytearray(bytes.fromhex(caster.cast(item(1))["cast"]))
    tampered[30] ^= 1
    not_a_list = caster.seal_raw({"op": "item"})
    steps = [
        {"message": READY},
        {"message": snapshot([0], 0)},
        caster.start([], 2),
        {"cast": bytes(tampered).hex()},
        caster.start([], 2),
        {"cast": not_a_list.hex()},
        caster.start([], 2),
        {"cast": bytes(10).hex()},
    ]
    got = run_session(page, steps)
    trace = got["trace"]
    assert [step["error"] for step in trace] == [None] * len(steps)
    assert [step["breaks"] for step in trace[3::2]] == [1, 2, 3]
    assert trace[-1]["subscribes"] == [None, 0, 0, 0]
    assert trace[-1]["shown"] == [0]


def test_a_broadcast_not_signed_by_the_host_ends_the_attachment(
    page: Page, static_server: str
) -> None:
    page.goto(static_server + BLANK_PATH)
    stranger = Caster(HostIdentity.from_seed(bytes(range(0x40, 0x60))))
    caster = Caster()
    steps = [{"message": READY}, {"message": snapshot([0], 0)}, stranger.start([], 2)]
    got = run_session(page, steps)
    assert [step["error"] for step in got["trace"]] == [None, None, 4003]
    # A message in a good cast that is not a host message: the host broke the protocol, 4000.
    steps = [
        {"message": READY},
        {"message": snapshot([0], 0)},
        caster.start([], 2),
        {"cast": caster.seal_raw([b"\x01"]).hex()},
    ]
    got = run_session(page, steps)
    assert [step["error"] for step in got["trace"]] == [None, None, None, 4000]
