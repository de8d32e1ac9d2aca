// End-to-end crypto of the browser client, byte for byte the scheme of docs/security.md:
// token and root from the role secret (HKDF-SHA256, salt = host id); each channel's keys from the
// opening (TeammateOpening: an ephemeral X25519 exchange whose transcript the host signs, as
// tunnel.e2e.opening does it); AES-256-GCM with a 12-byte big-endian counter nonce per direction
// and the host id as additional data. Only WebCrypto is used; it exists only in a secure context.
// Sizes, labels and roles are Python's, through wire.js. The broadcast's casts (docs/security.md,
// "The broadcast") are opened by CastOpener, as tunnel.e2e.broadcast.CastOpener opens them.

import {
  ANSWER_SIGN_LABEL,
  ANSWER_SIZE,
  CloseCode,
  COUNTER_SIZE,
  DOWN_INFO,
  E2E_INFO,
  EPHEMERAL_KEY_SIZE,
  EPOCH_SIZE,
  HOST_ID_LENGTH,
  HOST_ID_PATTERN,
  KEY_SIZE,
  NONCE_SIZE,
  PROOF_INFO,
  PROOF_SIZE,
  PUBLIC_KEY_SIZE,
  RELAY_TOKEN_INFO,
  ROLES,
  SALT_SIZE,
  SECRET_SIZE,
  SIGN_LABEL,
  SIGNATURE_SIZE,
  TAG_SIZE,
  TRANSCRIPT_LABEL,
  UP_INFO,
} from "./wire.js";

const encoder = new TextEncoder();

/** The error a message that does not authenticate raises; the link closes with `code`. */
export class DecryptionError extends Error {
  constructor(message = "message did not decrypt") {
    super(message);
    this.name = "DecryptionError";
    this.code = CloseCode.DECRYPTION_FAILED;
  }
}

/** The error a share link that is not `#<role>.<secret>` raises. */
export class BadLinkError extends Error {
  constructor(message) {
    super(message);
    this.name = "BadLinkError";
  }
}

/** True when this page may use WebCrypto (https, or localhost / 127.0.0.1). */
export function cryptoAvailable() {
  return Boolean(globalThis.isSecureContext && globalThis.crypto && globalThis.crypto.subtle);
}

const B64URL = /^[A-Za-z0-9_-]*$/;

/** Strict base64url without padding: any other character or a non-canonical tail is refused. */
export function b64urlDecode(text) {
  if (!B64URL.test(text) || text.length % 4 === 1) {
    throw new BadLinkError("not base64url");
  }
  const std = text.replace(/-/g, "+").replace(/_/g, "/");
  const padded = std + "=".repeat((4 - (std.length % 4)) % 4);
  let binary;
  try {
    binary = atob(padded);
  } catch {
    throw new BadLinkError("not base64url");
  }
  const bytes = Uint8Array.from(binary, (ch) => ch.charCodeAt(0));
  if (b64urlEncode(bytes) !== text) {
    // Unused low bits set: another encoder would not produce this text.
    throw new BadLinkError("not canonical base64url");
  }
  return bytes;
}

export function b64urlEncode(bytes) {
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

export function toHex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

export function fromHex(hex) {
  if (hex.length % 2 !== 0 || !/^[0-9a-fA-F]*$/.test(hex)) throw new Error("not hex");
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

/** The role and secret of a URL fragment `#<role>.<b64url secret>`; BadLinkError otherwise. */
export function parseFragment(fragment) {
  const text = fragment.startsWith("#") ? fragment.slice(1) : fragment;
  const dot = text.indexOf(".");
  if (dot < 0) throw new BadLinkError("the link has no secret after '#'");
  const role = text.slice(0, dot);
  if (!ROLES.includes(role)) throw new BadLinkError("the link's role is neither view nor drive");
  const secret = b64urlDecode(text.slice(dot + 1));
  if (secret.length !== SECRET_SIZE) throw new BadLinkError("the link's secret has the wrong length");
  return { role, secret };
}

const HOST_ID = new RegExp(`^(?:${HOST_ID_PATTERN})$`);

/** The host id of a page path `/h/<host_id>`, or null. */
export function hostIdFromPath(pathname) {
  const match = /^\/h\/([^/]+)\/?$/.exec(pathname);
  return match && HOST_ID.test(match[1]) ? match[1] : null;
}

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((total, part) => total + part.length, 0));
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.length;
  }
  return out;
}

