// The teammate's side of the session channel, with no DOM and no socket: the cursor, the
// snapshot, the host's broadcast, gaps, cuts, catch-up and presence (docs/application.md). The
// page's copy of tunnel/app/follower.py, held to the same facts by tests/vectors/session.json
// (tests/relay/web/test_web_follower.py): the same states, the same table, the same events.
//
// Feed it what arrives, one at a time and in order: `receiveMessage(map)` for a decoded channel
// message, `receiveCast(bytes)` for a cast, `receiveCast(null)` for the relay's `cut`. Each
// gives the events to act on (a promise of them for a cast or a `broadcast` message, whose keys
// work asynchronously); after each, send what `requestsToSend()` returns. An event
// is a plain object with a `type`: "ready", "snapshot_started", "snapshot_page", "item",
// "event", "presence", "history", "error", "following", "catching_up", "skipped". A
// FollowerError says the host broke the protocol: close the channel with its `code`.

import { CastError, CastOpener } from "./crypto.js";
import { decodeCast, decodeHostMessage } from "./link.js";
import { CloseCode } from "./wire.js";

export const ITEM_WHILE_FOLLOWING = "an item on the channel while following the broadcast";
export const SNAPSHOT_WHILE_FOLLOWING = "a snapshot on the channel while following the broadcast";
export const NOT_THE_HOSTS_BROADCAST = "the broadcast is not the host's";
export const NOT_A_HOST_MESSAGE = "a cast holds a message that is not a host message";

/** The host broke the session protocol: close the channel with `code` and `reason`. */
export class FollowerError extends Error {
  constructor(code, reason) {
    super(reason);
    this.name = "FollowerError";
    this.code = code;
    this.reason = reason;
  }
}

const LISTENING = ["channel", "subscribed", "snapshot", "catching_up"];
const STAYS = ["ready", "event", "presence", "history", "error", "other", "held item"];
const CASTS = ["cast", "broken cast", "gap", "cut", "malformed cast"];
const SNAPSHOTS = ["snapshot page", "snapshot end", "reset page", "reset end"];

/**
 * Every (state, input) pair but those of "closed": the next state, or `{code, reason}` for a
 * refusal (the follower is then "closed"). tunnel.app.follower.TRANSITIONS, name for name.
 */
export const TRANSITIONS = (() => {
  const table = {};
  for (const state of [...LISTENING, "broadcast"]) {
    table[state] = {};
    for (const input of STAYS) table[state][input] = state;
    table[state].subscribe = "subscribed";
    table[state].broadcast = "broadcast";
    table[state]["bad broadcast"] = {
      code: CloseCode.DECRYPTION_FAILED, reason: NOT_THE_HOSTS_BROADCAST };
  }
  for (const state of LISTENING) {
    for (const input of CASTS) table[state][input] = state;
    table[state].item = state;
    table[state]["snapshot page"] = "snapshot";
    table[state]["snapshot end"] = "channel";
    table[state]["reset page"] = "snapshot";
    table[state]["reset end"] = "channel";
  }
  table.catching_up["snapshot page"] = "catching_up";
  // A broadcast message answering a subscribe still in flight belongs to the previous one.
  table.subscribed.broadcast = "subscribed";
  table.broadcast.cast = "broadcast";
  for (const input of ["broken cast", "gap", "cut"]) table.broadcast[input] = "catching_up";
  table.broadcast["malformed cast"] = {
    code: CloseCode.PROTOCOL_ERROR, reason: NOT_A_HOST_MESSAGE };
  table.broadcast.item = { code: CloseCode.PROTOCOL_ERROR, reason: ITEM_WHILE_FOLLOWING };
  for (const input of SNAPSHOTS) {
    table.broadcast[input] = { code: CloseCode.PROTOCOL_ERROR, reason: SNAPSHOT_WHILE_FOLLOWING };
  }
  return table;
})();

const CAST_OPS = new Set(["item", "event", "presence"]);

