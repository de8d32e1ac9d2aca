// The teammate's side of one shared session: keeps an attachment alive (reconnecting with
// backoff), resubscribes after the last seq seen so the view gets every item exactly once, and
// turns the host's application messages (docs/application.md) into calls on the view. A fresh
// page gets the host's default history (the end of the conversation), with the state items from
// before it (the snapshot's `context`), and loads earlier items a page at a time when asked.
// Presence comes as the whole list once, then as what changed: the view always gets the list.
// Through a relay that carries casts the live tail comes as the host's broadcast: the session
// opens each cast and takes its messages as if they came on the channel; when the broadcast
// breaks (a cast that does not open, a gap, the relay's `cut`) it resubscribes after the last
// seq it holds and waits for the next `broadcast` message (docs/application.md, "The broadcast").
// Which endings are final and how long to wait before the next try are Python's
// (tunnel.proto.codes.FINAL_CODES, tunnel.process.backoff), through wire.js.

import { CastError, CastOpener, DecryptionError } from "./crypto.js";
import { SessionLink, attachUrl, decodeCast, decodeHostMessage } from "./link.js";
import {
  BACKOFF_FACTOR,
  BACKOFF_INITIAL_MS,
  CloseCode,
  FINAL_CODES,
  JITTER,
  MAX_HISTORY_ITEMS,
  TEAMMATE_MAX_BACKOFF_MS,
} from "./wire.js";

/**
 * The screen (view.js SCREENS) each final ending shows. Which endings are final is FINAL_CODES
 * alone; tests/relay/web/test_web_session.py checks that every one of them has its screen here.
 */
export const FINAL_SCREENS = new Map([
  [CloseCode.UNAUTHORIZED, "bad-link"],
  [CloseCode.DECRYPTION_FAILED, "decrypt-failed"],
  [CloseCode.REVOKED, "revoked"],
  [CloseCode.REFUSED, "refused"],
  // The host (or the relay) speaks another version of the protocol, e.g. a host that does not
  // start its channel with a nonce: reconnecting would meet the same.
  [CloseCode.PROTOCOL_ERROR, "protocol-error"],
  // The relay closes a host's own link with it; should a teammate ever get it, the page stops too.
  [CloseCode.HOST_ID_IN_USE, "host-id-in-use"],
]);
// A final code this page has no screen for yet still stops it, with the generic screen.
const OTHER_FINAL_SCREEN = "closed";
// Python caps the exponent too: the power stays finite however long the relay stays away.
const MAX_EXPONENT = 64;

/**
 * Milliseconds to wait before retry number `attempt` (0 for the first): a random time between
 * (1 - JITTER) and all of min(TEAMMATE_MAX_BACKOFF_MS, BACKOFF_INITIAL_MS * BACKOFF_FACTOR **
 * attempt), as tunnel.process.backoff.Backoff waits with the teammate maximum. `random` is a
 * number in [0, 1).
 */
export function backoffDelay(attempt, random = Math.random()) {
  const exponent = Math.min(attempt, MAX_EXPONENT);
  const ceiling = Math.min(
    TEAMMATE_MAX_BACKOFF_MS,
    BACKOFF_INITIAL_MS * BACKOFF_FACTOR ** exponent,
  );
  // Jitter keeps a room full of teammates from reconnecting in lockstep after a relay restart.
  return ceiling * (1 - JITTER + JITTER * random);
}

/**
 * A first snapshot page's `context`: the items with a seq before `firstSeq`, in seq order, each
 * once; none when the host did not say where the snapshot starts.
 */
export function contextItems(context, firstSeq) {
  if (!Array.isArray(context) || firstSeq === null) return [];
  const items = context.filter((item) =>
    item && typeof item === "object" && Number.isInteger(item.seq) && item.seq < firstSeq);
  items.sort((a, b) => a.seq - b.seq);
  return items.filter((item, index) => index === 0 || item.seq !== items[index - 1].seq);
}