// `info` is a string (UTF-8 encoded here) or bytes.
async function hkdf(keyBytes, salt, info) {
  const key = await crypto.subtle.importKey("raw", keyBytes, "HKDF", false, ["deriveBits"]);
  const infoBytes = typeof info === "string" ? encoder.encode(info) : info;
  const bits = await crypto.subtle.deriveBits(
    { name: "HKDF", hash: "SHA-256", salt, info: infoBytes },
    key,
    KEY_SIZE * 8,
  );
  return new Uint8Array(bits);
}

/** The token shown to the relay: HKDF(secret, salt=host id, info=RELAY_TOKEN_INFO). */
export function relayToken(secret, hostId) {
  return hkdf(secret, encoder.encode(hostId), RELAY_TOKEN_INFO);
}

/** sha256(token): what the host registers with the relay. */
export async function tokenVerifier(token) {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", token));
}

/** The end-to-end root key; it never leaves the endpoints. */
export function e2eRoot(secret, hostId) {
  return hkdf(secret, encoder.encode(hostId), E2E_INFO);
}

// 2**53 - 1: the largest counter a JS number holds exactly; far beyond any real channel.
const MAX_COUNTER = Number.MAX_SAFE_INTEGER;

// The counter, big-endian, in the last 8 of the nonce's bytes; the ones before stay zero.
function counterNonce(counter) {
  const nonce = new Uint8Array(NONCE_SIZE);
  const view = new DataView(nonce.buffer);
  view.setUint32(NONCE_SIZE - 8, Math.floor(counter / 2 ** 32));
  view.setUint32(NONCE_SIZE - 4, counter >>> 0);
  return nonce;
}

const TAG_BITS = TAG_SIZE * 8;

/**
 * One direction of one channel. Calls must be made one at a time, in wire order: the nonce is
 * the count of messages before this one. After a failed decrypt the cipher is dead.
 */
export class ChannelCipher {
  static async create(keyBytes, hostId) {
    const usages = ["encrypt", "decrypt"];
    const key = await crypto.subtle.importKey("raw", keyBytes, "AES-GCM", false, usages);
    return new ChannelCipher(key, hostId);
  }

  constructor(key, hostId) {
    this.key = key;
    this.aad = encoder.encode(hostId);
    this.counter = 0;
    this.dead = false;
  }

  async encrypt(plaintext) {
    if (this.counter >= MAX_COUNTER) throw new Error("channel message counter exhausted");
    const iv = counterNonce(this.counter++);
    const params = { name: "AES-GCM", iv, additionalData: this.aad, tagLength: TAG_BITS };
    return new Uint8Array(await crypto.subtle.encrypt(params, this.key, plaintext));
  }

  async decrypt(ciphertext) {
    if (this.dead) throw new DecryptionError("an earlier message did not decrypt");
    if (this.counter >= MAX_COUNTER) {
      this.dead = true;
      throw new DecryptionError("channel message counter exhausted");
    }
    const iv = counterNonce(this.counter++);
    const params = { name: "AES-GCM", iv, additionalData: this.aad, tagLength: TAG_BITS };
    try {
      return new Uint8Array(await crypto.subtle.decrypt(params, this.key, ciphertext));
    } catch {
      this.dead = true;
      throw new DecryptionError();
    }
  }
}

export function randomSalt() {
  return crypto.getRandomValues(new Uint8Array(SALT_SIZE));
}

// --- The channel opening (docs/security.md, "Opening a channel"; tunnel/e2e/opening.py) -----

/**
 * An opening that must not go on: the link closes the channel with `code`, 4000 for an answer
 * of the wrong shape (a host of another protocol version), 4003 for one that is not the host's.
 * The message is Python's for the same case: short, safe to send as the close reason, and it
 * never echoes what was received.
 */
export class OpeningError extends Error {
  constructor(code, message) {
    super(message);
    this.name = "OpeningError";
    this.code = code;
  }
}

const MAX_FIELD_SIZE = 0xffff;