function seqOf(item) {
  return item && typeof item === "object" && Number.isSafeInteger(item.seq) && item.seq >= 0
    ? item.seq : null;
}

const isMap = (value) => value !== null && typeof value === "object" && !Array.isArray(value);

/** A member as the roster keeps it; `verified` (a personal link's name, given by the host) only
 * when the host said so (docs/application.md, "Presence"). */
function rosterMember(m, id) {
  return m.verified === true ? { id, name: m.name, role: m.role, verified: true }
    : { id, name: m.name, role: m.role };
}

const isCount = (value) => Number.isSafeInteger(value) && value >= 0;

function isMember(member, idRequired) {
  if (!isMap(member) || typeof member.name !== "string" || typeof member.role !== "string") {
    return false;
  }
  if (member.id === undefined || member.id === null) return !idRequired;
  return Number.isSafeInteger(member.id) && member.id >= 0;
}

/**
 * What a well-formed message of a known op is, or null: the checks of
 * tunnel.app.host_messages.parse_map that decide what the follower does.
 */
function wellFormed(message) {
  switch (message.op) {
    case "snapshot":
      return Array.isArray(message.items) && Number.isSafeInteger(message.last_seq) &&
        typeof message.more === "boolean";
    case "item":
      return isMap(message.item);
    case "event":
      return isMap(message.event);
    case "presence":
      if (!isCount(message.count)) return false;
      if ("members" in message) {
        return Array.isArray(message.members) && !("joined" in message) && !("left" in message) &&
          message.members.every((m) => isMember(m, false));
      }
      return Array.isArray(message.joined) && Array.isArray(message.left) &&
        !("you" in message) && message.joined.every((m) => isMember(m, true)) &&
        message.left.every((id) => Number.isSafeInteger(id) && id >= 0);
    case "broadcast":
      return message.epoch instanceof Uint8Array && message.key instanceof Uint8Array &&
        message.public_key instanceof Uint8Array && Number.isSafeInteger(message.counter) &&
        message.counter >= 0 && Array.isArray(message.members) &&
        message.members.every((m) => isMember(m, true)) && isCount(message.count) &&
        Number.isSafeInteger(message.you) && message.you >= 0;
    case "ready":
      return typeof message.conversation_id === "string" && isMap(message.agent);
    case "history":
      return Array.isArray(message.items) && Number.isSafeInteger(message.before) &&
        typeof message.more === "boolean";
    case "error":
      return typeof message.code === "string" && typeof message.message === "string";
    default:
      return false;
  }
}

/**
 * Who is attached, by member id: the whole list once, then what changed, and how many are
 * attached in all (the host lists the first ones by name and counts the rest; roster.py).
 */
export class Roster {
  constructor() {
    this.byKey = new Map();
    this.you = null;
    // Everyone attached as the host last counted them; never fewer than are listed.
    this.count = 0;
  }

  /** The members listed, in the order they joined. */
  get members() {
    return [...this.byKey.values()];
  }

  /** Take in one presence message; returns `{joined, left}`: the members it added, removed. */
  apply(message) {
    const change = this.applyList(message);
    this.count = Math.max(message.count, this.byKey.size);
    return change;
  }

  applyList(message) {
    if (Array.isArray(message.members)) {
      const before = this.byKey;
      // A host from before member ids sends only lists: its members are keyed by place.
      this.byKey = new Map(message.members.map((m, n) => [Number.isInteger(m.id) ? m.id : -1 - n,
        rosterMember(m, m.id ?? null)]));
      this.you = Number.isInteger(message.you) ? message.you : null;
      return {
        joined: [...this.byKey].filter(([key]) => !before.has(key)).map(([, m]) => m),
        left: [...before].filter(([key]) => !this.byKey.has(key)).map(([, m]) => m),
      };
    }
    const left = [];
    for (const id of message.left) {
      if (this.byKey.has(id)) {
        left.push(this.byKey.get(id));
        this.byKey.delete(id);
      }
    }
    const joined = [];
    for (const m of message.joined) {
      if (!this.byKey.has(m.id)) {
        const member = rosterMember(m, m.id);
        joined.push(member);
        this.byKey.set(m.id, member);
      }
    }
    return { joined, left };
  }
}

