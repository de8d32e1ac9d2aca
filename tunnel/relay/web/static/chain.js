// The log's audit chain (docs/log.md, "The audit chain"): an item's canonical bytes and hash, and
// the host's signed chain head, checked with WebCrypto; `ChainCheck` says how far the items this
// page holds are what the host's key signed. The same bytes as tunnel/log/chain.py, checked
// against tests/vectors/chain.json.

import { b64urlDecode, deriveHostId, fromHex, toHex } from "./crypto.js";
import { HEAD_SIGN_LABEL } from "./wire.js";

const encoder = new TextEncoder();
const HASH_SIZE = 32;
// What the host sends instead of an item too large for a message (tunnel/app/entries.py): its
// hash cannot be computed from it.
const CUT_NOTE = "item too large to send";

/**
 * The canonical JSON of a value (RFC 8785): keys sorted by UTF-16 code units (what `sort()`
 * compares), no whitespace, strings and numbers as `JSON.stringify` writes them, a BigInt (a
 * 64-bit integer) in exact decimal.
 */
export function canonicalJson(value) {
  if (value === null) return "null";
  switch (typeof value) {
    case "boolean":
      return value ? "true" : "false";
    case "number":
      if (!Number.isFinite(value)) throw new TypeError("a number that is not finite");
      return JSON.stringify(value);
    case "bigint":
      return value.toString();
    case "string":
      return JSON.stringify(value);
    case "object":
      if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
      if (value instanceof Uint8Array) throw new TypeError("bytes have no canonical JSON");
      return `{${Object.keys(value).sort()
        .map((key) => `${JSON.stringify(key)}:${canonicalJson(value[key])}`).join(",")}}`;
    default:
      throw new TypeError(`${typeof value} has no canonical JSON`);
  }
}

/** An item's canonical bytes: its stored fields (wire form) and `prev`, the hex hash before. */
export function canonicalBytes(wire, prevHex) {
  return encoder.encode(canonicalJson({
    conversation_id: wire.conversation_id,
    seq: wire.seq,
    type: wire.type,
    status: wire.status ?? null,
    response_id: wire.response_id ?? null,
    created_at: wire.created_at,
    created_by: wire.created_by,
    data: wire.data,
    prev: prevHex,
  }));
}

/** The item's hash (hex): SHA-256 of its canonical bytes. */
export async function itemHash(wire, prevHex) {
  return toHex(new Uint8Array(await crypto.subtle.digest("SHA-256", canonicalBytes(wire, prevHex))));
}

/** What the host signs: label ‖ host id ‖ seq (8 bytes, big-endian) ‖ head ‖ conversation id. */
export function headMessage(hostId, conversationId, seq, head) {
  const label = encoder.encode(HEAD_SIGN_LABEL);
  const id = encoder.encode(hostId);
  const conversation = encoder.encode(conversationId);
  const message = new Uint8Array(label.length + id.length + 8 + head.length + conversation.length);
  message.set(label, 0);
  message.set(id, label.length);
  new DataView(message.buffer).setBigUint64(label.length + id.length, BigInt(seq));
  message.set(head, label.length + id.length + 8);
  message.set(conversation, label.length + id.length + 8 + head.length);
  return message;
}

/**
 * True if `head` (a `head` event's data, or an export's signature record) is signed by the key
 * of `hostId`: the public key must hash to it. Never throws.
 */
export async function verifyHead(head, hostId) {
  try {
    if (head.host_id !== hostId || !Number.isSafeInteger(head.seq) || head.seq < 0) return false;
    const publicKey = b64urlDecode(head.public_key);
    if (await deriveHostId(publicKey) !== hostId) return false;
    const hash = fromHex(head.hash);
    if (hash.length !== HASH_SIZE) return false;
    const key = await crypto.subtle.importKey("raw", publicKey, "Ed25519", false, ["verify"]);
    return await crypto.subtle.verify("Ed25519", key, b64urlDecode(head.signature),
      headMessage(hostId, String(head.conversation_id), head.seq, hash));
  } catch {
    return false;
  }
}

// An integer beyond 2^53 reaches the page rounded (its msgpack decoding gives a Number), so an
// item holding one cannot be hashed as the host did: such an item leaves the chain unchecked,
// not failed. Items hold integers within 64 bits, so a larger number is a float, hashed exactly;
// a whole float within that range reads the same as such an integer, which matters only once a
// hash differs.
const WIDEST_INTEGER = 2 ** 64;

function holdsWideInteger(value) {
  if (typeof value === "number") {
    return !Number.isSafeInteger(value) && Number.isInteger(value) && Math.abs(value) <= WIDEST_INTEGER;
  }
  if (value && typeof value === "object") return Object.values(value).some(holdsWideInteger);
  return false;
}

function isCut(wire) {
  return wire.data?.truncated === true && wire.data?.note === CUT_NOTE;
}

/**
 * How far the items a page holds are vouched for by the host's signed head. Feed it every item
 * as it arrives (`item`, a copy is kept: the view may annotate its own), every `head` event's
 * data (`setHead`), and ask `check()`: `{state, from, to, reason}` with state `verified` (items `from`
 * to `to`), `failed` (`reason`), `unsigned` (no head yet), or `unchecked` (`reason`: what this
 * page cannot check, such as an item cut for size or one it does not hold).
 */
export class ChainCheck {
  constructor(hostId) {
    this.hostId = hostId;
    this.reset();
  }

  /** Forget the conversation (the page starts over). */
  reset() {
    this.items = new Map();
    this.anchors = new Map();
    this.head = null;
  }

  item(wire) {
    if (wire && Number.isSafeInteger(wire.seq)) this.items.set(wire.seq, structuredClone(wire));
  }

  setHead(data) {
    if (!data || typeof data !== "object") return;
    const anchor = data.anchor;
    if (anchor && Number.isSafeInteger(anchor.seq) && typeof anchor.hash === "string") {
      this.anchors.set(anchor.seq, anchor.hash);
    }
    if (this.head === null || !(data.seq < this.head.seq)) this.head = data;
  }

  async check() {
    const head = this.head;
    if (head === null) return { state: "unsigned" };
    if (!(await verifyHead(head, this.hostId))) {
      return { state: "failed", reason: "the signature is not the host's" };
    }
    if (!this.items.has(head.seq)) {
      return { state: "unchecked", reason: `item ${head.seq} is not on this page yet` };
    }
    // The run of items held up to the signed one, and the first of it whose predecessor's hash
    // is known (seq 0 has none).
    let first = head.seq;
    while (this.items.has(first - 1)) first -= 1;
    while (first <= head.seq && first !== 0 && !this.anchors.has(first - 1)) first += 1;
    if (first > head.seq) {
      return { state: "unchecked", reason: "the hash the items chain from is not known" };
    }
    let prev = first === 0 ? null : this.anchors.get(first - 1);
    for (let seq = first; seq <= head.seq; seq += 1) {
      const wire = this.items.get(seq);
      if (isCut(wire)) return { state: "unchecked", reason: `item ${seq} was too large to send` };
      try {
        prev = await itemHash(wire, prev);
      } catch {
        return { state: "unchecked", reason: `item ${seq} holds a value this page cannot hash` };
      }
    }
    if (prev !== head.hash) {
      for (let seq = first; seq <= head.seq; seq += 1) {
        if (holdsWideInteger(this.items.get(seq).data)) {
          return { state: "unchecked", reason: `item ${seq} holds an integer beyond 2^53` };
        }
      }
      return { state: "failed", reason: "the items differ from what the host signed" };
    }
    return { state: "verified", from: first, to: head.seq };
  }
}