// One transcript field: its length (2 bytes, big-endian), then its bytes; a string as UTF-8
// (the host id and the role are ASCII, so as ASCII).
function field(value) {
  const bytes = typeof value === "string" ? encoder.encode(value) : value;
  if (!(bytes instanceof Uint8Array) || bytes.length > MAX_FIELD_SIZE) {
    throw new TypeError("a transcript field is a string or at most 65535 bytes");
  }
  const out = new Uint8Array(2 + bytes.length);
  new DataView(out.buffer).setUint16(0, bytes.length);
  out.set(bytes, 2);
  return out;
}

async function sha256(...parts) {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", concat(...parts)));
}

/**
 * What the transcript holds of an early subscribe `{after, tail, conversation}` (the `open` meta
 * `sub`), as tunnel.e2e.opening.EarlySubscribe.transcript_field: `after=N`, `tail=N` or `fresh`,
 * then `;conversation=ID` when it names one; the empty string when the open carries none.
 */
export function subscribeField(subscribe) {
  if (subscribe === null || subscribe === undefined) return "";
  const { after = null, tail = null, conversation = null } = subscribe;
  let text = after !== null ? `after=${after}` : tail !== null ? `tail=${tail}` : "fresh";
  if (conversation !== null) text += `;conversation=${conversation}`;
  return text;
}

/** The `open` meta's `sub` of an early subscribe: only the fields that are set. */
export function subscribeMeta({ after = null, tail = null, conversation = null }) {
  const sub = {};
  if (after !== null) sub.after = after;
  if (tail !== null) sub.tail = tail;
  if (conversation !== null) sub.conversation = conversation;
  return sub;
}

/**
 * TH1, the hash of the teammate's offer: SHA-256 of the label and every field of the `open`,
 * each length-prefixed, in this order: host id, role, name, salt, the teammate's ephemeral key,
 * the early subscribe (`subscribeField`).
 */
export function hashOffer({ hostId, role, name, salt, teammateKey, subscribe = null }) {
  const fields = [TRANSCRIPT_LABEL, hostId, role, name, salt, teammateKey,
    subscribeField(subscribe)];
  return sha256(...fields.map(field));
}

/** The key the teammate's proof is made with: HKDF(root, salt = empty, info = PROOF_INFO). */
export function proofKey(root) {
  return hkdf(root, new Uint8Array(0), PROOF_INFO);
}

/** The teammate's proof that it holds the role root: HMAC-SHA256(proof key, TH1). */
export async function makeProof(root, offerHash) {
  const params = { name: "HMAC", hash: "SHA-256" };
  const key = await crypto.subtle.importKey("raw", await proofKey(root), params, false, ["sign"]);
  return new Uint8Array(await crypto.subtle.sign("HMAC", key, offerHash));
}

/**
 * TH2 = SHA-256(TH1 ‖ f(proof) ‖ f(host public key) ‖ f(host ephemeral key)): what the host
 * signs and what the channel keys are bound to.
 */
export function hashTranscript(offerHash, proof, hostPublicKey, hostKey) {
  return sha256(offerHash, field(proof), field(hostPublicKey), field(hostKey));
}

/** What the host's answer signs: ANSWER_SIGN_LABEL ‖ TH2. */
export function answerSignedMessage(transcriptHash) {
  return concat(encoder.encode(ANSWER_SIGN_LABEL), transcriptHash);
}

/**
 * [k_up, k_down] of one channel ("up" is teammate to host): HKDF over the X25519 secret with the
 * role root as salt, info = UP_INFO or DOWN_INFO ‖ TH2. Either secret alone makes no key.
 */
export async function channelKeys(root, shared, transcriptHash) {
  for (const bytes of [root, shared]) {
    if (!(bytes instanceof Uint8Array) || bytes.length !== KEY_SIZE) {
      throw new TypeError(`a root and a shared secret are ${KEY_SIZE} bytes each`);
    }
  }
  return [
    await hkdf(shared, root, concat(encoder.encode(UP_INFO), transcriptHash)),
    await hkdf(shared, root, concat(encoder.encode(DOWN_INFO), transcriptHash)),
  ];
}

// WebCrypto takes a given X25519 private key only as PKCS#8 (RFC 8410): this DER header, then
// the key's 32 bytes.
const X25519_PKCS8_HEADER = fromHex("302e020100300506032b656e04220420");
const X25519 = { name: "X25519" };