export class Follower {
  /** `hostId`: the host of the link; a `broadcast` message's public key must be its key. */
  constructor({ hostId }) {
    this.hostId = hostId;
    this.state = "channel";
    // The last seq held: every item handed on is after it; null before a fresh join's snapshot.
    this.cursor = null;
    this.roster = new Roster();
    this.opener = null;
    this.fresh = false;
    this.requests = [];
    this.stats = { items: 0, duplicates: 0, breaks: 0 };
  }

  /** The caller subscribes: returns the request to send (`after` null: a fresh join). */
  subscribe(after = null, tail = null) {
    if (tail !== null && after !== null) throw new Error("tail goes only with after=null");
    this.move("subscribe");
    this.opener = null;
    this.cursor = after;
    this.fresh = after === null;
    const request = { op: "subscribe", after };
    if (tail !== null) request.tail = tail;
    return request;
  }

  /** The requests the follower needs sent, in order, once each: call after every receive. */
  requestsToSend() {
    const requests = this.requests;
    this.requests = [];
    return requests;
  }

  statistics() {
    return { ...this.stats };
  }

  move(input) {
    if (this.state === "closed") {
      throw new FollowerError(CloseCode.INTERNAL_ERROR, "the follower refused already");
    }
    const outcome = TRANSITIONS[this.state][input];
    if (typeof outcome !== "string") {
      this.state = "closed";
      this.opener = null;
      throw new FollowerError(outcome.code, outcome.reason);
    }
    this.state = outcome;
  }

  /**
   * One decoded channel message: its events, or for a `broadcast` message a promise of them
   * (its keys import asynchronously). FollowerError when the host broke the protocol.
   */
  receiveMessage(message) {
    const op = message.op;
    if (!wellFormed(message)) {
      this.move(op === "broadcast" ? "bad broadcast" : "other");
      return [{ type: "skipped", op, reason: "not a message this follower knows" }];
    }
    switch (op) {
      case "snapshot":
        return this.onSnapshot(message);
      case "broadcast":
        return this.onBroadcast(message);
      case "presence":
        this.move("presence");
        return [this.presence(message)];
      case "event":
        this.move("event");
        return [{ type: "event", event: message.event }];
      case "ready":
      case "history":
      case "error":
        this.move(op);
        return [{ type: op, message }];
      default:
        break;
    }
    const seq = seqOf(message.item);
    if (seq === null) {
      this.move("other");
      return [{ type: "skipped", op, reason: "an item without a seq" }];
    }
    if (this.cursor !== null && seq <= this.cursor) {
      this.move("held item");
      this.stats.duplicates += 1;
      return [];
    }
    this.move("item");
    return [this.take(message.item, seq)];
  }