export class Session {
  /**
   * `view` receives: connection(state, detail), ready(info), resetConversation(), item(item),
   * snapshotDone(), event(event), presence(members), opError(code, message), finalScreen(name),
   * earlier({ available, loading }, load) (whether to offer "Load earlier", and what it calls),
   * context(items) (items from before those shown whose state still holds: apply, do not list),
   * replayItems(items, context) (every item held, in seq order, once earlier ones came, and the
   * context items still before them). presence(members) gets the whole list each time, the
   * page's own entry with `you: true`.
   */
  constructor({ location, hostId, role, secret, name, view, onSubscribed = () => {},
    linkFactory = null }) {
    Object.assign(this, { location, hostId, role, secret, name, view, onSubscribed });
    this.linkFactory = linkFactory ?? ((options) => new SessionLink(options));
    this.link = null;
    this.conversationId = null;
    // The cursor: the last seq held. Every item up to it is shown (from the first one shown), so a
    // resume asks for what comes after it, and a cast's item after lastSeq + 1 is a gap.
    this.lastSeq = null;
    // The broadcast's opener while this channel takes the live tail from casts; null before the
    // `broadcast` message, and from a break until the next one: casts are then ignored.
    this.opener = null;
    // Every item shown, in seq order: a page of earlier ones rebuilds the view from them. As
    // large as the conversation shown, which the page's DOM holds anyway.
    this.items = [];
    // The oldest seq shown, and whether the host's log holds items before it; set by the first
    // snapshot page after a fresh subscribe, moved back by each history page.
    this.firstSeq = null;
    this.earlierAvailable = false;
    // The `before` of the history request in flight (one at a time), or null.
    this.historyBefore = null;
    // The first snapshot page's `context`: items before firstSeq whose state still holds, in
    // seq order; those a history page brings are shown as items and leave this list.
    this.context = [];
    // Who is attached, by member id (the host sends the list, then what changed), and which
    // of them is this page; for this attachment only.
    this.members = new Map();
    this.you = null;
    // Whether the snapshot coming is a fresh one (subscribed with no `after`): its first page
    // says where the view starts.
    this.freshSnapshot = false;
    this.attempt = 0;
    this.retryTimer = null;
    this.stopped = false;
    this.subscribed = false;
    this.info = null;
    // `breaks`: how often the broadcast broke and the session resumed by cursor.
    this.stats = { connects: 0, items: 0, duplicates: 0, breaks: 0 };
  }

  start() {
    this.connect();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    if (this.link) this.link.close(CloseCode.NORMAL);
  }

  /** Connect now (also from a "retry now" button): cancels a pending retry. */
  connect() {
    if (this.stopped) return;
    clearTimeout(this.retryTimer);
    this.retryTimer = null;
    if (this.link && !this.link.ended) return;
    this.subscribed = false;
    this.opener = null;
    // An answer to a history request is lost with the attachment that carried it.
    this.historyBefore = null;
    this.showEarlier();
    this.view.connection(this.stats.connects === 0 ? "connecting" : "reconnecting");
    const link = this.linkFactory({
      url: attachUrl(this.location),
      hostId: this.hostId,
      role: this.role,
      secret: this.secret,
      name: this.name,
      // The link waits for what these return: casts open asynchronously, in arrival order.
      onMessage: (message) => (this.link === link ? this.onMessage(message) : undefined),
      onCast: (cast) => (this.link === link ? this.onCast(cast) : undefined),
      onCut: () => {
        if (this.link === link) this.breakBroadcast("the relay cut this channel");
      },
      onEnd: (ending) => {
        if (this.link === link) this.onEnd(ending);
      },
    });
    this.link = link;
    link.start().catch(() => link.close(CloseCode.PROTOCOL_ERROR, "could not start"));
  }

  /** Send one driving op; false when there is no live attachment to carry it. */
  send(message) {
    if (!this.link || this.link.ended || !this.subscribed) return false;
    return this.link.send(message);
  }

  /**
   * One host message, as it came on the channel or in a cast. What it returns (a promise for a
   * `broadcast` message) the link waits for before the next frame.
   */
  onMessage(message) {
    switch (message.op) {
      case "ready":
        this.onReady(message);
        return;
      case "snapshot":
        // The host took the channel out of its broadcast before it sent this.
        this.opener = null;
        if (message.reset === true) {
          // The host's log does not hold what this page saw (a new log under the same
          // conversation id): start the view over from the snapshot that follows.
          this.forgetConversation();
          this.freshSnapshot = true;
        }
        if (this.freshSnapshot) {
          this.freshSnapshot = false;
          // A host too old to say sends everything: nothing earlier to offer.
          this.firstSeq = Number.isInteger(message.first_seq) ? message.first_seq : null;
          this.earlierAvailable = this.firstSeq !== null && message.earlier === true;
          this.context = contextItems(message.context, this.firstSeq);
          if (this.context.length > 0) this.view.context(this.context);
          this.showEarlier();
        }
        for (const item of Array.isArray(message.items) ? message.items : []) this.acceptItem(item);
        // The page holds every item up to last_seq now, even when this page brought none.
        if (Number.isInteger(message.last_seq) &&
          (this.lastSeq === null || message.last_seq > this.lastSeq)) {
          this.lastSeq = message.last_seq;
        }
        if (!message.more) this.view.snapshotDone();
        return;
      case "history":
        this.onHistory(message);
        return;
      case "item":
        this.acceptItem(message.item);
        return;
      case "event":
        if (message.event && typeof message.event === "object") this.view.event(message.event);
        return;
      case "presence":
        this.onPresence(message);
        return;
      case "broadcast":
        return this.onBroadcast(message);
      case "error":
        this.view.opError(String(message.code ?? "error"), String(message.message ?? ""));
        return;
      default:
        // Newer hosts may speak ops this page does not know: ignoring them is safe.
        return;
    }
  }