/**
 * An ephemeral X25519 key pair: `{privateKey}`, a CryptoKey that cannot be exported, and
 * `{publicKey}`, its raw 32 bytes. Fresh, unless `privateBytes` (32 bytes) are given, which only
 * the test vectors do.
 */
export async function x25519KeyPair(privateBytes = null) {
  if (privateBytes === null) {
    const pair = await crypto.subtle.generateKey(X25519, false, ["deriveBits"]);
    const publicKey = new Uint8Array(await crypto.subtle.exportKey("raw", pair.publicKey));
    return { privateKey: pair.privateKey, publicKey };
  }
  if (!(privateBytes instanceof Uint8Array) || privateBytes.length !== EPHEMERAL_KEY_SIZE) {
    throw new TypeError(`an X25519 private key is ${EPHEMERAL_KEY_SIZE} bytes`);
  }
  const pkcs8 = concat(X25519_PKCS8_HEADER, privateBytes);
  // WebCrypto computes no public key from a private one; its JWK export carries it as `x`.
  const exportable = await crypto.subtle.importKey("pkcs8", pkcs8, X25519, true, ["deriveBits"]);
  const { x } = await crypto.subtle.exportKey("jwk", exportable);
  const privateKey = await crypto.subtle.importKey("pkcs8", pkcs8, X25519, false, ["deriveBits"]);
  return { privateKey, publicKey: b64urlDecode(x) };
}

/**
 * The X25519 secret of `privateKey` (a CryptoKey) and another's raw `publicKey`; OpeningError
 * 4003 for a key that is not 32 bytes or a low-order point (an all-zero secret, which Python's
 * `cryptography` refuses too), never a raw exception.
 */
export async function sharedSecret(privateKey, publicKey) {
  let shared;
  try {
    const other = await crypto.subtle.importKey("raw", publicKey, X25519, false, []);
    const params = { name: "X25519", public: other };
    shared = new Uint8Array(await crypto.subtle.deriveBits(params, privateKey, KEY_SIZE * 8));
  } catch {
    shared = null;
  }
  if (shared === null || shared.every((byte) => byte === 0)) {
    throw new OpeningError(CloseCode.DECRYPTION_FAILED, "unusable ephemeral key");
  }
  return shared;
}

/**
 * The teammate's side of one opening, as tunnel.e2e.opening.TeammateOpening: `meta()` is the
 * `open` meta, then `finish(answer)` checks the host's answer and makes the channel's ciphers.
 * It holds its ephemeral private key only until `finish`, which drops it, whatever the answer.
 */
export class TeammateOpening {
  /**
   * `root` is the role's e2e root; `name` exactly the string the hello and the open carry.
   * `salt` and `keyPair` (x25519KeyPair) are fresh unless given, which only the test vectors do.
   */
  static async create({ root, hostId, role, name, salt = randomSalt(), keyPair = null,
    subscribe = null }) {
    if (!ROLES.includes(role)) throw new TypeError("the role is neither view nor drive");
    if (typeof hostId !== "string" || !HOST_ID.test(hostId)) throw new TypeError("not a host id");
    if (typeof name !== "string") throw new TypeError("a name is a string");
    if (!(root instanceof Uint8Array) || root.length !== KEY_SIZE) {
      throw new TypeError(`a root is ${KEY_SIZE} bytes`);
    }
    if (!(salt instanceof Uint8Array) || salt.length !== SALT_SIZE) {
      throw new TypeError(`a channel salt is ${SALT_SIZE} bytes`);
    }
    const pair = keyPair ?? await x25519KeyPair();
    const offer = { hostId, role, name, salt: salt.slice(), teammateKey: pair.publicKey,
      subscribe };
    const offerHash = await hashOffer(offer);
    const proof = await makeProof(root, offerHash);
    return new TeammateOpening({ root, offer, offerHash, proof, privateKey: pair.privateKey });
  }

  constructor({ root, offer, offerHash, proof, privateKey }) {
    Object.assign(this, { root, offer, offerHash, proof, privateKey });
  }

  /**
   * The `open` meta: role, name, salt, the ephemeral key `kx`, the `proof`, and the early
   * subscribe `sub` when there is one.
   */
  meta() {
    const { role, name, salt, teammateKey, subscribe } = this.offer;
    const meta = { role, name, salt, kx: teammateKey, proof: this.proof };
    if (subscribe !== null) meta.sub = subscribeMeta(subscribe);
    return meta;
  }

