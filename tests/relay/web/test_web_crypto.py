"""The page's WebCrypto derives the bytes of tunnel/crypto.py (tests/vectors/crypto.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page

from tunnel.e2e.crypto import channel_keys

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
