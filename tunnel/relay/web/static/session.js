// The teammate's side of one shared session: keeps an attachment alive (reconnecting with
// backoff), resubscribes after the last seq seen so the view gets every item exactly once, and
// turns the host's application messages (docs/application.md) into calls on the view.
// Which endings are final and how long to wait before the next try are Python's
// (tunnel.proto.codes.FINAL_CODES, tunnel.process.backoff), through wire.js.

import { SessionLink, attachUrl } from "./link.js";
import {
  BACKOFF_FACTOR,
  BACKOFF_INITIAL_MS,
  CloseCode,
  FINAL_CODES,
  JITTER,
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

export class Session {
  /**
   * `view` receives: connection(state, detail), ready(info), resetConversation(), item(item),
   * snapshotDone(), event(event), presence(members), opError(code, message), finalScreen(name).
   */
  constructor({ location, hostId, role, secret, name, view, onSubscribed = () => {},
    linkFactory = null }) {
    Object.assign(this, { location, hostId, role, secret, name, view, onSubscribed });
    this.linkFactory = linkFactory ?? ((options) => new SessionLink(options));
    this.link = null;
    this.conversationId = null;
    this.lastSeq = null;
    this.attempt = 0;
    this.retryTimer = null;
    this.stopped = false;
    this.subscribed = false;
    this.info = null;
    this.stats = { connects: 0, items: 0, duplicates: 0 };
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
    this.view.connection(this.stats.connects === 0 ? "connecting" : "reconnecting");
    const link = this.linkFactory({
      url: attachUrl(this.location),
      hostId: this.hostId,
      role: this.role,
      secret: this.secret,
      name: this.name,
      onMessage: (message) => {
        if (this.link === link) this.onMessage(message);
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

  onMessage(message) {
    switch (message.op) {
      case "ready":
        this.onReady(message);
        return;
      case "snapshot":
        if (message.reset === true) {
          // The host's log does not hold what this page saw (a new log under the same
          // conversation id): start the view over from the snapshot that follows.
          this.lastSeq = null;
          this.view.resetConversation();
        }
        for (const item of Array.isArray(message.items) ? message.items : []) this.acceptItem(item);
        if (!message.more) this.view.snapshotDone();
        return;
      case "item":
        this.acceptItem(message.item);
        return;
      case "event":
        if (message.event && typeof message.event === "object") this.view.event(message.event);
        return;
      case "presence":
        this.view.presence(Array.isArray(message.members) ? message.members : []);
        return;
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
      this.lastSeq = null;
      this.view.resetConversation();
    }
    this.conversationId = conversationId;
    this.info = message;
    this.attempt = 0;
    this.stats.connects += 1;
    this.view.ready(message);
    this.view.connection("connected");
    this.subscribed = true;
    this.link.send({ op: "subscribe", after: this.lastSeq });
    this.onSubscribed();
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
    this.view.item(item);
  }

  onEnd({ code, reason }) {
    this.link = null;
    this.subscribed = false;
    // Who was attached is unknown while we are not: show nobody rather than a stale list. The
    // host sends the current list again as soon as we are back.
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