  /** One cast, or null for the relay's `cut`: the events of its messages, or of a catch-up. */
  async receiveCast(cast) {
    const opener = this.state === "broadcast" ? this.opener : null;
    if (opener === null) {
      this.move(cast === null ? "cut" : "cast");
      return [];
    }
    if (cast === null) return this.catchUp("cut", "the relay cut this channel from the broadcast");
    let encoded;
    try {
      encoded = decodeCast(await opener.open(cast));
    } catch (error) {
      if (!(error instanceof CastError)) throw error;
      return this.catchUp("broken cast", error.message);
    }
    const events = [];
    for (const bytes of encoded) {
      let message;
      try {
        message = decodeHostMessage(bytes);
      } catch {
        // Signed by the host, which broke the protocol.
        this.move("malformed cast");
      }
      if (!CAST_OPS.has(message.op)) {
        // Signed by the host, so not an attack: a newer host's op, or a channel-only one.
        events.push({ type: "skipped", op: message.op, reason: "not a message a cast carries" });
        continue;
      }
      if (!wellFormed(message)) {
        events.push({ type: "skipped", op: message.op, reason: "malformed" });
        continue;
      }
      if (message.op === "presence") {
        events.push(this.presence(message));
        continue;
      }
      if (message.op === "event") {
        events.push({ type: "event", event: message.event });
        continue;
      }
      const seq = seqOf(message.item);
      if (seq === null) {
        events.push({ type: "skipped", op: "item", reason: "an item without a seq" });
      } else if (this.cursor !== null && seq <= this.cursor) {
        // The broadcast may still send what the channel sent while it caught up.
        this.stats.duplicates += 1;
      } else if (this.cursor !== null && seq > this.cursor + 1) {
        return events.concat(this.catchUp("gap", "an item missing from the broadcast"));
      } else {
        events.push(this.take(message.item, seq));
      }
    }
    this.move("cast");
    return events;
  }

  /** The one "already held" check passed: hand the item on and move the cursor. */
  take(item, seq) {
    this.cursor = seq;
    this.stats.items += 1;
    return { type: "item", item };
  }

  freshItems(items) {
    const fresh = [];
    for (const item of items) {
      const seq = seqOf(item);
      if (seq === null) continue;
      if (this.cursor !== null && seq <= this.cursor) {
        this.stats.duplicates += 1;
        continue;
      }
      fresh.push(this.take(item, seq).item);
    }
    return fresh;
  }

  advance(message) {
    // Once the snapshot ended, every item up to its last seq is held.
    if (!message.more && (this.cursor === null || message.last_seq > this.cursor)) {
      this.cursor = message.last_seq;
    }
  }

  onSnapshot(message) {
    const before = this.state;
    const reset = message.reset === true;
    this.move(`${reset ? "reset" : "snapshot"} ${message.more ? "page" : "end"}`);
    this.opener = null; // the host took the channel out of its broadcast before this
    if (before === "catching_up" && !reset) {
      const events = this.freshItems(message.items).map((item) => ({ type: "item", item }));
      this.advance(message);
      return events;
    }
    const events = [];
    if (reset || before !== "snapshot") {
      if (reset) {
        this.cursor = null;
        this.fresh = true;
      }
      const firstSeq = Number.isSafeInteger(message.first_seq) ? message.first_seq : null;
      events.push({
        type: "snapshot_started",
        reset,
        fresh: this.fresh,
        first_seq: firstSeq,
        earlier: message.earlier === true,
        context: Array.isArray(message.context) ? message.context : [],
      });
      this.fresh = false;
    }
    const items = this.freshItems(message.items);
    this.advance(message);
    events.push({ type: "snapshot_page", items, last_seq: message.last_seq, more: message.more });
    return events;
  }

  async onBroadcast(message) {
    let opener;
    try {
      opener = await CastOpener.create({
        hostId: this.hostId,
        publicKey: message.public_key,
        epoch: message.epoch,
        key: message.key,
        counter: message.counter,
      });
    } catch (error) {
      if (!(error instanceof CastError)) throw error;
      this.move("bad broadcast");
    }
    this.move("broadcast");
    const presence = this.presence({ members: message.members, count: message.count,
      you: message.you });
    if (this.state !== "broadcast") return [presence];
    this.opener = opener;
    return [{ type: "following", epoch: message.epoch, counter: message.counter }, presence];
  }

  catchUp(input, reason) {
    this.move(input);
    this.opener = null;
    this.stats.breaks += 1;
    const after = this.cursor === null ? -1 : this.cursor;
    this.requests.push({ op: "subscribe", after });
    return [{ type: "catching_up", reason, after }];
  }

  presence(message) {
    const whole = Array.isArray(message.members);
    const { joined, left } = this.roster.apply(message);
    return { type: "presence", whole, members: this.roster.members, count: this.roster.count,
      you: this.roster.you, joined, left };
  }
}