  /**
   * The channel's ciphers `{send, receive}` (send up, receive down), once `answer` (the host's
   * first message on the channel) checks out: its public key hashes to the link's host id, and
   * its signature verifies over TH2, computed here from this opening's own offer and `kx`.
   * OpeningError otherwise: 4000 for an answer of the wrong size, 4003 for the wrong key, a
   * signature that does not verify or an unusable ephemeral key.
   */
  async finish(answer) {
    const privateKey = this.privateKey;
    // Forward secrecy: the private key is forgotten as soon as it has been offered an answer.
    this.privateKey = null;
    if (privateKey === null) throw new Error("this opening is finished");
    if (!(answer instanceof Uint8Array) || answer.length !== ANSWER_SIZE) {
      throw new OpeningError(CloseCode.PROTOCOL_ERROR, "the host's answer is malformed");
    }
    const publicKey = answer.slice(0, PUBLIC_KEY_SIZE);
    const hostKey = answer.slice(PUBLIC_KEY_SIZE, PUBLIC_KEY_SIZE + EPHEMERAL_KEY_SIZE);
    const signature = answer.slice(PUBLIC_KEY_SIZE + EPHEMERAL_KEY_SIZE);
    const { hostId } = this.offer;
    if (await deriveHostId(publicKey) !== hostId) {
      throw new OpeningError(CloseCode.DECRYPTION_FAILED, "the answer is not from the host");
    }
    const transcriptHash = await hashTranscript(this.offerHash, this.proof, publicKey, hostKey);
    let verified;
    try {
      const key = await crypto.subtle.importKey("raw", publicKey, "Ed25519", false, ["verify"]);
      const signed = answerSignedMessage(transcriptHash);
      verified = await crypto.subtle.verify("Ed25519", key, signature, signed);
    } catch {
      // 32 bytes that hash to the host id but are no point on the curve.
      verified = false;
    }
    if (!verified) {
      throw new OpeningError(CloseCode.DECRYPTION_FAILED, "the answer is not signed by the host");
    }
    const shared = await sharedSecret(privateKey, hostKey);
    const [up, down] = await channelKeys(this.root, shared, transcriptHash);
    return {
      send: await ChannelCipher.create(up, hostId),
      receive: await ChannelCipher.create(down, hostId),
    };
  }
}

const CAST_HEAD_SIZE = EPOCH_SIZE + COUNTER_SIZE;
// What a cast adds to its plaintext: epoch, counter, GCM tag, signature.
const CAST_OVERHEAD = CAST_HEAD_SIZE + TAG_SIZE + SIGNATURE_SIZE;
// The AES-GCM nonce is the counter after this many zero bytes.
const CAST_NONCE_PAD = new Uint8Array(NONCE_SIZE - COUNTER_SIZE);
const BASE32 = "abcdefghijklmnopqrstuvwxyz234567";

// RFC 4648 base32, lowercase, no padding: the host id's alphabet.
function base32(bytes) {
  let out = "";
  let value = 0;
  let bits = 0;
  for (const byte of bytes) {
    value = ((value << 8) | byte) & 0xfff;
    bits += 8;
    while (bits >= 5) {
      bits -= 5;
      out += BASE32[(value >> bits) & 31];
    }
  }
  return bits > 0 ? out + BASE32[(value << (5 - bits)) & 31] : out;
}

/**
 * The host id of a raw Ed25519 public key, as tunnel.e2e.identity.derive_host_id: the first
 * HOST_ID_LENGTH characters of the lowercase base32 of its SHA-256.
 */
export async function deriveHostId(publicKey) {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", publicKey));
  return base32(digest).slice(0, HOST_ID_LENGTH);
}

function sameBytes(a, b) {
  return a.length === b.length && a.every((byte, index) => byte === b[index]);
}

/** A cast or a broadcast key was refused; the message never echoes what was received. */
export class CastError extends Error {
  constructor(message) {
    super(message);
    this.name = "CastError";
  }
}

/**
 * A teammate's side of one epoch of the host's broadcast: opens its casts in order, from
 * `counter` on. A cast is epoch || counter (8, big-endian) || AES-256-GCM(K) || Ed25519
 * signature; it is accepted only of this epoch, with exactly the next counter, signed by the
 * host's key (verified before anything is decrypted) and intact. After any refusal every later
 * `open` fails too: the teammate then catches up by cursor on its channel (docs/application.md,
 * "The broadcast").
 */
