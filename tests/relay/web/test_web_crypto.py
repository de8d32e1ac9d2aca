"""The page's WebCrypto derives the bytes of tunnel/e2e (tests/vectors/crypto.json): the token,
the root, every step of the channel opening (tunnel.e2e.opening) and the channel's ciphertexts;
it refuses an answer to an opening whose transcript differs in any field, as Python does; and it
opens the host's casts exactly as tunnel.e2e.broadcast.CastOpener does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from playwright.sync_api import Page

from tunnel.e2e.broadcast import BroadcastKey, CastSealer
from tunnel.e2e.identity import PUBLIC_KEY_SIZE, HostIdentity, derive_host_id
from tunnel.e2e.opening import (
    EPHEMERAL_KEY_SIZE,
    EarlySubscribe,
    Offer,
    OpeningError,
    TeammateOpening,
    answer_offer,
    answer_signed_message,
    full_transcript_hash,
)
from tunnel.e2e.opening import (
    REFERENCE_SUBSCRIBE as REFERENCE,
)

from .conftest import BLANK_PATH, PageLog

pytestmark = [pytest.mark.browser, pytest.mark.timeout(90)]

VECTORS = Path(__file__).resolve().parents[2] / "vectors" / "crypto.json"

# Runs in the page: imports the page's own modules and computes every vector from the inputs.
COMPUTE = """
async (v) => {
  const c = await import("/static/crypto.js");
  const f = await import("/static/frames.js");
  const secret = c.fromHex(v.secret_hex);
  const token = await c.relayToken(secret, v.host_id);
  const root = await c.e2eRoot(secret, v.host_id);
  const teammate = await c.x25519KeyPair(c.fromHex(v.kx_teammate_private_hex));
  const host = await c.x25519KeyPair(c.fromHex(v.kx_host_private_hex));
  const subscribe = { after: Number(v.kx_sub_after), conversation: v.kx_sub_conversation };
  const opening = await c.TeammateOpening.create({ root, hostId: v.host_id,
    role: v.role, name: v.name, salt: c.fromHex(v.salt_hex),
    keyPair: teammate, subscribe });
  const meta = opening.meta();
  const answer = c.fromHex(v.kx_answer_hex);
  const hostPublicKey = c.fromHex(v.host_public_key_hex);
  const transcript = await c.hashTranscript(opening.offerHash, opening.proof, hostPublicKey,
    host.publicKey);
  const shared = await c.sharedSecret(teammate.privateKey, host.publicKey);
  const sharedAtHost = await c.sharedSecret(host.privateKey, teammate.publicKey);
  const [up, down] = await c.channelKeys(root, shared, transcript);
  const verifyKey = await crypto.subtle.importKey("raw", hostPublicKey, "Ed25519", false,
    ["verify"]);
  const signatureVerifies = await crypto.subtle.verify("Ed25519", verifyKey,
    answer.slice(answer.length - 64), c.answerSignedMessage(transcript));
  // The opening's own ciphers, from the answer alone.
  const channel = await opening.finish(answer);
  const ct0 = await channel.send.encrypt(c.fromHex(v.plaintext_hex));
  const ct1 = await channel.send.encrypt(c.fromHex(v.plaintext_hex));
  const reply = await channel.receive.decrypt(c.fromHex(v.ciphertext_down_0_hex));
  // The same from the keys computed step by step.
  const send = await c.ChannelCipher.create(up, v.host_id);
  const keysCiphertext = await send.encrypt(c.fromHex(v.plaintext_hex));
  const receive = await c.ChannelCipher.create(down, v.host_id);
  const keysReply = await receive.decrypt(c.fromHex(v.ciphertext_down_0_hex));
  let second;
  try {
    await opening.finish(answer);
    second = "accepted";
  } catch (error) {
    second = error.name;
  }
  const url = new URL(v.share_link);
  const parsed = c.parseFragment(url.hash);
  return {
    token_b64url: c.b64urlEncode(token),
    verifier_hex: c.toHex(await c.tokenVerifier(token)),
    root_hex: c.toHex(root),
    kx_teammate_key_hex: c.toHex(teammate.publicKey),
    kx_host_key_hex: c.toHex(host.publicKey),
    kx_sub_field_hex: c.toHex(new TextEncoder().encode(c.subscribeField(subscribe))),
    kx_offer_hash_hex: c.toHex(opening.offerHash),
    kx_proof_key_hex: c.toHex(await c.proofKey(root)),
    kx_proof_hex: c.toHex(opening.proof),
    kx_transcript_hash_hex: c.toHex(transcript),
    kx_shared_hex: c.toHex(shared),
    shared_at_host_hex: c.toHex(sharedAtHost),
    signature_verifies: signatureVerifies,
    k_up_hex: c.toHex(up),
    k_down_hex: c.toHex(down),
    ciphertext_up_0_hex: c.toHex(ct0),
    ciphertext_up_1_hex: c.toHex(ct1),
    reply_plaintext_hex: c.toHex(reply),
    keys_ciphertext_up_0_hex: c.toHex(keysCiphertext),
    keys_reply_plaintext_hex: c.toHex(keysReply),
    meta: Object.fromEntries(Object.entries(meta).map(
      ([key, value]) => [key, value instanceof Uint8Array ? c.toHex(value) : value])),
    private_key_kept: opening.privateKey !== null,
    second_finish: second,
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
  const up = c.fromHex(v.k_up_hex);
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
        "kx_teammate_key_hex",
        "kx_host_key_hex",
        "kx_sub_field_hex",
        "kx_offer_hash_hex",
        "kx_proof_key_hex",
        "kx_proof_hex",
        "kx_transcript_hash_hex",
        "kx_shared_hex",
        "k_up_hex",
        "k_down_hex",
        "ciphertext_up_0_hex",
        "ciphertext_up_1_hex",
        "reply_plaintext_hex",
    ):
        assert got[key] == vectors[key], key
    # Both ends of the exchange reach the same secret, and the host's signature verifies.
    assert got["shared_at_host_hex"] == vectors["kx_shared_hex"]
    assert got["signature_verifies"] is True
    assert got["keys_ciphertext_up_0_hex"] == vectors["ciphertext_up_0_hex"]
    assert got["keys_reply_plaintext_hex"] == vectors["reply_plaintext_hex"]
    # The open's meta is the offer, field for field, and nothing else.
    assert got["meta"] == {
        "role": vectors["role"],
        "name": vectors["name"],
        "salt": vectors["salt_hex"],
        "kx": vectors["kx_teammate_key_hex"],
        "proof": vectors["kx_proof_hex"],
        "sub": {"after": REFERENCE.after, "conversation": REFERENCE.conversation},
    }
    # The ephemeral private key is gone once the answer was checked; an opening finishes once.
    assert got["private_key_kept"] is False
    assert got["second_finish"] == "Error"
    assert got["plaintext_msgpack_hex"] == vectors["plaintext_hex"]
    assert got["reply_decoded"]["op"] == "error"
    assert got["link_role"] == vectors["role"]
    assert got["link_secret_hex"] == vectors["secret_hex"]
    assert got["link_host_id"] == vectors["host_id"]
    assert page_log.errors == []


# Runs in the page: for each case, an opening of the vectors' inputs with the case's changes
# (hex for bytes; `teammate_private` is the ephemeral key, `root` the role root the proof is
# made with), offered the case's answer: "accepted", or how it was refused.
OPENINGS = """
async ([v, cases]) => {
  const c = await import("/static/crypto.js");
  const out = [];
  for (const change of cases) {
    const inputs = { host_id: v.host_id, role: v.role, name: v.name,
      salt: v.salt_hex, teammate_private: v.kx_teammate_private_hex, root: v.root_hex,
      answer: v.kx_answer_hex, sub_after: v.kx_sub_after,
      sub_conversation: v.kx_sub_conversation, ...change };
    const opening = await c.TeammateOpening.create({
      root: c.fromHex(inputs.root), hostId: inputs.host_id,
      role: inputs.role, name: inputs.name, salt: c.fromHex(inputs.salt),
      keyPair: await c.x25519KeyPair(c.fromHex(inputs.teammate_private)),
      subscribe: { after: Number(inputs.sub_after), conversation: inputs.sub_conversation },
    });
    try {
      await opening.finish(c.fromHex(inputs.answer));
      out.push("accepted");
    } catch (error) {
      out.push(`${error.name} ${error.code}: ${error.message}`);
    }
    if (opening.privateKey !== null) out.push("the private key was kept");
  }
  return out;
}
"""


def _flip(data: bytes, at: int) -> bytes:
    changed = bytearray(data)
    changed[at] ^= 1
    return bytes(changed)


def _python_outcome(vectors: dict[str, Any], change: dict[str, str]) -> str:
    """What tunnel.e2e.opening.TeammateOpening makes of the same case, spelled as the page's."""
    inputs = {
        "host_id": vectors["host_id"],
        "role": vectors["role"],
        "name": vectors["name"],
        "salt": vectors["salt_hex"],
        "teammate_private": vectors["kx_teammate_private_hex"],
        "root": vectors["root_hex"],
        "answer": vectors["kx_answer_hex"],
        "sub_after": vectors["kx_sub_after"],
        "sub_conversation": vectors["kx_sub_conversation"],
        **change,
    }
    opening = TeammateOpening(
        root=bytes.fromhex(inputs["root"]),
        host_id=inputs["host_id"],
        role=inputs["role"],
        name=inputs["name"],
        salt=bytes.fromhex(inputs["salt"]),
        private_key=X25519PrivateKey.from_private_bytes(bytes.fromhex(inputs["teammate_private"])),
        subscribe=EarlySubscribe(
            after=int(inputs["sub_after"]), conversation=inputs["sub_conversation"]
        ),
    )
    try:
        opening.finish(bytes.fromhex(inputs["answer"]))
    except OpeningError as error:
        return f"OpeningError {int(error.code)}: {error.reason}"
    return "accepted"


def _opening_cases(vectors: dict[str, Any]) -> dict[str, dict[str, str]]:
    """One case per transcript field the teammate's view of it can differ in, and answers that
    are not the host's: each must be refused (the first, the genuine one, accepted)."""
    identity = HostIdentity.from_seed(bytes.fromhex(vectors["host_seed_hex"]))
    answer = bytes.fromhex(vectors["kx_answer_hex"])
    root = bytes.fromhex(vectors["root_hex"])
    host_key_at = PUBLIC_KEY_SIZE
    offer = Offer(
        host_id=vectors["host_id"],
        role=vectors["role"],
        name=vectors["name"],
        salt=bytes.fromhex(vectors["salt_hex"]),
        teammate_key=bytes.fromhex(vectors["kx_teammate_key_hex"]),
        subscribe=REFERENCE,
    )
    proof = bytes.fromhex(vectors["kx_proof_hex"])
    # Someone else's key, signing the right transcript: not the key of the link's host id.
    forger = HostIdentity.from_seed(bytes(range(0x40, 0x60)))
    host_key = answer[host_key_at : host_key_at + EPHEMERAL_KEY_SIZE]
    forged_transcript = full_transcript_hash(offer, proof, forger.public_key, host_key)
    forged = forger.public_key + host_key + forger.sign(answer_signed_message(forged_transcript))
    # The host's genuine answer to another offer (another salt): replayed into this channel.
    other_offer = Offer(
        host_id=offer.host_id,
        role=offer.role,
        name=offer.name,
        salt=bytes(16),
        teammate_key=offer.teammate_key,
        subscribe=REFERENCE,
    )
    other_proof = TeammateOpening(
        root=root,
        host_id=offer.host_id,
        role=offer.role,
        name=offer.name,
        salt=other_offer.salt,
        private_key=X25519PrivateKey.from_private_bytes(
            bytes.fromhex(vectors["kx_teammate_private_hex"])
        ),
        subscribe=REFERENCE,
    ).proof
    replayed = answer_offer(identity, root=root, offer=other_offer, proof=other_proof).answer
    # A low-order ephemeral key, well signed by the host: the DH secret would be all zeros.
    low_order = bytes(EPHEMERAL_KEY_SIZE)
    low_transcript = full_transcript_hash(offer, proof, identity.public_key, low_order)
    weak = identity.public_key + low_order + identity.sign(answer_signed_message(low_transcript))
    return {
        "genuine": {},
        "host id": {"host_id": derive_host_id(forger.public_key)},
        "role": {"role": "view"},
        "name": {"name": "Alice"},
        "salt": {"salt": _flip(offer.salt, 0).hex()},
        "teammate kx": {"teammate_private": bytes(range(0x10, 0x30)).hex()},
        "early subscribe": {"sub_after": "40"},
        "early subscribe's conversation": {"sub_conversation": "c-0002"},
        "proof": {"root": _flip(root, 0).hex()},
        "host public key": {"answer": _flip(answer, 0).hex()},
        "another key's signature": {"answer": forged.hex()},
        "host kx": {"answer": _flip(answer, host_key_at).hex()},
        "signature": {"answer": _flip(answer, len(answer) - 1).hex()},
        "answer of another channel": {"answer": replayed.hex()},
        "low-order host kx": {"answer": weak.hex()},
        "old host nonce": {"answer": bytes(16).hex()},
        "short answer": {"answer": answer[:-1].hex()},
        "long answer": {"answer": (answer + b"\0").hex()},
        "empty answer": {"answer": ""},
    }


def test_an_answer_to_any_other_transcript_is_refused_as_python_refuses_it(
    page: Page, static_server: str, page_log: PageLog
) -> None:
    vectors = load_vectors()
    cases = _opening_cases(vectors)
    open_blank(page, static_server)
    got = dict(zip(cases, page.evaluate(OPENINGS, [vectors, list(cases.values())]), strict=True))
    expected = {name: _python_outcome(vectors, change) for name, change in cases.items()}
    assert got == expected
    not_signed = "OpeningError 4003: the answer is not signed by the host"
    not_host = "OpeningError 4003: the answer is not from the host"
    malformed = "OpeningError 4000: the host's answer is malformed"
    assert got == {
        "genuine": "accepted",
        "host id": not_host,
        "role": not_signed,
        "name": not_signed,
        "salt": not_signed,
        "teammate kx": not_signed,
        "early subscribe": not_signed,
        "early subscribe's conversation": not_signed,
        "proof": not_signed,
        "host public key": not_host,
        "another key's signature": not_host,
        "host kx": not_signed,
        "signature": not_signed,
        "answer of another channel": not_signed,
        "low-order host kx": "OpeningError 4003: unusable ephemeral key",
        "old host nonce": malformed,
        "short answer": malformed,
        "long answer": malformed,
        "empty answer": malformed,
    }
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


# Runs in the page: the offer hash (TH1) and proof of the vectors' opening under several names.
NAMED_OFFERS = """
async ([v, names]) => {
  const c = await import("/static/crypto.js");
  const root = c.fromHex(v.root_hex);
  const out = [];
  const subscribe = { after: Number(v.kx_sub_after), conversation: v.kx_sub_conversation };
  for (const name of names) {
    const opening = await c.TeammateOpening.create({ root, hostId: v.host_id,
      role: v.role, name, salt: c.fromHex(v.salt_hex),
      keyPair: await c.x25519KeyPair(c.fromHex(v.kx_teammate_private_hex)), subscribe });
    out.push([c.toHex(opening.offerHash), c.toHex(opening.proof)]);
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


def test_names_are_bound_into_the_transcript_as_utf8(page: Page, static_server: str) -> None:
    vectors = load_vectors()
    open_blank(page, static_server)
    names = ["alice", "Zoë", "張偉", "😀 party", "x\u0301", "a" * 64]
    got = page.evaluate(NAMED_OFFERS, [vectors, names])
    private = X25519PrivateKey.from_private_bytes(bytes.fromhex(vectors["kx_teammate_private_hex"]))
    expected = []
    for name in names:
        opening = TeammateOpening(
            root=bytes.fromhex(vectors["root_hex"]),
            host_id=vectors["host_id"],
            role=vectors["role"],
            name=name,
            salt=bytes.fromhex(vectors["salt_hex"]),
            private_key=private,
            subscribe=REFERENCE,
        )
        expected.append([opening.offer.transcript_hash().hex(), opening.proof.hex()])
    assert got == expected
    assert got[0] == [vectors["kx_offer_hash_hex"], vectors["kx_proof_hex"]]
    assert len({value for pair in got for value in pair}) == 2 * len(names)


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
