// The host's conversations (docs/application.md, "Conversations"; docs/web.md, "Conversations"):
// `conversations` and `conversation_started` read from untrusted messages, the list beside the
// conversation (a drawer on a phone) with its header button, whose badge counts the requests
// waiting in the other conversations, and the current conversation kept in the link's fragment.
// Every string from the host reaches the DOM through el() as text; the bounds are Python's,
// through wire.js.

import { el } from "./dom.js";
import {
  CONVERSATION_STATES,
  MAX_AGENT_NAME_LENGTH,
  MAX_CONVERSATION_LENGTH,
  MAX_LISTED,
  MAX_NAME_LENGTH,
} from "./wire.js";

/** A `conversations` or `conversation_started` message that is not as the protocol says. */
export class ConversationMessageError extends Error {}

const STATE_LABEL = {
  starting: "starting",
  idle: "idle",
  working: "working",
  waiting: "waiting for approval",
  closed: "closed",
};
// How often the "5 min ago" of the entries is said again while no new list comes.
const RELATIVE_REFRESH_MS = 30_000;
const MS_PER_SECOND = 1e3;
// What separates the link from the conversation in the fragment: never in a base64url secret.
const FRAGMENT_SEPARATOR = "/";

function text(value, name, most) {
  if (typeof value !== "string" || value.length === 0 || value.length > most) {
    throw new ConversationMessageError(`${name} is a string of 1 to ${most} characters`);
  }
  return value;
}

function time(value, name) {
  if (typeof value !== "number" || !Number.isFinite(value)) {
    throw new ConversationMessageError(`${name} is a time`);
  }
  return value;
}

function entry(value) {
  if (!value || typeof value !== "object" || Array.isArray(value)) {
    throw new ConversationMessageError("an entry is a map");
  }
  const state = text(value.state, "state", MAX_NAME_LENGTH);
  if (!CONVERSATION_STATES.includes(state)) throw new ConversationMessageError("unknown state");
  if (!Number.isSafeInteger(value.pending) || value.pending < 0) {
    throw new ConversationMessageError("pending is a count");
  }
  return {
    id: text(value.id, "id", MAX_CONVERSATION_LENGTH),
    agent: text(value.agent, "agent", MAX_AGENT_NAME_LENGTH),
    by: text(value.by, "by", MAX_NAME_LENGTH),
    state,
    pending: value.pending,
    last: time(value.last, "last"),
    started: time(value.started, "started"),
  };
}

/**
 * A decoded host message whose op is `conversations` or `conversation_started`, typed as
 * tunnel.app.conversation_list.parse_conversation_message types it (and no longer than its
 * bounds); ConversationMessageError for anything else.
 */
export function parseConversationMessage(message) {
  if (!message || typeof message !== "object") throw new ConversationMessageError("not a map");
  if (message.op === "conversation_started") {
    return { op: "conversation_started",
      conversation: text(message.conversation, "conversation", MAX_CONVERSATION_LENGTH) };
  }
  if (message.op !== "conversations") throw new ConversationMessageError("not a conversations message");
  const { agents, list, max } = message;
  if (!Array.isArray(agents) || agents.length > MAX_LISTED) {
    throw new ConversationMessageError("agents is a bounded list of names");
  }
  if (!Array.isArray(list) || list.length > MAX_LISTED) {
    throw new ConversationMessageError("list is a bounded list");
  }
  if (!Number.isSafeInteger(max) || max < 1) {
    throw new ConversationMessageError("max is a positive integer");
  }
  return {
    op: "conversations",
    agents: agents.map((agent) => text(agent, "agent", MAX_AGENT_NAME_LENGTH)),
    max,
    list: list.map(entry),
  };
}

/** How long ago Unix second `seconds` was, in words, at `nowMs` (a clock ahead says "just now"). */
export function relativeTime(seconds, nowMs = Date.now()) {
  const ago = Math.floor(nowMs / MS_PER_SECOND - seconds);
  if (!(ago >= 45)) return "just now";
  const minutes = Math.round(ago / 60);
  if (minutes < 60) return `${Math.max(1, minutes)} min ago`;
  const hours = Math.round(minutes / 60);
  if (hours < 24) return `${hours} h ago`;
  return `${Math.round(hours / 24)} d ago`;
}

/**
 * The fragment `#<link>[/<conversation>]` split: the link part (for parseFragment) and the
 * conversation it names, or null when it names none or one no host could have.
 */