  onReady(message) {
    const conversationId = String(message.conversation_id ?? "");
    if (this.conversationId !== null && conversationId !== this.conversationId) {
      // The host restarted with another conversation: seqs restart, so does the view.
      this.forgetConversation();
    }
    this.conversationId = conversationId;
    this.info = message;
    this.attempt = 0;
    this.stats.connects += 1;
    this.view.ready(message);
    this.view.connection("connected");
    this.subscribed = true;
    // A new subscription: the broadcast, if any, starts again with its `broadcast` message.
    this.opener = null;
    this.subscribe();
    this.onSubscribed();
  }

  /**
   * Ask for everything after the cursor. With no `after` the host sends its default history,
   * the end of the conversation; with one, everything after it.
   */
  subscribe() {
    this.freshSnapshot = this.lastSeq === null;
    return this.link.send({ op: "subscribe", after: this.lastSeq });
  }

  /**
   * A `broadcast` message: from the next cast on, the live tail comes as casts of this epoch,
   * signed by the host's key; `members` and `you` are the presence list as of that cast. A
   * public key that is not the host id's means the channel is not the host's: the attachment
   * ends as for a message that did not decrypt.
   */
  async onBroadcast(message) {
    const link = this.link;
    this.opener = null;
    let opener;
    try {
      opener = await CastOpener.create({
        hostId: this.hostId,
        publicKey: message.public_key,
        epoch: message.epoch,
        key: message.key,
        counter: message.counter,
      });
    } catch {
      throw new DecryptionError("the broadcast is not the host's");
    }
    // The attachment may have ended while the keys were imported.
    if (this.link !== link) return;
    this.opener = opener;
    if (Array.isArray(message.members)) {
      this.onPresence({ members: message.members, you: message.you });
    }
  }

  /**
   * One cast on the channel: ignored without an opener; else opened and its messages taken as
   * if they came on the channel (a malformed one ends the attachment, as there), except items
   * held already (skipped) and items past the next one (a gap). A cast that does not open, or
   * is not a list of messages, or a gap breaks the broadcast.
   */
  async onCast(cast) {
    const opener = this.opener;
    if (opener === null) return;
    let encoded;
    try {
      encoded = decodeCast(await opener.open(cast));
    } catch (error) {
      if (!(error instanceof CastError)) throw error;
      if (this.opener === opener) this.breakBroadcast(error.message);
      return;
    }
    for (const bytes of encoded) {
      const message = decodeHostMessage(bytes);
      // An earlier message of this cast replaced the opener (a `broadcast` or a `snapshot`):
      // the rest of the cast belongs to the broadcast it ended.
      if (this.opener !== opener) return;
      if (message.op === "item" && this.isGap(message.item)) {
        this.breakBroadcast("a gap in the items");
        return;
      }
      await this.onMessage(message);
    }
  }

  /** Whether a cast's `item` comes after one the page never got. */
  isGap(item) {
    // An item with no seq is dropped by acceptItem; with no cursor there is nothing to be
    // behind (a broadcast comes only after the snapshot, which sets one).
    if (!item || typeof item !== "object" || !Number.isInteger(item.seq)) return false;
    return this.lastSeq !== null && item.seq > this.lastSeq + 1;
  }

  /**
   * The broadcast broke for this channel (docs/application.md, "The broadcast"): ignore casts
   * until the next `broadcast` message and resubscribe after the cursor; the host sends what
   * came since on the channel. Once per break: a second cause while the opener is gone is
   * already covered by the resume in flight.
   */
  breakBroadcast(why) {
    if (this.opener === null) return;
    this.opener = null;
    this.stats.breaks += 1;
    console.warn(`broadcast: ${why}; catching up after seq ${this.lastSeq}`);
    if (!this.link || this.link.ended || !this.subscribed) return;
    if (!this.subscribe()) {
      // The outbox is full: a new attachment subscribes again, instead of a live tail that
      // silently stops.
      this.link.close(CloseCode.INTERNAL_ERROR, "could not resubscribe");
    }
  }

