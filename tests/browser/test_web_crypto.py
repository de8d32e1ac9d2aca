"""The page's WebCrypto derives the bytes of tunnel/crypto.py (tests/vectors/crypto.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page

from .conftest import BLANK_PATH, PageLog

pytestmark = [pytest.mark.browser, pytest.mark.timeout(90)]

VECTORS = Path(__file__).resolve().parent.parent / "vectors" / "crypto.json"

# Runs in the page: imports the page's own modules and computes every vector from the inputs.
COMPUTE = """
async (v) => {
  const c = await import("/static/crypto.js");
  const f = await import("/static/frames.js");
  const secret = c.fromHex(v.secret_hex);
  const salt = c.fromHex(v.salt_hex);
  const token = await c.relayToken(secret, v.host_id);
  const root = await c.e2eRoot(secret, v.host_id);
  const [up, down] = await c.channelKeys(root, salt);
  const send = await c.ChannelCipher.create(up, v.host_id);
  const ct0 = await send.encrypt(c.fromHex(v.plaintext_hex));
  const ct1 = await send.encrypt(c.fromHex(v.plaintext_hex));
  const receive = await c.ChannelCipher.create(down, v.host_id);
  const reply = await receive.decrypt(c.fromHex(v.ciphertext_down_0_hex));
  const both = await c.teammateChannelCrypto(secret, v.host_id, salt);
  const viaPair = await both.send.encrypt(c.fromHex(v.plaintext_hex));
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
  const [up] = await c.channelKeys(root, c.fromHex(v.salt_hex));
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