export class CastOpener {
  /**
   * The opener of a `broadcast` message's epoch; CastError when `publicKey` does not hash to
   * `hostId` (the channel is not the host's) or a field is malformed. `counter` is the number of
   * the next cast; beyond 2**53 - 1 it is refused, an epoch that the host ends long before.
   */
  static async create({ hostId, publicKey, epoch, key, counter }) {
    if (!(publicKey instanceof Uint8Array) || publicKey.length !== PUBLIC_KEY_SIZE ||
      await deriveHostId(publicKey) !== hostId) {
      throw new CastError("the broadcast's public key is not this host's");
    }
    if (!(epoch instanceof Uint8Array) || epoch.length !== EPOCH_SIZE ||
      !(key instanceof Uint8Array) || key.length !== KEY_SIZE) {
      throw new CastError("malformed broadcast key");
    }
    if (!Number.isSafeInteger(counter) || counter < 0) {
      throw new CastError("malformed broadcast counter");
    }
    let verifyKey;
    try {
      verifyKey = await crypto.subtle.importKey("raw", publicKey, "Ed25519", false, ["verify"]);
    } catch {
      // 32 bytes that are not a point on the curve.
      throw new CastError("the broadcast's public key is not this host's");
    }
    const aesKey = await crypto.subtle.importKey("raw", key, "AES-GCM", false, ["decrypt"]);
    return new CastOpener({ hostId, verifyKey, aesKey, epoch: epoch.slice(), counter });
  }

  constructor({ hostId, verifyKey, aesKey, epoch, counter }) {
    this.hostId = encoder.encode(hostId);
    this.label = encoder.encode(SIGN_LABEL);
    this.verifyKey = verifyKey;
    this.aesKey = aesKey;
    this.epoch = epoch;
    // A BigInt: the wire counter has 64 bits.
    this.next = BigInt(counter);
    this.dead = false;
    // The open before the latest call; each waits for it, so WebCrypto's promises cannot
    // reorder casts. As long as the calls in flight, which the link's inbox bounds.
    this.previous = Promise.resolve();
  }

  /** The counter the next cast must have. */
  get counter() {
    return this.next;
  }

  /**
   * The plaintext of `cast` (a Uint8Array), or CastError. Casts are opened in the order of the
   * calls, whether or not the caller waits for each.
   */
  open(cast) {
    const opened = this.previous.then(() => this.openNext(cast));
    this.previous = opened.catch(() => {});
    return opened;
  }

  async openNext(cast) {
    if (this.dead) throw new CastError("the broadcast failed earlier");
    this.dead = true; // until this cast proves good
    if (!(cast instanceof Uint8Array) || cast.length < CAST_OVERHEAD) {
      throw new CastError("a cast too short");
    }
    const epoch = cast.subarray(0, EPOCH_SIZE);
    const counter = cast.subarray(EPOCH_SIZE, CAST_HEAD_SIZE);
    if (!sameBytes(epoch, this.epoch)) throw new CastError("a cast of another epoch");
    const view = new DataView(counter.buffer, counter.byteOffset, COUNTER_SIZE);
    if (view.getBigUint64(0) !== this.next) {
      throw new CastError("a cast out of order (replayed, reordered or one missing)");
    }
    const sealed = cast.subarray(CAST_HEAD_SIZE, cast.length - SIGNATURE_SIZE);
    const signature = cast.subarray(cast.length - SIGNATURE_SIZE);
    const signed = concat(this.label, this.hostId, epoch, counter, sealed);
    let plaintext;
    try {
      if (!await crypto.subtle.verify("Ed25519", this.verifyKey, signature, signed)) {
        throw new CastError("unsigned");
      }
      const params = {
        name: "AES-GCM",
        iv: concat(CAST_NONCE_PAD, counter),
        additionalData: concat(this.hostId, epoch, counter),
        tagLength: TAG_BITS,
      };
      plaintext = new Uint8Array(await crypto.subtle.decrypt(params, this.aesKey, sealed));
    } catch {
      throw new CastError("a cast that the host did not sign");
    }
    this.next += 1n;
    this.dead = false;
    return plaintext;
  }
}
