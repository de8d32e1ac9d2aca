// The teammate's side of one shared session: keeps an attachment alive (reconnecting with
// backoff), resubscribes after the last seq seen so the view gets every item exactly once, and
// turns the host's application messages (docs/application.md) into calls on the view. A fresh
// page gets the host's default history (the end of the conversation), with the state items from
// before it (the snapshot's `context`), and loads earlier items a page at a time when asked.
// The session protocol itself (the cursor, each item once, the broadcast's casts, the catch-up
// after a cut or a gap, the roster) is follower.js's, one Follower per attachment: this turns
// its events into calls on the view and sends the requests it asks for (docs/application.md,
// "The broadcast"). Presence comes as the host's listing and count once, then as what
// changed: the view always gets the listing and the count.
// Which endings are final and how long to wait before the next try are Python's
// (tunnel.proto.codes.FINAL_CODES, tunnel.process.backoff), through wire.js.

import { Follower } from "./follower.js";
import { SessionLink, attachUrl } from "./link.js";
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
// Conversations whose items, cursor and view state the page keeps once it switched away, so
// switching back shows them at once and asks only for what came after (the oldest is forgotten).
export const KEPT_CONVERSATIONS = 8;

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
   * snapshotDone(), event(event), presence(members, {count, told}), opError(code, message),
   * finalScreen(name), earlier({ available, loading }, load) (whether to offer "Load earlier",
   * and what it calls),
   * context(items) (items from before those shown whose state still holds: apply, do not list),
   * replayItems(items, context) (every item held, in seq order, once earlier ones came, and the
   * context items still before them). presence(members, {count, told}) gets the whole list
   * each time (the members the host lists, the first to attach), the page's own entry with
   * `you: true`; `count`, everyone attached, listed or not; `told`, whether the host said which
   * member this page is (listed or not). `onHostMessage(message)` sees every decoded channel
   * message first, as it came (untrusted): the ops the session protocol leaves to others
   * (`push`, notify.js) are read there. `conversation`: the conversation to follow (null: the
   * host's first); `onConversation(id)` hears which one each attachment follows.
   * Switching (`switchTo`) also calls, when the view has them, view.leaveConversation() (what
   * to keep of the view: its scroll and draft), view.enterConversation(kept or null) when the
   * other one is shown, and view.returnTo(kept) once the snapshot of one switched back to is in.
   */
  constructor({ location, hostId, role, secret, name, view, onSubscribed = () => {},
    onHostMessage = () => {}, linkFactory = null, conversation = null,
    onConversation = () => {} }) {
    Object.assign(this, { location, hostId, role, secret, name, view, onSubscribed,
      onHostMessage, onConversation });
    this.linkFactory = linkFactory ?? ((options) => new SessionLink(options));
    this.link = null;
    this.conversationId = conversation;
    // What the page keeps of the conversations it switched away from, by id, oldest first.
    this.kept = new Map();
    // The view state to give back once the snapshot of a conversation switched back to is in.
    this.returning = null;
    // The cursor: the last seq held. Every item up to it is shown (from the first one shown), so a
    // resume asks for what comes after it. The follower of the attachment keeps it meanwhile.
    this.lastSeq = null;
    // The session protocol of the current attachment (follower.js); a new one per attachment.
    this.follower = null;
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
    this.attempt = 0;
    this.retryTimer = null;
    this.stopped = false;
    this.subscribed = false;
    this.info = null;
    // `breaks`: how often the broadcast broke and the session resumed by cursor; `duplicates`:
    // items dropped as held already (both summed over the attachments' followers).
    this.stats = { connects: 0, items: 0, duplicates: 0, breaks: 0 };
    this.counted = { duplicates: 0, breaks: 0 };
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
    this.follower = new Follower({ hostId: this.hostId });
    this.counted = { duplicates: 0, breaks: 0 };
    // An answer to a history request is lost with the attachment that carried it.
    this.historyBefore = null;
    this.showEarlier();
    this.view.connection(this.stats.connects === 0 ? "connecting" : "reconnecting");
    // The open carries the subscribe: everything after the cursor, counted in the conversation
    // it was counted in (the host starts a view of another over), or the host's default.
    const request = this.follower.subscribe(this.lastSeq);
    const subscribe = {
      after: request.after,
      tail: request.tail ?? null,
      conversation: this.conversationId,
    };
    const link = this.linkFactory({
      subscribe,
      url: attachUrl(this.location),
      hostId: this.hostId,
      role: this.role,
      secret: this.secret,
      name: this.name,
      // The link waits for what these return: casts open asynchronously, in arrival order.
      onMessage: (message) => (this.link === link ? this.onMessage(message) : undefined),
      onCast: (cast) => (this.link === link ? this.onCast(cast) : undefined),
      onCut: () => (this.link === link ? this.onCast(null) : undefined),
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
   * One host message on the channel. What it returns (a promise) the link waits for before the
   * next frame; a FollowerError thrown ends the attachment with its close code.
   */
  onMessage(message) {
    try {
      this.onHostMessage(message);
    } catch (error) {
      // What reads these ops beside the session must not end the attachment.
      console.error(error);
    }
    const follower = this.follower;
    const events = follower.receiveMessage(message);
    if (events instanceof Promise) return events.then((got) => this.take(follower, got));
    this.take(follower, events);
    return undefined;
  }

  /** One cast of the host's broadcast, or null for the relay's `cut`. */
  async onCast(cast) {
    const follower = this.follower;
    const events = await follower.receiveCast(cast);
    this.take(follower, events);
  }

  /** What the follower asked for and told, for the attachment it belongs to. */
  take(follower, events) {
    if (follower !== this.follower) return;
    for (const request of follower.requestsToSend()) {
      if (!this.link || this.link.ended || !this.subscribed) break;
      if (!this.link.send(request)) {
        // The outbox is full: a new attachment subscribes again, instead of a live tail that
        // silently stops.
        this.link.close(CloseCode.INTERNAL_ERROR, "could not resubscribe");
      }
    }
    for (const event of events) this.onEvent(event);
    const stats = follower.statistics();
    this.stats.duplicates += stats.duplicates - this.counted.duplicates;
    this.stats.breaks += stats.breaks - this.counted.breaks;
    this.counted = { duplicates: stats.duplicates, breaks: stats.breaks };
    this.lastSeq = follower.cursor;
  }

  onEvent(event) {
    switch (event.type) {
      case "ready":
        this.onReady(event.message);
        return;
      case "snapshot_started":
        if (event.reset) {
          // The host's log does not hold what this page saw (a new log under the same
          // conversation id): start the view over from the snapshot that follows.
          this.forgetConversation();
        }
        if (event.fresh) {
          // A host too old to say sends everything: nothing earlier to offer.
          this.firstSeq = event.first_seq;
          this.earlierAvailable = this.firstSeq !== null && event.earlier;
          this.context = contextItems(event.context, this.firstSeq);
          if (this.context.length > 0) this.view.context(this.context);
          this.showEarlier();
        }
        return;
      case "snapshot_page":
        for (const item of event.items) this.acceptItem(item);
        if (!event.more) {
          this.view.snapshotDone();
          if (this.returning !== null) this.view.returnTo?.(this.returning);
          this.returning = null;
        }
        return;
      case "item":
        this.acceptItem(event.item);
        return;
      case "event":
        this.view.event(event.event);
        return;
      case "presence":
        this.view.presence(event.members.map((member) =>
          ({ name: member.name, role: member.role, verified: member.verified === true,
            you: event.you !== null && member.id === event.you })),
        { count: event.count, told: event.you !== null });
        return;
      case "history":
        this.onHistory(event.message);
        return;
      case "error":
        this.view.opError(String(event.message.code), String(event.message.message));
        return;
      case "catching_up":
        console.warn(`broadcast: ${event.reason}; catching up after seq ${event.after}`);
        return;
      default:
        // "following"; "skipped": a message this page does not know, from a newer host.
        return;
    }
  }

  onReady(message) {
    const conversationId = String(message.conversation_id ?? "");
    if (this.conversationId !== null && conversationId !== this.conversationId) {
      // The host has no conversation of that id (it restarted with another, or the one asked
      // for is not its): seqs restart, so does the view.
      this.forgetConversation();
    }
    this.conversationId = conversationId;
    this.onConversation(conversationId);
    this.info = message;
    this.attempt = 0;
    this.stats.connects += 1;
    this.view.ready(message);
    this.view.connection("connected");
    // The open carried the subscribe: its snapshot follows.
    this.subscribed = true;
    this.onSubscribed();
  }

  /**
   * Follow conversation `id` instead: the attachment to the one shown ends and one to `id`
   * starts. What the page held of the one left is kept (at most KEPT_CONVERSATIONS of them);
   * one kept is shown again from memory and asks the host only for the items after its cursor.
   */
  switchTo(id) {
    if (this.stopped || id === this.conversationId) return;
    if (this.conversationId !== null) {
      this.kept.delete(this.conversationId);
      this.kept.set(this.conversationId, {
        lastSeq: this.lastSeq, items: this.items, context: this.context, firstSeq: this.firstSeq,
        earlierAvailable: this.earlierAvailable, view: this.view.leaveConversation?.() ?? null,
      });
      while (this.kept.size > KEPT_CONVERSATIONS) this.kept.delete(this.kept.keys().next().value);
    }
    const old = this.link;
    // The old attachment's ending is not this session's: it must not schedule a reconnect.
    this.link = null;
    this.subscribed = false;
    this.follower = null;
    if (old && !old.ended) old.close(CloseCode.NORMAL);
    clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.attempt = 0;
    this.conversationId = id;
    const kept = this.kept.get(id) ?? null;
    this.kept.delete(id);
    this.lastSeq = kept?.lastSeq ?? null;
    this.items = kept?.items ?? [];
    this.context = kept?.context ?? [];
    this.firstSeq = kept?.firstSeq ?? null;
    this.earlierAvailable = kept?.earlierAvailable ?? false;
    this.historyBefore = null;
    this.view.resetConversation();
    this.view.presence([]);
    if (kept && (this.items.length > 0 || this.context.length > 0)) {
      this.view.replayItems(this.items, this.context);
    }
    this.returning = kept?.view ?? null;
    this.view.enterConversation?.(this.returning);
    this.onConversation(id);
    this.connect();
    // Another conversation, not a lost connection.
    this.view.connection("connecting");
  }

  forgetConversation() {
    this.returning = null;
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

  /** An item to show: the follower hands on each seq once, in order. */
  acceptItem(item) {
    this.stats.items += 1;
    this.items.push(item);
    this.view.item(item);
  }

  onEnd({ code, reason }) {
    this.link = null;
    this.subscribed = false;
    this.follower = null;
    this.historyBefore = null;
    this.showEarlier();
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
