"""The page's WebCrypto derives the bytes of tunnel/e2e (tests/vectors/crypto.json) and opens the
host's casts exactly as tunnel.e2e.broadcast.CastOpener does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page

from tunnel.e2e.broadcast import BroadcastKey, CastSealer
from tunnel.e2e.crypto import channel_keys
from tunnel.e2e.identity import HostIdentity, derive_host_id

from .conftest import BLANK_PATH, PageLog

pytestmark = [pytest.mark.browser, pytest.mark.timeout(90)]

VECTORS = Path(__file__).resolve().parents[2] / "vectors" / "crypto.json"

# Runs in the page: imports the page's own modules and computes every vector from the inputs.
COMPUTE = """
async (v) => {
  const c = await import("/static/crypto.js");
  const f = await import("/static/frames.js");
  const secret = c.fromHex(v.secret_hex);
  const channel = { salt: c.fromHex(v.salt_hex), hostNonce: c.fromHex(v.host_nonce_hex),
    name: v.name };
  const token = await c.relayToken(secret, v.host_id);
  const root = await c.e2eRoot(secret, v.host_id);
  const [up, down] = await c.channelKeys(root, channel);
  const send = await c.ChannelCipher.create(up, v.host_id);
  const ct0 = await send.encrypt(c.fromHex(v.plaintext_hex));
  const ct1 = await send.encrypt(c.fromHex(v.plaintext_hex));
  const receive = await c.ChannelCipher.create(down, v.host_id);
  const reply = await receive.decrypt(c.fromHex(v.ciphertext_down_0_hex));
  const both = await c.teammateChannelCrypto(secret, v.host_id, channel);
  const viaPair = await both.send.encrypt(c.fromHex(v.plaintext_hex));
  const pairReply = await both.receive.decrypt(c.fromHex(v.ciphertext_down_0_hex));
  // Each input is bound into both keys: change any one and neither key stays the same.
  const flip = (bytes) => { const out = bytes.slice(); out[0] ^= 1; return out; };
  const variants = [
    { ...channel, salt: flip(channel.salt) },
    { ...channel, hostNonce: flip(channel.hostNonce) },
    { ...channel, name: v.name + " " },
    { ...channel, name: v.name.toUpperCase() },
  ];
  const variantKeys = [];
  for (const variant of variants) {
    variantKeys.push((await c.channelKeys(root, variant)).map(c.toHex));
  }
  const refused = [];
  for (const bad of [
    { ...channel, salt: channel.salt.slice(1) },
    { ...channel, hostNonce: channel.hostNonce.slice(1) },
    { ...channel, hostNonce: new Uint8Array(17) },
    { ...channel, hostNonce: undefined },
    { ...channel, name: undefined },
  ]) {
    try {
      await c.channelKeys(root, bad);
      refused.push("accepted");
    } catch (error) {
      refused.push(error.name);
    }
  }
  const url = new URL(v.share_link);
  const parsed = c.parseFragment(url.hash);
  return {
    token_b64url: c.b64urlEncode(token),
    verifier_hex: c.toHex(await c.tokenVerifier(token)),
    root_hex: c.toHex(root),
    k_up_hex: c.toHex(up),
    k_down_hex: c.toHex(down),
    ciphertext_up_0_hex: c.toHex(ct0),
    ciphertext_up_1_hex: c.toHex(ct1),
    reply_plaintext_hex: c.toHex(reply),
    pair_ciphertext_up_0_hex: c.toHex(viaPair),
    pair_reply_plaintext_hex: c.toHex(pairReply),
    variant_keys: variantKeys,
    refused,
    plaintext_msgpack_hex: c.toHex(f.encodeMsgpack({ op: "prompt", text: "hello" })),
    reply_decoded: f.decodeMsgpack(reply),
    link_role: parsed.role,
    link_secret_hex: c.toHex(parsed.secret),
    link_host_id: c.hostIdFromPath(url.pathname),
  };
}
"""

# Runs in the page: what a receiving cipher does with tampered, replayed and reordered input.
FAILURES = """
async (v) => {
  const c = await import("/static/crypto.js");
  const root = await c.e2eRoot(c.fromHex(v.secret_hex), v.host_id);
  const [up] = await c.channelKeys(root, { salt: c.fromHex(v.salt_hex),
    hostNonce: c.fromHex(v.host_nonce_hex), name: v.name });
  const outcome = async (steps) => {
    const cipher = await c.ChannelCipher.create(up, v.host_id);
    const results = [];
    for (const hex of steps) {
      try {
        await cipher.decrypt(c.fromHex(hex));
        results.push("ok");
      } catch (error) {
        results.push(error instanceof c.DecryptionError ? `fail:${error.code}` : `other:${error}`);
      }
    }
    return results;
  };
  const tampered = v.ciphertext_up_0_hex.slice(0, -2) +
    (parseInt(v.ciphertext_up_0_hex.slice(-2), 16) ^ 1).toString(16).padStart(2, "0");
  const wrongHost = await c.ChannelCipher.create(up, "a".repeat(26));
  let wrongHostResult;
  try {
    await wrongHost.decrypt(c.fromHex(v.ciphertext_up_0_hex));
    wrongHostResult = "ok";
  } catch (error) {
    wrongHostResult = `fail:${error.code}`;
  }
  return {
    inOrder: await outcome([v.ciphertext_up_0_hex, v.ciphertext_up_1_hex]),
    tampered: await outcome([tampered, v.ciphertext_up_0_hex]),
    replayed: await outcome([v.ciphertext_up_0_hex, v.ciphertext_up_0_hex]),
    reordered: await outcome([v.ciphertext_up_1_hex]),
    wrongHost: wrongHostResult,
  };
}
"""

BAD_FRAGMENTS = """
async () => {
  const c = await import("/static/crypto.js");
  const secret = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8";
  const cases = ["", "#", "#drive", "#drive.", `#admin.${secret}`, `#drive.${secret}=`,
    `#drive.${secret.slice(0, -1)}`, `#drive.${secret}AA`, `#drive.${secret.replace("A", "+")}`,
    `#drive.${secret.slice(0, -1)}9`, `#view.${secret} `];
  const out = {};
  for (const fragment of cases) {
    try {
      c.parseFragment(fragment);
      out[fragment] = "accepted";
    } catch (error) {
      out[fragment] = error.name;
    }
  }
  out.good = c.parseFragment(`#view.${secret}`).role;
  return out;
}
"""


def load_vectors() -> dict[str, Any]:
    # The crypto suite generates this file from tunnel/crypto.py and checks it stays true.
    assert VECTORS.exists(), f"{VECTORS} is missing"
    vectors: dict[str, Any] = json.loads(VECTORS.read_text())
    return vectors


def open_blank(page: Page, base_url: str) -> None:
    page.goto(base_url + BLANK_PATH)
    assert page.evaluate("() => isSecureContext") is True


def test_webcrypto_matches_the_published_vectors(
    page: Page, static_server: str, page_log: PageLog
) -> None:
    vectors = load_vectors()
    open_blank(page, static_server)
    got = page.evaluate(COMPUTE, vectors)
    for key in (
        "token_b64url",
        "verifier_hex",
        "root_hex",
        "k_up_hex",
        "k_down_hex",
        "ciphertext_up_0_hex",
        "ciphertext_up_1_hex",
        "reply_plaintext_hex",
    ):
        assert got[key] == vectors[key], key
    assert got["pair_ciphertext_up_0_hex"] == vectors["ciphertext_up_0_hex"]
    assert got["pair_reply_plaintext_hex"] == vectors["reply_plaintext_hex"]
    expected_keys = {vectors["k_up_hex"], vectors["k_down_hex"]}
    assert len(got["variant_keys"]) == 4
    for keys in got["variant_keys"]:
        assert len(set(keys)) == 2
        assert not set(keys) & expected_keys
    assert got["refused"] == ["TypeError"] * 5
    assert got["plaintext_msgpack_hex"] == vectors["plaintext_hex"]
    assert got["reply_decoded"]["op"] == "error"
    assert got["link_role"] == vectors["role"]
    assert got["link_secret_hex"] == vectors["secret_hex"]
    assert got["link_host_id"] == vectors["host_id"]
    assert page_log.errors == []


def test_tampered_replayed_and_reordered_messages_do_not_decrypt(
    page: Page, static_server: str
) -> None:
    vectors = load_vectors()
    open_blank(page, static_server)
    got = page.evaluate(FAILURES, vectors)
    assert got["inOrder"] == ["ok", "ok"]
    # After one failure the cipher is dead: even the genuine message is refused.
    assert got["tampered"] == ["fail:4003", "fail:4003"]
    assert got["replayed"] == ["ok", "fail:4003"]
    assert got["reordered"] == ["fail:4003"]
    assert got["wrongHost"] == "fail:4003"


def test_malformed_fragments_are_refused(page: Page, static_server: str) -> None:
    open_blank(page, static_server)
    got = page.evaluate(BAD_FRAGMENTS)
    good = got.pop("good")
    assert good == "view"
    assert got, "no cases ran"
    assert {fragment: result for fragment, result in got.items() if result != "BadLinkError"} == {}


# Runs in the page: channel keys for several names, from the vectors' root, salt and nonce.
NAMED_KEYS = """
async ([v, names]) => {
  const c = await import("/static/crypto.js");
  const root = c.fromHex(v.root_hex);
  const out = [];
  for (const name of names) {
    const channel = { salt: c.fromHex(v.salt_hex), hostNonce: c.fromHex(v.host_nonce_hex), name };
    out.push((await c.channelKeys(root, channel)).map(c.toHex));
  }
  return out;
}
"""

# Runs in the page: the name a channel is opened with, for each input (plus a lone surrogate,
# which cannot cross from Python).
CHANNEL_NAMES = """
async (inputs) => {
  const l = await import("/static/link.js");
  return [...inputs, "b" + String.fromCharCode(0xd800) + "c"].map(l.channelName);
}
"""


def test_names_are_bound_into_the_keys_as_utf8(page: Page, static_server: str) -> None:
    vectors = load_vectors()
    open_blank(page, static_server)
    names = ["alice", "Zoë", "張偉", "😀 party", "x\u0301", "a" * 64]
    got = page.evaluate(NAMED_KEYS, [vectors, names])
    root = bytes.fromhex(vectors["root_hex"])
    salt = bytes.fromhex(vectors["salt_hex"])
    host_nonce = bytes.fromhex(vectors["host_nonce_hex"])
    expected = [
        [k.hex() for k in channel_keys(root, salt=salt, host_nonce=host_nonce, name=name)]
        for name in names
    ]
    assert got == expected
    assert got[0] == [vectors["k_up_hex"], vectors["k_down_hex"]]
    assert len({key for pair in got for key in pair}) == 2 * len(names)


def test_channel_names_are_what_the_host_accepts(page: Page, static_server: str) -> None:
    open_blank(page, static_server)
    smiles = "\U0001f600" * 70
    inputs = [
        "  alice  ",
        "",
        "   ",
        "\x00\x07\x7f",
        "a" * 100,
        smiles,
        "ab" + "\U0001f600" * 63 + "z",
        "x" * 63 + " y",
        "tab\there",
    ]
    got = page.evaluate(CHANNEL_NAMES, inputs)
    assert got == [
        "alice",
        "teammate",
        "teammate",
        "teammate",
        "a" * 64,
        "\U0001f600" * 64,
        "ab" + "\U0001f600" * 62,
        "x" * 63,
        "tabhere",
        "b\ufffdc",
    ]
    for name in got:
        # The host's rule: 1 to 64 code points, and the name must have a UTF-8 form.
        assert 1 <= len(name) <= 64
        name.encode("utf-8")


# Runs in the page: what a CastOpener makes of the vector cast, of casts changed in one byte, and
# of the cast given to openers that expect another counter, epoch, key or host.
CASTS = """
async ([v, extra]) => {
  const c = await import("/static/crypto.js");
  const cast = c.fromHex(v.cast_hex);
  const publicKey = c.fromHex(v.host_public_key_hex);
  const base = { hostId: v.host_id, publicKey, epoch: c.fromHex(v.cast_epoch_hex),
    key: c.fromHex(v.cast_key_hex), counter: Number(v.cast_counter) };
  const verdict = (error) => (error instanceof c.CastError ? "fail" : `other:${error}`);
  const outcome = async (steps, options = base) => {
    let opener;
    try {
      opener = await c.CastOpener.create(options);
    } catch (error) {
      return [`refused:${verdict(error)}`];
    }
    const results = [];
    for (const bytes of steps) {
      try {
        results.push(c.toHex(await opener.open(bytes)));
      } catch (error) {
        results.push(verdict(error));
      }
    }
    return results;
  };
  const flip = (bytes, at) => {
    const out = bytes.slice();
    out[at < 0 ? out.length + at : at] ^= 1;
    return out;
  };
  // Calls made without waiting for each other: still opened one after another, in call order.
  const concurrently = async (steps, options = base) => {
    const opener = await c.CastOpener.create(options);
    const settled = await Promise.allSettled(steps.map((bytes) => opener.open(bytes)));
    return settled.map((s) => (s.status === "fulfilled" ? c.toHex(s.value) : verdict(s.reason)));
  };
  const sequence = extra.sequence.map(c.fromHex);
  const fromZero = { ...base, counter: 0 };
  return {
    good: await outcome([cast]),
    counterAfter: await (async () => {
      const opener = await c.CastOpener.create(base);
      await opener.open(cast);
      return String(opener.counter);
    })(),
    hostId: await c.deriveHostId(publicKey),
    hostIds: await Promise.all(extra.publicKeys.map((hex) => c.deriveHostId(c.fromHex(hex)))),
    ciphertext: await outcome([flip(cast, 30), cast]),
    tag: await outcome([flip(cast, -65)]),
    signature: await outcome([flip(cast, -1), cast]),
    epoch: await outcome([flip(cast, 0)]),
    counterField: await outcome([flip(cast, 23)]),
    counter4: await outcome([cast], { ...base, counter: 4 }),
    counter6: await outcome([cast], { ...base, counter: 6 }),
    replay: await outcome([cast, cast]),
    truncated: await outcome([cast.slice(0, -1)]),
    tooShort: await outcome([cast.slice(0, 16 + 8 + 16 + 64 - 1)]),
    empty: await outcome([new Uint8Array(0)]),
    otherEpoch: await outcome([cast], { ...base, epoch: flip(base.epoch, 15) }),
    otherKey: await outcome([cast], { ...base, key: flip(base.key, 0) }),
    forged: await outcome([c.fromHex(extra.forged)]),
    sequence: await outcome(sequence, fromZero),
    skipped: await outcome([sequence[0], sequence[2]], fromZero),
    concurrent: await concurrently(sequence, fromZero),
    concurrentAfterBad: await concurrently([flip(sequence[0], 30), ...sequence.slice(1)],
      fromZero),
    publicKeyNotHosts: await outcome([cast], { ...base, publicKey: flip(publicKey, 0) }),
    otherHostId: await outcome([cast], { ...base, hostId: "a".repeat(26) }),
    shortPublicKey: await outcome([cast], { ...base, publicKey: publicKey.slice(1) }),
    shortEpoch: await outcome([cast], { ...base, epoch: base.epoch.slice(1) }),
    shortKey: await outcome([cast], { ...base, key: base.key.slice(1) }),
    negativeCounter: await outcome([cast], { ...base, counter: -1 }),
    floatCounter: await outcome([cast], { ...base, counter: 5.5 }),
    unsafeCounter: await outcome([cast], { ...base, counter: 2 ** 53 }),
  };
}
"""


def test_the_page_opens_the_vector_cast_and_refuses_every_changed_one(
    page: Page, static_server: str, page_log: PageLog
) -> None:
    vectors = load_vectors()
    identity = HostIdentity.from_seed(bytes.fromhex(vectors["host_seed_hex"]))
    assert identity.host_id == vectors["host_id"]
    key = BroadcastKey(
        epoch=bytes.fromhex(vectors["cast_epoch_hex"]), key=bytes.fromhex(vectors["cast_key_hex"])
    )
    plaintext = bytes.fromhex(vectors["cast_plaintext_hex"])
    sealer = CastSealer(identity, key)
    sequence = [sealer.seal(plaintext + bytes([n])) for n in range(3)]
    # Someone who knows K (a teammate) seals a cast of the right epoch and counter, and signs it
    # with a key of their own.
    forger = HostIdentity.from_seed(bytes(range(0x40, 0x60)))
    forged = CastSealer(forger, key, counter=5).seal(plaintext)
    public_keys = [bytes(32).hex(), bytes(range(32)).hex(), forger.public_key.hex()]
    extra = {
        "sequence": [cast.hex() for cast in sequence],
        "forged": forged.hex(),
        "publicKeys": public_keys,
    }
    open_blank(page, static_server)
    got = page.evaluate(CASTS, [vectors, extra])
    good = vectors["cast_plaintext_hex"]
    assert got["good"] == [good]
    assert got["counterAfter"] == "6"
    assert got["hostId"] == vectors["host_id"]
    assert got["hostIds"] == [derive_host_id(bytes.fromhex(hex_)) for hex_ in public_keys]
    # One failure kills the opener: even the genuine cast after it is refused.
    assert got["ciphertext"] == ["fail", "fail"]
    assert got["signature"] == ["fail", "fail"]
    for case in ("tag", "epoch", "counterField", "counter4", "counter6", "truncated"):
        assert got[case] == ["fail"], case
    for case in ("tooShort", "empty", "otherEpoch", "otherKey", "forged"):
        assert got[case] == ["fail"], case
    assert got["replay"] == [good, "fail"]
    assert got["sequence"] == [(plaintext + bytes([n])).hex() for n in range(3)]
    assert got["skipped"] == [got["sequence"][0], "fail"]
    assert got["concurrent"] == got["sequence"]
    assert got["concurrentAfterBad"] == ["fail", "fail", "fail"]
    # The opener itself is refused when the key is not the host id's or a field is malformed.
    for case in (
        "publicKeyNotHosts",
        "otherHostId",
        "shortPublicKey",
        "shortEpoch",
        "shortKey",
        "negativeCounter",
        "floatCounter",
        "unsafeCounter",
    ):
        assert got[case] == ["refused:fail"], case
    assert page_log.errors == []