  forgetConversation() {
    this.lastSeq = null;
    this.items = [];
    this.context = [];
    this.firstSeq = null;
    this.earlierAvailable = false;
    this.historyBefore = null;
    this.view.resetConversation();
    this.showEarlier();
  }

  showEarlier() {
    this.view.earlier(
      { available: this.earlierAvailable, loading: this.historyBefore !== null },
      () => this.loadEarlier(),
    );
  }

  /** Ask for the page before the oldest item shown; false when there is none or no link. */
  loadEarlier() {
    if (!this.earlierAvailable || this.historyBefore !== null) return false;
    if (!this.link || this.link.ended || !this.subscribed) return false;
    const before = this.firstSeq;
    if (!this.link.send({ op: "history", before, limit: MAX_HISTORY_ITEMS })) return false;
    this.historyBefore = before;
    this.showEarlier();
    return true;
  }

  onHistory(message) {
    // Only the answer to the request in flight: one for a view since reset is stale.
    if (this.historyBefore === null || message.before !== this.historyBefore) return;
    this.historyBefore = null;
    const items = (Array.isArray(message.items) ? message.items : []).filter((item) =>
      item && typeof item === "object" && Number.isInteger(item.seq) && item.seq < this.firstSeq);
    items.sort((a, b) => a.seq - b.seq);
    // Items before the oldest shown only, each once, so nothing shown is shown twice.
    const fresh = items.filter((item, index) => index === 0 || item.seq !== items[index - 1].seq);
    if (fresh.length > 0) {
      this.firstSeq = fresh[0].seq;
      this.stats.items += fresh.length;
      this.items = fresh.concat(this.items);
      // A context item this page reached is shown as an item now, once; the rest stay state.
      this.context = this.context.filter((item) => item.seq < this.firstSeq);
      this.view.replayItems(this.items, this.context);
    }
    this.earlierAvailable = message.more === true && fresh.length > 0;
    this.showEarlier();
  }

  /**
   * A presence message: the whole list (`members`, and `you`, this page's member id) or what
   * changed since the previous one (`joined`, `left`). The view gets the whole list either way.
   */
  onPresence(message) {
    if (Array.isArray(message.members)) {
      this.members = new Map();
      this.you = Number.isInteger(message.you) ? message.you : null;
      message.members.forEach((member, index) => {
        // A host from before member ids sends only lists: its members are keyed by place.
        const id = Number.isInteger(member?.id) ? member.id : `place ${index}`;
        if (member && typeof member === "object") this.members.set(id, member);
      });
    } else {
      for (const id of Array.isArray(message.left) ? message.left : []) this.members.delete(id);
      for (const member of Array.isArray(message.joined) ? message.joined : []) {
        if (member && typeof member === "object" && Number.isInteger(member.id)) {
          this.members.set(member.id, member);
        }
      }
    }
    this.view.presence([...this.members].map(([id, member]) =>
      ({ name: member.name, role: member.role, you: this.you !== null && id === this.you })));
  }

  acceptItem(item) {
    if (!item || typeof item !== "object" || !Number.isInteger(item.seq)) return;
    // Snapshot plus live tail deliver each seq once per subscription; a resubscription after a
    // reconnect starts after lastSeq. Anything at or below it is a duplicate and is dropped.
    if (this.lastSeq !== null && item.seq <= this.lastSeq) {
      this.stats.duplicates += 1;
      return;
    }
    this.lastSeq = item.seq;
    this.stats.items += 1;
    this.items.push(item);
    this.view.item(item);
  }

  onEnd({ code, reason }) {
    this.link = null;
    this.subscribed = false;
    this.opener = null;
    this.historyBefore = null;
    this.showEarlier();
    // Who was attached is unknown while we are not: show nobody rather than a stale list. The
    // host sends the current list again as soon as we are back.
    this.members = new Map();
    this.you = null;
    this.view.presence([]);
    if (this.stopped) return;
    if (FINAL_CODES.includes(code)) {
      const screen = FINAL_SCREENS.get(code) ?? OTHER_FINAL_SCREEN;
      this.stopped = true;
      this.view.connection("closed", { code, reason });
      this.view.finalScreen(screen, { code, reason });
      return;
    }
    const wait = Math.round(backoffDelay(this.attempt));
    this.attempt += 1;
    const state = code === CloseCode.HOST_GONE ? "host-offline" : "reconnecting";
    this.view.connection(state, { code, reason, retryInMs: wait });
    this.retryTimer = setTimeout(() => this.connect(), wait);
  }
}