export function splitFragment(fragment) {
  const at = fragment.indexOf(FRAGMENT_SEPARATOR);
  if (at < 0) return { link: fragment, conversation: null };
  let conversation = null;
  try {
    conversation = decodeURIComponent(fragment.slice(at + 1));
  } catch {
    conversation = null;
  }
  const fits = conversation && conversation.length <= MAX_CONVERSATION_LENGTH;
  return { link: fragment.slice(0, at), conversation: fits ? conversation : null };
}

/** `fragment` (the link part, or a whole one) naming `conversation` instead. */
export function fragmentWith(fragment, conversation) {
  const { link } = splitFragment(fragment);
  return conversation ? `${link}${FRAGMENT_SEPARATOR}${encodeURIComponent(conversation)}` : link;
}

/**
 * The list: a section of the side panel (the drawer on a phone) and its button in the header.
 * Drivers get "New" (one entry per agent the host offers) and Close on each open conversation;
 * viewers see the list only. `onSwitch(id)`, `onNew(agent)`, `onClose(id)` are the page's.
 */
export class ConversationPanel {
  constructor({ isDriver, onSwitch, onNew, onClose, onOpen }) {
    Object.assign(this, { isDriver, onSwitch, onNew, onClose, onOpen });
    this.agents = [];
    this.list = [];
    this.current = null;
    // Whether the host sent a list: one from before conversations never does, and shows none.
    this.received = false;
    // The conversation whose Close waits for its confirmation.
    this.confirming = null;
    // Each entry's element by id, with what it shows: the host sends the list at every change
    // (four times a second while agents write), and an entry that shows the same stays the same
    // element, so a button is never swapped under the pointer.
    this.rendered = new Map();
    this.menuKey = null;
    this.badge = el("span", { class: "conversations-badge", testid: "conversations-badge", hidden: true });
    this.button = el("button", {
      class: "conversations-toggle", testid: "conversations-toggle", type: "button",
      "aria-controls": "side-panel", title: "The host's conversations",
      onclick: () => this.onOpen(),
    }, el("span", { text: "Conversations" }), this.badge);
    this.entries = el("ul", { class: "conversation-list", testid: "conversation-list" });
    this.menu = el("div", { class: "new-menu", testid: "new-menu", hidden: true });
    this.newButton = this.isDriver ? el("button", {
      class: "new-conversation", testid: "new-conversation", type: "button", text: "New",
      "aria-haspopup": "true", "aria-expanded": "false", hidden: true,
      onclick: () => this.toggleMenu(),
    }) : null;
    this.element = el("section", { class: "conversations", testid: "conversations", hidden: true,
      // Escape closes the New menu first (and only it: the drawer stays open), back on New.
      onkeydown: (event) => {
        if (event.key !== "Escape" || this.menu.hidden) return;
        event.stopPropagation();
        this.toggleMenu(false);
        this.newButton?.focus();
      } },
    el("div", { class: "conversations-head" }, el("h2", { text: "Conversations" }), this.newButton),
    this.menu, this.entries);
    this.timer = setInterval(() => { if (this.list.length > 0) this.render(); }, RELATIVE_REFRESH_MS);
  }

  toggleMenu(open = this.menu.hidden) {
    this.menu.hidden = !open;
    this.newButton?.setAttribute("aria-expanded", String(open));
  }

  /** A parsed `conversations` message. */
  update({ agents, list }) {
    this.agents = agents;
    this.list = list;
    this.received = true;
    this.render();
  }

  setCurrent(id) {
    this.current = id;
    this.confirming = null;
    this.render();
  }

  /** The current conversation's entry, or null while the list does not name it. */
  currentEntry() {
    return this.list.find((entry) => entry.id === this.current) ?? null;
  }

  /** Requests waiting in the conversations other than the one shown. */
  pendingElsewhere() {
    return this.list.reduce((sum, entry) => sum + (entry.id === this.current ? 0 : entry.pending), 0);
  }

