// End-to-end crypto of the browser client, byte for byte the scheme of docs/security.md:
// token and root from the role secret (HKDF-SHA256, salt = host id), per-channel keys from the
// root, the open's salt, the host's nonce and the teammate's name, AES-256-GCM with a 12-byte
// big-endian counter nonce per direction and the host id as additional data. Only WebCrypto is
// used; it exists only in a secure context. Sizes, labels and roles are tunnel.e2e.crypto's,
// through wire.js. The broadcast's casts (docs/security.md, "The broadcast") are opened by
// CastOpener, as tunnel.e2e.broadcast.CastOpener opens them.

import {
  CloseCode,
  COUNTER_SIZE,
  DOWN_INFO,
  E2E_INFO,
  EPOCH_SIZE,
  HOST_ID_LENGTH,
  HOST_ID_PATTERN,
  KEY_SIZE,
  NONCE_SIZE,
  PUBLIC_KEY_SIZE,
  RELAY_TOKEN_INFO,
  ROLES,
  SALT_SIZE,
  SECRET_SIZE,
  SIGN_LABEL,
  SIGNATURE_SIZE,
  TAG_SIZE,
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

/**
 * [k_up, k_down] of one channel; "up" is teammate to host. Both ends add fresh randomness (the
 * open's `salt`, the host's `hostNonce`, each SALT_SIZE bytes) and the teammate's display `name`
 * is bound in, so a relay that rewrites the name breaks the channel:
 *   k = HKDF(root, salt = salt || hostNonce, info = "up" | "down" || 0x00 || utf8(name))
 * `name` must be exactly the string sent in the open (see `channelName` in link.js).
 */
export async function channelKeys(root, { salt, hostNonce, name }) {
  if (!(salt instanceof Uint8Array) || salt.length !== SALT_SIZE) {
    throw new TypeError(`a channel salt is ${SALT_SIZE} bytes`);
  }
  if (!(hostNonce instanceof Uint8Array) || hostNonce.length !== SALT_SIZE) {
    throw new TypeError(`a host nonce is ${SALT_SIZE} bytes`);
  }
  if (typeof name !== "string") throw new TypeError("a channel name is a string");
  const channelSalt = concat(salt, hostNonce);
  const bound = concat(Uint8Array.of(0), encoder.encode(name));
  return [
    await hkdf(root, channelSalt, concat(encoder.encode(UP_INFO), bound)),
    await hkdf(root, channelSalt, concat(encoder.encode(DOWN_INFO), bound)),
  ];
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

/**
 * Both directions of one channel, for the teammate: it sends up and receives down.
 * `channel` is `{salt, hostNonce, name}` as for `channelKeys`.
 */
export async function teammateChannelCrypto(secret, hostId, channel) {
  const root = await e2eRoot(secret, hostId);
  const [up, down] = await channelKeys(root, channel);
  return {
    send: await ChannelCipher.create(up, hostId),
    receive: await ChannelCipher.create(down, hostId),
  };
}

export function randomSalt() {
  return crypto.getRandomValues(new Uint8Array(SALT_SIZE));
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