  render() {
    // One conversation and nothing to start: a viewer sees the host share one agent, as before.
    this.element.hidden = !this.received
      || (this.list.length <= 1 && this.agents.length <= 1 && !this.isDriver);
    this.button.hidden = this.element.hidden;
    const elsewhere = this.pendingElsewhere();
    this.badge.hidden = elsewhere === 0;
    this.badge.textContent = String(elsewhere);
    this.button.title = elsewhere === 0 ? "The host's conversations"
      : `${elsewhere} ${elsewhere === 1 ? "request waits" : "requests wait"} for approval in another conversation`;
    const menuKey = JSON.stringify(this.agents);
    if (this.newButton && menuKey !== this.menuKey) {
      this.menuKey = menuKey;
      this.newButton.hidden = this.agents.length === 0;
      this.menu.replaceChildren(...this.agents.map((agent) => el("button", {
        class: "new-agent", testid: "new-conversation-agent", type: "button", "data-agent": agent,
        text: agent, onclick: () => {
          this.toggleMenu(false);
          this.onNew(agent);
        },
      })));
    }
    // The button the keyboard is on, by its entry and its kind: an entry drawn again (its state
    // changed, or Close asks to confirm) gets the focus back on the same button, or on the one
    // that took its place.
    const focused = this.entries.contains(document.activeElement) ? document.activeElement : null;
    const focusedId = focused?.closest("li")?.dataset.id;
    const focusedKind = focused?.dataset.testid;
    const now = Date.now();
    const seen = new Set();
    const elements = this.list.map((entry) => {
      // An id listed twice (a host should not) gets an element of its own each time.
      if (seen.has(entry.id)) return this.renderEntry(entry, now);
      seen.add(entry.id);
      const key = JSON.stringify([entry.agent, entry.by, entry.state, entry.pending,
        entry.id === this.current, entry.id === this.confirming, relativeTime(entry.last, now)]);
      const kept = this.rendered.get(entry.id);
      if (kept && kept.key === key) return kept.element;
      const element = this.renderEntry(entry, now);
      this.rendered.set(entry.id, { key, element });
      return element;
    });
    const listed = new Set(this.list.map((entry) => entry.id));
    for (const id of [...this.rendered.keys()]) if (!listed.has(id)) this.rendered.delete(id);
    const shown = this.entries.children;
    const same = elements.length === shown.length && elements.every((element, i) => shown[i] === element);
    if (!same) this.entries.replaceChildren(...elements);
    if (focused && !focused.isConnected) {
      const entry = elements.find((element) => element.dataset.id === focusedId);
      const tried = [focusedKind, "conversation-close-cancel", "conversation-close", "conversation-open"];
      const buttons = tried.map((kind) => entry?.querySelector(`[data-testid="${kind}"]`));
      buttons.find(Boolean)?.focus();
    }
  }

  renderEntry(entry, now) {
    const current = entry.id === this.current;
    const pending = entry.pending > 0 ? el("span", {
      class: "conversation-pending", testid: "conversation-pending", text: String(entry.pending),
      title: `${entry.pending} waiting for an answer`,
    }) : null;
    const open = el("button", {
      class: "conversation-open", testid: "conversation-open", type: "button",
      "aria-current": current ? "true" : null,
      onclick: () => {
        if (!current) this.onSwitch(entry.id);
      },
    },
    el("span", { class: "conversation-line" },
      el("span", { class: "conversation-agent", testid: "conversation-agent", text: entry.agent }),
      pending),
    el("span", { class: "conversation-line detail" },
      el("span", { class: "conversation-state", testid: "conversation-state", text: STATE_LABEL[entry.state] }),
      el("span", { class: "conversation-last", testid: "conversation-last", text: relativeTime(entry.last, now) })),
    el("span", { class: "conversation-by", testid: "conversation-by", text: `by ${entry.by}` }));
    let actions = null;
    if (this.isDriver && entry.state !== "closed") {
      actions = this.confirming === entry.id
        ? el("span", { class: "conversation-confirm" },
          el("span", { text: "Stop its agent? The log stays." }),
          el("button", { type: "button", testid: "conversation-close-confirm", text: "Close it",
            onclick: () => {
              this.confirming = null;
              this.onClose(entry.id);
              this.render();
            } }),
          el("button", { type: "button", testid: "conversation-close-cancel", text: "Keep",
            onclick: () => {
              this.confirming = null;
              this.render();
            } }))
        : el("button", { class: "conversation-close", testid: "conversation-close", type: "button",
          text: "Close", title: "Stop this conversation's agent; its log stays",
          // Every entry has one: its name says which conversation it closes.
          "aria-label": `Close the conversation with ${entry.agent}, started by ${entry.by}`,
          onclick: () => {
            this.confirming = entry.id;
            this.render();
          } });
    }
    return el("li", {
      class: current ? "conversation-entry current" : "conversation-entry",
      testid: "conversation-entry", "data-id": entry.id, "data-state": entry.state,
      "data-current": current ? "true" : null,
    }, open, actions);
  }
}
