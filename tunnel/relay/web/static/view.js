// The page's DOM: header (agent, sandbox, role, connection, presence), the conversation, the
// agent's settings, the composer for drivers, and the full-page screens. Every piece of remote
// text goes in as textContent or through the markdown sanitizer; nothing remote is ever assigned
// to innerHTML.

import { approvalText, askedBy, decisionText } from "./approvals.js";
import { CommandCompletion, commandList } from "./completion.js";
import { arr, el, formatTime, obj, pretty, str } from "./dom.js";
import { PromptImages } from "./images.js";
import { loginCard } from "./login.js";
import { setMarkdown } from "./markdown.js";
import { PathCompletion } from "./paths.js";
import { questionCard } from "./questions.js";
import { SettingsBar, settingsText } from "./settings.js";
import { ToolTerminals, mergeCall, toolDetails, toolHead, unfenced } from "./tools.js";
import { UsageLine } from "./usage.js";
import { MAX_NAME_LENGTH, MAX_PROMPT_LENGTH } from "./wire.js";

const ROLE_LABEL = { drive: "driver", view: "viewer" };
const OP_ERROR_MS = 8000;
// Errors said in words before the host's own message, which names what it refused. These codes
// answer other requests too (an unknown permission request, an agent that is not running): the
// words fit every use.
const ERROR_WORDS = {
  conversation_closed: "This conversation is closed: its agent stopped, so it takes no prompts or answers",
  unknown_request: "The host does not know what this asked for",
  agent_unavailable: "The agent is not available",
};
// How close to the end (px) still counts as "at the end": the page follows new items from there.
const FOLLOW_SLACK = 48;
// A scroll this soon (ms) after a wheel, touch, key or pointer press is the reader's own.
const USER_SCROLL_MS = 1500;
const SCROLL_UP_KEYS = new Set(["ArrowUp", "PageUp", "Home", " "]);
// People who left stay listed, greyed, so a reader sees who dropped; the oldest go first.
const MAX_GONE_MEMBERS = 8;
// Commands named in the conversation's note about the agent's commands; the rest are counted.
const COMMANDS_NAMED = 12;
// What each permission option kind means, shown on its button.
const OPTION_KIND_HINT = {
  allow_once: "Allow this once",
  allow_always: "Allow, and let the agent do this again without asking",
  reject_once: "Reject this once",
  reject_always: "Reject, and let the agent not ask for this again",
};

// A wire value inside a class name (a status, an option kind): one token of letters, digits, `_`
// and `-`, else "other". The class attribute splits on spaces, so "x screen blocking" would
// give the element the page's own full-window classes.
function classToken(value) {
  return typeof value === "string" && /^[A-Za-z0-9_-]{1,64}$/.test(value) ? value : "other";
}

/** The full-page screens by name; session.js FINAL_SCREENS picks one for each final ending. */
export const SCREENS = {
  "bad-link": {
    title: "This link does not work",
    body: "The share link is incomplete or no longer matches the host. Ask the host for a fresh link and open it exactly as sent (the part after # matters).",
  },
  "decrypt-failed": {
    title: "Messages could not be decrypted",
    body: "A message from the host did not authenticate, so the session was closed. The link may be out of date, or something between you and the host altered the traffic. Ask the host for a fresh link.",
  },
  revoked: {
    title: "This link was revoked",
    body: "The host revoked the share links. Ask the host for a new one.",
  },
  refused: {
    title: "The host declined",
    body: "The host did not admit this session.",
  },
  "host-id-in-use": {
    title: "Another host took over",
    body: "Another process is sharing with this host's key, so the relay closed this session. Ask the host which one is sharing, and for its link.",
  },
  "protocol-error": {
    title: "The host speaks another version",
    body: "The host (or the relay) answered in a way this page does not understand, so the session was closed. They probably run a different version of agent-tunnel than this page: ask the host to update, then reload this page.",
  },
  "needs-https": {
    title: "This page needs https",
    body: "End-to-end encryption uses the browser's WebCrypto, which only works on https (or on localhost). Ask whoever runs the relay to serve it over TLS, then open the link again with https://.",
  },
};

export class View {
  constructor(root, { role, name, onPrompt, onCancel, onPermission, onQuestion, onPaths, onSetting,
    onRetry, onRename, onTerminal, onFork = null }) {
    Object.assign(this, { root, role, name, onPrompt, onCancel, onPermission, onQuestion, onPaths,
      onSetting, onRetry, onRename, onTerminal, onFork });
    this.isDriver = role === "drive";
    // Tool calls by (turn, tool_call_id): an agent may reuse an id in a later turn.
    this.toolCards = new Map();
    // Title and kind of tool calls first seen in a permission request, by toolKey: the card an
    // update of that call makes later is named as the request named it.
    this.askedTools = new Map();
    this.toolTerminals = new ToolTerminals();
    this.permissions = new Map();
    this.decisions = new Map();
    // The agent's questions by request id, and answers that came before their question.
    this.questions = new Map();
    this.answers = new Map();
    this.streams = new Map();
    this.terminal = null;
    this.agentKind = "chat";
    this.opErrorTimer = null;
    // One plan card per turn, updated in place as the agent revises its plan.
    this.planCards = new Map();
    // Prompts stored while another turn runs: shown below that turn until their own starts.
    this.queuedPrompts = [];
    // What the status badge combines: the host's status event, its storage state, and the
    // permission requests still waiting for an answer.
    this.run = { state: "idle", queued: 0, turn: null };
    this.storageFailing = null;
    // Everyone seen attached, by name and role: those no longer here stay listed, greyed.
    this.members = new Map();
    // Whether the reader is at the end of the conversation: new items scroll into view only
    // then; otherwise a pill offers to jump down.
    this.following = true;
    this.lastScrollTop = 0;
    this.lastInput = -Infinity;
    // The request a tapped notification asked to show ({ requestId, optionId }), until shown;
    // and the card shown so while the snapshot came, which its end must not scroll away.
    this.wanted = null;
    this.wantedScroll = null;
    this.build();
  }

  build() {
    this.status = el("span", { class: "conn", testid: "connection-status", "data-state": "connecting", text: "Connecting…" });
    this.agentName = el("span", { class: "agent-name", testid: "agent-name", text: "" });
    this.agentStatus = el("span", { class: "agent-status", testid: "agent-status", "data-state": "idle", text: "idle" });
    // How far the agent reaches on the host (the ready message's `sandbox`); hidden until known.
    this.sandboxBadge = el("span", { class: "sandbox", testid: "sandbox", hidden: true });
    this.roleBadge = el("span", { class: `role role-${this.role}`, testid: "role-badge", text: ROLE_LABEL[this.role] ?? this.role });
    this.nameInput = el("input", {
      class: "name-input", testid: "name-input", value: this.name, maxlength: MAX_NAME_LENGTH,
      "aria-label": "Your name", title: "Your name, as the host and teammates see it",
      onchange: () => this.onRename(this.nameInput.value.trim()),
    });
    this.presenceList = el("ul", { class: "presence", testid: "presence" });
    // At narrow widths the side panel (people, plan, name) is a drawer this button opens.
    this.drawerButton = el("button", {
      class: "drawer-toggle", testid: "drawer-toggle", type: "button", "aria-expanded": "false",
      "aria-controls": "side-panel", text: "People", onclick: () => this.toggleDrawer(),
    });
    this.nameSlot = el("span", { class: "name-slot" }, this.nameInput);
    const header = el("header", { class: "top" },
      el("span", { class: "top-agent" },
        el("span", { class: "brand", text: "agent-tunnel" }), this.agentName, this.agentStatus),
      this.status, this.sandboxBadge,
      el("span", { class: "spacer" }),
      el("span", { class: "top-you" }, this.roleBadge, this.nameSlot, this.drawerButton));

    this.conversation = el("section", { class: "conversation", testid: "conversation", "aria-live": "polite" });
    this.emptyHint = el("div", { class: "empty-hint", testid: "empty-conversation" },
      el("p", { class: "empty-title", text: "Nothing here yet" }),
      el("p", { text: this.isDriver
        ? "Write to the agent in the box below: everyone with this session's link sees the conversation live, and drivers answer its permission requests."
        : "When a driver prompts the agent, the conversation shows here live. Your link is read-only." }));
    this.streamArea = el("div", { class: "streams", testid: "streams" });
    this.queueArea = el("div", { class: "queued-prompts", testid: "queued-prompts" });
    this.terminalBox = el("div", { class: "terminal-box", testid: "terminal", hidden: true });
    this.planPanel = el("div", { class: "live-plan", testid: "live-plan", hidden: true });
    this.drawerName = el("div", { class: "drawer-name" },
      el("h2", { text: "Your name" }));
    this.sandboxDetail = el("p", { class: "sandbox-detail", testid: "sandbox-detail", hidden: true });
    this.side = el("aside", { class: "side", id: "side-panel", testid: "side-panel" },
      el("button", { class: "drawer-close", type: "button", text: "Close", "aria-label": "Close the panel",
        onclick: () => this.toggleDrawer(false) }),
      el("h2", { text: "Here now" }), this.presenceList,
      this.drawerName, this.sandboxDetail,
      this.planPanel);
    this.backdrop = el("div", { class: "backdrop", onclick: () => this.toggleDrawer(false) });
    const main = el("main", { class: "main" },
      el("div", { class: "column" }, this.terminalBox, this.conversation, this.emptyHint,
        this.streamArea, this.queueArea),
      this.side, this.backdrop);
    // The name field lives in the header, or in the drawer when the header is too narrow.
    this.narrow = window.matchMedia("(max-width: 760px)");
    this.narrow.addEventListener("change", () => this.placeNameField());
    document.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && this.root.classList.contains("drawer-open")) this.toggleDrawer(false);
    });
    window.addEventListener("scroll", () => this.onScroll(), { passive: true });
    const scrolling = (event) => {
      if (event.type === "keydown") {
        const editing = event.target instanceof Element && event.target.closest("input, textarea, select");
        if (editing || !SCROLL_UP_KEYS.has(event.key)) return;
      }
      // A press on the page's own scrollbar targets the root element; a click on a button does not.
      if (event.type === "pointerdown" && event.target !== document.documentElement) return;
      this.lastInput = performance.now();
    };
    for (const type of ["wheel", "touchmove", "keydown", "pointerdown"]) {
      window.addEventListener(type, scrolling, { passive: true });
    }
    // Whatever makes the conversation taller (a streamed reply, a terminal's output, a card
    // filled in later) keeps a following reader at the end.
    new ResizeObserver(() => { if (this.following) this.jumpToEnd(); }).observe(main);

    this.footer = el("footer", { class: "bottom" });
    // The side panel fits between the header and the footer, whose height changes with what it
    // holds (app.css, .side).
    new ResizeObserver(() => {
      this.root.style.setProperty("--bottom-height", `${this.footer.offsetHeight}px`);
    }).observe(this.footer);
    this.settings = new SettingsBar({
      editable: this.isDriver,
      onChange: (entry, value) => {
        if (this.onSetting(entry, value)) return true;
        this.opError("not_connected", "Not connected to the host; the change was not sent.");
        return false;
      },
    });
    this.usage = new UsageLine();
    this.footer.append(this.settings.element, this.usage.element);
    if (this.isDriver) {
      this.input = el("textarea", {
        class: "composer-input", testid: "composer-input", rows: 2,
        placeholder: "Message the agent",
        "aria-label": "Message",
        "aria-describedby": "composer-hint",
        oninput: () => { this.composerError.hidden = true; },
        onkeydown: (event) => {
          if (this.completion.keydown(event) || this.paths.keydown(event)) return;
          if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
            event.preventDefault();
            this.submit();
          }
        },
      });
      this.sendButton = el("button", { class: "send", testid: "send-button", type: "submit", text: "Send" });
      this.cancelButton = el("button", {
        class: "cancel", testid: "cancel-button", type: "button", text: "Cancel", disabled: true,
        onclick: () => this.onCancel(),
      });
      this.completion = new CommandCompletion(this.input);
      this.paths = new PathCompletion(this.input, (prefix) => this.onPaths(prefix));
      this.images = new PromptImages({ onError: (text) => this.opError("image", text) });
      // Images pasted or dropped go with the next prompt; other pastes are the textarea's.
      this.input.addEventListener("paste", (event) => {
        if (this.images.addFiles(event.clipboardData?.files ?? [])) event.preventDefault();
      });
      this.composer = el("form", {
        class: "composer", testid: "composer",
        onsubmit: (event) => { event.preventDefault(); this.submit(); },
        ondragover: (event) => event.preventDefault(),
        ondrop: (event) => {
          event.preventDefault();
          this.images.addFiles(event.dataTransfer?.files ?? []);
        },
      }, this.completion.element, this.paths.element, this.input, this.sendButton, this.cancelButton);
      this.composerError = el("div", { class: "composer-error", testid: "composer-error", role: "alert", hidden: true });
      this.footer.append(this.images.element, this.composer, this.composerError, el("div", {
        class: "composer-hint", id: "composer-hint",
        text: "Enter sends, Shift+Enter starts a new line, / lists the agent's commands",
      }));
    } else {
      this.footer.append(el("div", {
        class: "viewer-notice", testid: "viewer-notice",
        text: "You are viewing this session read-only: your link cannot send prompts or answer permission requests.",
      }));
    }
    this.pill = el("button", { class: "new-activity", testid: "new-activity", type: "button", hidden: true,
      text: "New activity ↓", onclick: () => this.jumpToEnd() });
    this.footer.prepend(this.pill);
    // The conversation shown was closed: its log stays readable, its agent is gone.
    this.closedNotice = el("div", { class: "closed-notice", testid: "conversation-closed", hidden: true,
      text: "This conversation is closed: its agent stopped and its log stays to read. Start a new one or switch to another." });
    this.footer.prepend(this.closedNotice);
    this.toast = el("div", { class: "toast", testid: "op-error", role: "alert", hidden: true });
    this.screenBox = el("div", { class: "screen-box" });
    this.header = header;
    this.root.replaceChildren(header, main, this.footer, this.toast, this.screenBox);
    this.placeNameField();
  }

  placeNameField() {
    const slot = this.narrow.matches ? this.drawerName : this.nameSlot;
    if (this.nameInput.parentElement !== slot) slot.append(this.nameInput);
  }

  toggleDrawer(open = !this.root.classList.contains("drawer-open")) {
    this.root.classList.toggle("drawer-open", open);
    this.drawerButton.setAttribute("aria-expanded", String(open));
  }

  submit() {
    const text = this.input.value;
    if (!text.trim()) return;
    // The host refuses a longer prompt (MAX_PROMPT_LENGTH, counted in code points as Python
    // counts): say so here and keep the text, rather than send it to be refused.
    const length = [...text].length;
    if (length > MAX_PROMPT_LENGTH) {
      this.composerError.textContent = `Prompt too long: ${MAX_PROMPT_LENGTH.toLocaleString("en-US")} characters at most (this one has ${length.toLocaleString("en-US")}).`;
      this.composerError.hidden = false;
      return;
    }
    this.composerError.hidden = true;
    if (this.onPrompt(text, this.images.list())) {
      this.input.value = "";
      this.images.clear();
      this.completion.close();
    } else {
      this.opError("not_connected", "Not connected to the host; the message was not sent.");
    }
  }

  // ---- connection and screens ----

  connection(state, detail = {}) {
    const labels = {
      connecting: "Connecting…",
      connected: "Connected",
      reconnecting: "Reconnecting…",
      "host-offline": "Host offline",
      closed: "Disconnected",
    };
    this.status.dataset.state = state;
    this.status.textContent = labels[state] ?? state;
    this.root.dataset.connection = state;
    if (state === "connected") {
      this.clearScreen("host-offline");
      this.releasePending();
    }
    if (state === "host-offline") this.hostOffline(detail.retryInMs ?? 0);
    if (this.composer) {
      const live = state === "connected";
      this.sendButton.disabled = !live;
    }
  }

  hostOffline(retryInMs) {
    const seconds = Math.max(1, Math.round(retryInMs / 1000));
    const body = `The host is not connected to the relay right now. This page keeps trying (next try in ${seconds} s) and picks up where it left off.`;
    this.showScreen("host-offline", "The host is offline", body, { blocking: false, retry: true });
  }

  finalScreen(name, { code } = {}) {
    const screen = SCREENS[name] ?? { title: "Disconnected", body: "" };
    this.showScreen(name, screen.title, code ? `${screen.body} (close code ${code})` : screen.body,
      { blocking: true });
    if (this.composer) this.composer.hidden = true;
  }

  showScreen(name, title, body, { blocking = true, retry = false } = {}) {
    this.clearScreen();
    const box = el("div", { class: `screen ${blocking ? "blocking" : "notice"}`, testid: `screen-${name}`, role: "alert" },
      el("div", { class: "screen-card" },
        el("h1", { text: title }),
        el("p", { text: body }),
        retry ? el("button", { type: "button", testid: "retry-now", text: "Try now", onclick: () => this.onRetry() }) : null));
    this.screenBox.append(box);
  }

  clearScreen(name = null) {
    for (const screen of [...this.screenBox.children]) {
      if (name === null || screen.dataset.testid === `screen-${name}`) screen.remove();
    }
  }

  // ---- session messages ----

  ready(info) {
    const agent = info.agent && typeof info.agent === "object" ? info.agent : {};
    this.agentName.textContent = str(agent.name, "agent");
    this.agentKind = agent.kind === "terminal" ? "terminal" : "chat";
    document.title = `${str(agent.name, "agent")} · agent-tunnel`;
    if (this.agentKind === "terminal") {
      // The size the host's program draws for: its screen is shown at that size, not reflowed.
      const size = obj(info.terminal);
      this.ensureTerminal().hostSize(size.cols, size.rows);
    }
    if (this.composer) this.composer.hidden = this.agentKind === "terminal";
    // A terminal program has no turns: "idle" would say nothing about it.
    this.agentStatus.hidden = this.agentKind === "terminal";
    this.showSandbox(info.sandbox);
  }

  showSandbox(sandbox) {
    const badge = this.sandboxBadge;
    // A host too old to say: claim nothing either way.
    badge.hidden = !sandbox || typeof sandbox !== "object";
    this.sandboxDetail.hidden = badge.hidden;
    if (badge.hidden) return;
    this.showSandboxBadge(badge, sandbox);
    // The tooltip does not exist on touch screens: the drawer says it in full.
    this.sandboxDetail.textContent = badge.title;
  }

  showSandboxBadge(badge, sandbox) {
    const enabled = sandbox.enabled === true;
    badge.dataset.enabled = String(enabled);
    if (!enabled) {
      badge.textContent = "not sandboxed";
      badge.title = "The agent runs with the host user's rights: a driver can make it read, " +
        "change or send anything that user can.";
      return;
    }
    const writable = Array.isArray(sandbox.writable)
      ? sandbox.writable.filter((path) => typeof path === "string") : [];
    const where = writable.length ? writable.join(", ") : "nothing";
    const network = sandbox.network !== false;
    badge.dataset.network = String(network);
    badge.textContent = `sandboxed · writes ${where} · ${network ? "network on" : "no network"}`;
    badge.title = `The agent runs in a sandbox on the host: it can write only in ${where}, sees ` +
      "the system read-only and none of the host user's files but those the host allowed; " +
      (network ? "it can reach the network." : "it has no network.");
  }

  resetConversation() {
    this.conversation.replaceChildren();
    this.streamArea.replaceChildren();
    this.toolCards.clear();
    this.askedTools.clear();
    this.toolTerminals.clear();
    this.permissions.clear();
    this.decisions.clear();
    this.streams.clear();
    this.planCards.clear();
    this.queueArea.replaceChildren();
    this.queuedPrompts = [];
    this.showStatus();
    this.settings.reset();
    this.usage.reset();
    if (this.completion) this.completion.reset();
    if (this.terminal) this.terminal.reset();
  }

  // ---- switching conversations (session.js switchTo) ----

  /** Leaving the conversation shown for another: what to keep of it (scroll, draft). */
  leaveConversation() {
    const scroller = document.scrollingElement;
    const kept = {
      scrollTop: scroller ? scroller.scrollTop : 0,
      following: this.following,
      draft: this.input ? this.input.value : "",
    };
    if (this.input) this.input.value = "";
    this.images?.clear();
    this.completion?.close();
    delete this.conversation.dataset.loaded;
    this.run = { state: "idle", queued: 0, turn: null };
    this.storageFailing = null;
    this.members.clear();
    this.wanted = null;
    this.wantedScroll = null;
    this.setClosed(false);
    return kept;
  }

  /** Another conversation is shown: the draft it had when left (`kept`, or null if new). */
  enterConversation(kept) {
    if (this.input) this.input.value = kept?.draft ?? "";
    this.following = kept ? kept.following : true;
  }

  /** The conversation switched back to is shown again: the reader is where they left it. */
  returnTo(kept) {
    if (kept.following) {
      this.jumpToEnd();
      return;
    }
    this.following = false;
    document.scrollingElement.scrollTop = kept.scrollTop;
    this.lastScrollTop = kept.scrollTop;
  }

  /** Whether the conversation shown is closed (the host's list says so). */
  setClosed(closed) {
    this.closedNotice.hidden = !closed;
    this.root.dataset.conversationClosed = closed ? "true" : "false";
  }

  snapshotDone() {
    this.conversation.dataset.loaded = "true";
    // A request a tapped notification asked for, shown during the snapshot, stays in view.
    const wanted = this.wantedScroll;
    this.wantedScroll = null;
    if (wanted?.isConnected) {
      this.following = false;
      wanted.scrollIntoView({ block: "center" });
    } else {
      this.jumpToEnd();
    }
  }

  /**
   * "Load earlier" above the conversation while the host holds items before those shown
   * (session.js says so, and what a click calls); disabled while a page is on its way.
   */
  earlier({ available, loading }, load) {
    if (!this.earlierButton) {
      this.earlierButton = el("button", { class: "load-earlier", testid: "load-earlier",
        type: "button", hidden: true, onclick: () => this.loadEarlier() });
      this.conversation.before(this.earlierButton);
    }
    this.loadEarlier = load;
    this.earlierButton.hidden = !available;
    this.earlierButton.disabled = loading;
    this.earlierButton.textContent = loading ? "Loading earlier items…" : "Load earlier";
  }

  /**
   * Show `items`, every item held in seq order, afresh: a page of earlier ones came. Earlier
   * items change how later ones show (a tool call's card, an answered permission, the current
   * settings), so the conversation is rebuilt as a replay from its first item would show it.
   * Text still streaming in stays, and the reader stays at the same place in the conversation.
   */
  replayItems(items, context = []) {
    const scroller = document.scrollingElement;
    const fromEnd = scroller ? scroller.scrollHeight - scroller.scrollTop : 0;
    const streams = new Map(this.streams);
    const streaming = [...this.streamArea.childNodes];
    const { loaded } = this.conversation.dataset;
    this.resetConversation();
    this.streams = streams;
    this.streamArea.replaceChildren(...streaming);
    // As during a snapshot: nothing follows the end or marks a prompt queued meanwhile.
    delete this.conversation.dataset.loaded;
    this.context(context);
    for (const item of items) this.item(item);
    if (loaded) this.conversation.dataset.loaded = loaded;
    // The prompts that still wait were shown as stored: the status says which they are.
    this.queueStored();
    // The reader went up to read: the taller page must not take them to the end. Back at the
    // end, the scroll event says so and following resumes.
    this.following = false;
    if (scroller) scroller.scrollTop = scroller.scrollHeight - fromEnd;
  }

  /**
   * State from before the items shown (the snapshot's `context`, docs/application.md): the
   * agent's settings and commands and the latest plan apply without a line in the conversation;
   * an open permission request shows, in the card of the tool call it gates: it is to be answered.
   */
  context(items) {
    for (const item of items) {
      const data = obj(item.data);
      if (item.type === "session_event" && data.what === "usage") {
        this.usage.update(data);
      } else if (item.type === "session_event" && data.what === "settings") {
        this.settings.update(data, str(item.created_by, "someone"));
      } else if (item.type === "session_event" && data.what === "commands") {
        if (this.completion) this.completion.setCommands(commandList(data));
      } else if (item.type === "plan") {
        this.livePlan(arr(data.entries));
      } else if (item.type === "tool_call" || item.type === "permission_request"
        || item.type === "elicitation_request") {
        this.item(item);
      }
    }
  }

  /**
   * Who is here: `members`, those the host lists (the first to attach), and `count`, everyone
   * attached; `told`, whether the host said which member this page is (listed or not).
   */
  presence(members, { count = members.length, told = false } = {}) {
    const here = members.map((member) => ({ name: str(member.name, "?"), role: str(member.role),
      verified: member.verified === true, you: member.you === true }));
    // The host says which member this page is; a host from before that leaves a guess by name.
    told ||= here.some((member) => member.you);
    const now = Date.now();
    for (const entry of this.members.values()) entry.here = false;
    for (const member of here) {
      this.members.set(`${member.role}\u0000${member.name}`, { ...member, here: true, seen: now });
    }
    // Who left (or, while this page is disconnected, who it can no longer see), newest first.
    const gone = [...this.members.values()]
      .filter((entry) => !entry.here && !(entry.name === this.name && entry.role === this.role))
      .sort((a, b) => b.seen - a.seen).slice(0, MAX_GONE_MEMBERS);
    for (const [key, entry] of this.members) if (!entry.here && !gone.includes(entry)) this.members.delete(key);
    let youMarked = false;
    const rows = here.map((member) => {
      // Two tabs under one name look the same to everyone else; mark one of them.
      const you = told ? member.you
        : !youMarked && member.name === this.name && member.role === this.role;
      youMarked ||= you;
      return el("li", {
        testid: "presence-member", "data-role": member.role, "data-name": member.name,
        "data-you": you ? "true" : null, class: you ? "you" : null,
        // A personal link's name is the host's; any other is the one its holder typed.
        "data-verified": member.verified ? "true" : "false",
        title: member.verified ? "Invited by the host under this name" : "Name typed by its holder",
      }, el("span", { class: "who", text: member.name }),
      you ? el("span", { class: "you-mark", text: "you" }) : null,
      el("span", { class: "what", text: ROLE_LABEL[member.role] ?? member.role }));
    });
    const unlisted = count - here.length;
    if (unlisted > 0) {
      rows.push(el("li", { class: "more", testid: "presence-more", text: `and ${unlisted} more` }));
    }
    for (const entry of gone) {
      rows.push(el("li", {
        class: "gone", testid: "presence-gone", "data-role": entry.role, "data-name": entry.name,
        title: "Not attached now",
      }, el("span", { class: "who", text: entry.name }),
      el("span", { class: "what", text: "away" })));
    }
    this.presenceList.replaceChildren(...rows);
    this.drawerButton.textContent = `People · ${Math.max(count, here.length)}`;
  }

  opError(code, message) {
    this.toast.hidden = false;
    this.toast.dataset.code = code;
    const words = Object.hasOwn(ERROR_WORDS, code) ? ERROR_WORDS[code] : null;
    this.toast.textContent = words ? (message ? `${words} (${message}).` : `${words}.`)
      : message ? `${message} (${code})` : code;
    // Perhaps a change of setting or an answer the host refused.
    this.releasePending();
    clearTimeout(this.opErrorTimer);
    this.opErrorTimer = setTimeout(() => { this.toast.hidden = true; }, OP_ERROR_MS);
  }

  /**
   * Settings and permission answers sent and waiting for the host's record: show what is
   * recorded and let a driver choose again. After an error (the host refused), and after a
   * reconnect (an answer to what was sent may have been lost with the old attachment).
   */
  releasePending() {
    this.settings.refresh();
    for (const entry of this.permissions.values()) {
      if (entry.element.dataset.state !== "pending") continue;
      for (const button of entry.buttons) {
        button.disabled = false;
        button.classList.remove("sent");
      }
    }
  }

  event(event) {
    const data = event.data && typeof event.data === "object" ? event.data : {};
    switch (event.kind) {
      case "delta":
        this.delta(data);
        break;
      case "status": {
        const running = data.state === "running";
        this.run = {
          state: running ? "running" : "idle",
          queued: Number.isInteger(data.queued) && data.queued > 0 ? data.queued : 0,
          // The seq of the prompt the running turn answers; a host from before it says only
          // how many wait.
          turn: running && Number.isInteger(data.turn) ? data.turn : null,
        };
        if (this.cancelButton) this.cancelButton.disabled = !running;
        this.settleQueue(this.run.turn);
        this.queueStored();
        this.showStatus();
        break;
      }
      case "terminal_size":
        if (this.terminal) this.terminal.hostSize(data.cols, data.rows);
        break;
      case "storage":
        // The host's log cannot be written: it pauses the session until it can (docs/log.md).
        this.storageFailing = data.state === "ok" ? null : str(data.reason, "error");
        if (data.state === "ok") this.run = { state: "idle", queued: 0, turn: null };
        this.showStatus();
        break;
      case "plan":
        this.livePlan(Array.isArray(data.entries) ? data.entries : []);
        break;
      case "tool_terminal":
        this.toolTerminals.event(data);
        break;
      default:
        break;
    }
  }

  /** The status badge: paused, waiting for an answer, working (and how many wait), or idle. */
  showStatus() {
    const badge = this.agentStatus;
    const pending = (entries) => [...entries].filter((entry) => entry.element.dataset.state === "pending").length;
    const asked = pending(this.questions.values());
    const waiting = pending(this.permissions.values()) + asked;
    if (this.storageFailing !== null) {
      badge.dataset.state = "paused";
      badge.textContent = `paused: the host's log cannot be written (${this.storageFailing})`;
    } else if (waiting > 0) {
      badge.dataset.state = "waiting";
      // A question of the agent's waits for an answer, a permission request for approval.
      const what = asked === waiting ? "waiting for an answer" : "waiting for approval";
      badge.textContent = waiting > 1 ? `${what} (${waiting})` : what;
    } else if (this.run.state === "running") {
      badge.dataset.state = "running";
      badge.textContent = this.run.queued > 0 ? `working (${this.run.queued} queued)` : "working";
    } else {
      badge.dataset.state = "idle";
      badge.textContent = "idle";
    }
  }

  delta(data) {
    const responseId = str(data.response_id);
    const channel = data.channel === "reasoning" ? "reasoning" : "message";
    const key = `${responseId}\u0000${channel}`;
    let stream = this.streams.get(key);
    if (!stream) {
      const body = el("div", { class: "md" });
      const element = channel === "reasoning"
        ? el("details", { class: "item reasoning streaming", testid: "stream", "data-channel": channel },
          el("summary", { text: "Thinking…" }), body)
        : el("article", { class: "item message agent streaming", testid: "stream", "data-channel": channel },
          el("div", { class: "who", text: this.agentName.textContent || "agent" }), body);
      stream = { element, body, text: "", pending: false };
      this.streams.set(key, stream);
      this.streamArea.append(element);
    }
    stream.text += str(data.text);
    // Re-render at most once per frame, however fast the chunks come.
    if (!stream.pending) {
      stream.pending = true;
      requestAnimationFrame(() => {
        stream.pending = false;
        setMarkdown(stream.body, stream.text);
        this.follow();
      });
    }
  }

  endStream(responseId, channel) {
    const key = `${responseId}\u0000${channel}`;
    const stream = this.streams.get(key);
    if (stream) {
      stream.element.remove();
      this.streams.delete(key);
    }
  }

  livePlan(entries) {
    this.planPanel.hidden = entries.length === 0;
    this.planPanel.replaceChildren(el("h2", { text: "Plan" }), this.planList(entries));
  }

  planList(entries) {
    return el("ol", { class: "plan" }, ...entries.map((entry) => el("li", {
      class: `plan-entry status-${classToken(entry.status)}`, "data-status": str(entry.status),
    }, el("span", { class: "mark", "aria-hidden": "true" }), el("span", { text: str(entry.content) }))));
  }

  // ---- items ----

  item(item) {
    const data = item.data && typeof item.data === "object" ? item.data : {};
    let element = null;
    // An item of a turn means that turn's prompt has started, whatever the status said.
    if (Number.isInteger(data.turn)) this.settleQueue(data.turn);
    switch (item.type) {
      case "message":
        element = this.messageItem(item, data);
        if (data.role === "user" && this.run.state === "running" && this.conversation.dataset.loaded === "true") {
          // Another turn is running: this prompt waits for it (the next status says how long).
          this.markQueued(element);
        }
        break;
      case "reasoning":
        this.endStream(str(item.response_id), "reasoning");
        element = el("details", { class: "item reasoning", testid: "reasoning" },
          el("summary", { text: "Reasoning" }), this.markdownBlock(data.text));
        break;
      case "tool_call":
      case "tool_call_update":
        element = this.toolCall(item, data);
        break;
      case "tool_result":
        element = this.toolResult(item, data);
        break;
      case "tool_terminal":
        element = this.toolTerminal(item, data);
        break;
      case "permission_request":
        element = this.permissionRequest(item, data);
        break;
      case "permission_decision":
        element = this.permissionDecision(item, data);
        break;
      case "permission_approval":
        element = this.permissionApproval(item, data);
        break;
      case "elicitation_request":
        element = this.question(data);
        break;
      case "elicitation_response":
        this.questionAnswer(item, data);
        break;
      case "plan":
        element = this.planItem(item, data);
        break;
      case "error":
        element = el("article", { class: "item error", testid: "error-item", role: "note" },
          el("div", { class: "label", text: "Error" }), el("pre", { text: str(data.message, pretty(data)) }));
        break;
      case "terminal":
        this.ensureTerminal().write(str(data.text));
        break;
      case "terminal_exit":
        element = this.note(item, data.code === null || data.code === undefined
          ? "The terminal program exited." : `The terminal program exited with code ${data.code}.`);
        break;
      case "session_event":
        element = this.sessionEvent(item, data);
        break;
      case "unsupported_update":
        element = this.note(item, `unsupported update: ${str(data.kind, "?")}`, "unsupported-update");
        break;
      default:
        element = el("article", { class: "item generic", testid: "item-generic" },
          el("div", { class: "label", text: str(item.type, "item") }),
          el("pre", { text: pretty(data) }));
        break;
    }
    if (element) {
      element.dataset.seq = String(item.seq);
      element.dataset.type = str(item.type);
      if (element.dataset.queued === "true") {
        this.queueArea.append(element);
      } else if (!element.isConnected) {
        this.conversation.append(element);
      }
    }
    // Even an item folded into an earlier card (an update, a result, an answer) is news.
    this.follow({ focus: item.type === "permission_request" ? element : null });
    const asks = item.type === "permission_request" || item.type === "elicitation_request";
    if (asks && this.wanted?.requestId === str(data.request_id)) this.showWanted();
  }

  /**
   * Bring the reader to a permission request or a question of the agent's (a tapped
   * notification), with `optionId`, the option tapped there, marked for one confirming tap: it is
   * never sent from here. A request not on the page yet is shown when it arrives.
   */
  openRequest(requestId, optionId = null) {
    this.wanted = { requestId, optionId };
    this.showWanted();
  }

  showWanted() {
    const { requestId, optionId } = this.wanted;
    const question = this.questions.get(requestId);
    const entry = this.permissions.get(requestId) ?? question;
    if (!entry || !entry.element.isConnected) return;
    this.wanted = null;
    for (const shown of this.conversation.querySelectorAll("[data-wanted]")) delete shown.dataset.wanted;
    entry.element.dataset.wanted = "true";
    if (entry !== question) this.preselect(entry, optionId);
    // The reader came for this request: later items must not scroll it away.
    this.following = false;
    if (this.conversation.dataset.loaded !== "true") this.wantedScroll = entry.element;
    entry.element.scrollIntoView({ block: "center" });
  }

  /** Mark the option a notification's tap chose on a permission card, for one confirming tap. */
  preselect(entry, optionId) {
    entry.confirm?.remove();
    entry.confirm = null;
    for (const button of entry.buttons) delete button.dataset.preselected;
    const button = entry.buttons.find((b) => b.dataset.optionId === optionId);
    if (button && entry.element.dataset.state === "pending") {
      button.dataset.preselected = "true";
      entry.confirm = el("div", { class: "confirm-hint", testid: "permission-confirm",
        text: `Chosen in the notification: tap “${button.textContent}” to answer.` });
      entry.element.querySelector(".options").before(entry.confirm);
    }
  }

  /**
   * The plan of a turn: one card, updated in place each time the agent revises it (every
   * revision is stored; the card keeps the seq of the first and shows the latest).
   */
  planItem(item, data) {
    const entries = arr(data.entries);
    this.livePlan(entries);
    const turn = Number.isInteger(data.turn) ? data.turn : null;
    let card = turn === null ? null : this.planCards.get(turn);
    const created = !card;
    if (!card) {
      card = el("article", { class: "item plan-item", testid: "plan", "data-turn": turn, "data-revisions": "0" });
      if (turn !== null) this.planCards.set(turn, card);
    }
    const done = entries.filter((entry) => obj(entry).status === "completed").length;
    card.dataset.revisions = String(Number(card.dataset.revisions) + 1);
    card.dataset.latestSeq = String(item.seq);
    card.replaceChildren(
      el("div", { class: "plan-head" }, el("span", { class: "label", text: "Plan" }),
        el("span", { class: "plan-progress", testid: "plan-progress", text: `${done} of ${entries.length} done` })),
      this.planList(entries));
    return created ? card : null;
  }

  /** Label a prompt's element queued; it waits, in `queuedPrompts`, until its turn starts. */
  markQueued(element) {
    element.dataset.queued = "true";
    element.classList.add("queued");
    element.append(el("div", { class: "queued-label", testid: "queued-label",
      text: "Queued: runs when the agent is done with the turn above" }));
    this.queuedPrompts.push(element);
  }

  /**
   * Prompts already shown that the host's status says still wait: those stored after the
   * prompt the running turn answers (prompts run in the order they were stored). A page that
   * joined mid-turn, or rebuilt its view, learns it only so; they move below the turn.
   */
  queueStored() {
    const { turn } = this.run;
    if (turn === null || this.conversation.dataset.loaded !== "true") return;
    const waiting = [...this.conversation.querySelectorAll('[data-testid="message"][data-role="user"]')]
      .filter((element) => Number(element.dataset.seq) > turn);
    for (const element of waiting) {
      this.markQueued(element);
      this.queueArea.append(element);
    }
    this.queuedPrompts.sort((a, b) => Number(a.dataset.seq) - Number(b.dataset.seq));
    this.queueArea.append(...this.queuedPrompts);
  }

  /**
   * Prompts stored while a turn runs wait below it, marked queued. The host's status says how
   * many still wait: the others have started, in order, so they join the conversation here,
   * after the turn that ran before them.
   */
  settleQueue(startedTurn = null) {
    while (this.queuedPrompts.length > 0) {
      const next = this.queuedPrompts[0];
      // An item names the turn it belongs to, and so does a host's status while a turn runs;
      // an older host's status only how many still wait (and may come after the running turn's
      // next items, so those do not count against it).
      const started = startedTurn !== null
        ? Number(next.dataset.seq) <= startedTurn
        : this.queuedPrompts.length > this.run.queued;
      if (!started) break;
      this.queuedPrompts.shift();
      delete next.dataset.queued;
      next.classList.remove("queued");
      next.querySelector(".queued-label")?.remove();
      this.conversation.append(next);
    }
  }

  sessionEvent(item, data) {
    if (data.what === "turn_ended" && data.stop_reason === "cancelled") this.closeCancelledTools(data.turn);
    if (data.what === "usage") {
      // State, not news: the line under the settings bar, no note in the conversation.
      this.usage.update(data);
      return null;
    }
    const element = this.sessionEventElement(item, data);
    element.dataset.what = str(data.what);
    return element;
  }

  /**
   * A cancelled turn's tool calls still open are over: each is shown failed (attach does the
   * same); an agent's own update saying so later changes nothing.
   */
  closeCancelledTools(turn) {
    if (!Number.isInteger(turn)) return;
    for (const [key, card] of this.toolCards) {
      if (!key.startsWith(`${turn}\u0000`)) continue;
      if (card.call.status === "completed" || card.call.status === "failed") continue;
      card.call.status = "failed";
      this.renderTool(card);
    }
  }

  sessionEventElement(item, data) {
    const by = str(item.created_by, "someone");
    switch (data.what) {
      case "settings": {
        this.settings.update(data, by);
        const note = this.note(item, settingsText(data, by), "settings-note");
        if (data.change && typeof data.change === "object") note.dataset.changedBy = by;
        return note;
      }
      case "commands": {
        const commands = commandList(data);
        if (this.completion) this.completion.setCommands(commands);
        const named = commands.slice(0, COMMANDS_NAMED).map((command) => `/${command.name}`);
        const more = commands.length - named.length;
        const text = commands.length === 0 ? "The agent offers no commands."
          : `The agent's commands: ${named.join(", ")}${more > 0 ? ` and ${more} more` : ""}`;
        return this.note(item, text, "commands-note");
      }
      case "unsupported_update":
        return this.note(item, `unsupported update: ${str(data.kind, "?")}`, "unsupported-update");
      case "auth_required":
        return loginCard(item, data, this.isDriver);
      default:
        return this.note(item, this.sessionEventText(data));
    }
  }

  sessionEventText(data) {
    const what = str(data.what, "event");
    const text = {
      agent_started: "The agent started.",
      agent_exited: "The agent exited.",
      authenticated: `The agent is logged in (${str(data.method_id, "?")}).`,
      auth_failed: `The login (${str(data.method_id, "?")}) failed: ${str(data.reason, "?")}`,
      cancelled: "The turn was cancelled.",
      title: `The session is titled ${str(data.title, "?")}.`,
      fs_refused: `Refused: the agent's ${str(data.op, "access")} of ${str(data.path, "?")} is outside the workspace.`,
      terminal_refused: `Refused: the agent's command ${str(data.command, "?")} would run in ${str(data.cwd, "?")}, outside the workspace.`,
      context_attached: `With the prompt: ${arr(data.files).map(obj).map((file) =>
        `${str(file.path, "?")} (${file.embedded === true ? "its text" : "a link"})`).join(", ")}`,
    }[what];
    return text ?? what.replace(/_/g, " ");
  }

  note(item, text, testid = "note") {
    return el("div", { class: "item note", testid },
      el("span", { text }),
      el("time", { text: formatTime(item.created_at), datetime: str(item.created_at) }));
  }

  markdownBlock(text) {
    const block = el("div", { class: "md" });
    setMarkdown(block, str(text));
    return block;
  }

  messageItem(item, data) {
    const role = data.role === "user" ? "user" : "agent";
    if (role === "agent") this.endStream(str(item.response_id), "message");
    const who = role === "user" ? str(item.created_by, "someone") : (this.agentName.textContent || "agent");
    const images = arr(data.images).map(obj);
    // A driver may fork the conversation here: a new one with the items up to this one.
    const fork = this.isDriver && this.onFork && Number.isSafeInteger(item.seq)
      ? el("button", { class: "fork-here", testid: "fork-here", type: "button", text: "Fork from here",
        title: "Start a new conversation with the items up to this one",
        onclick: () => this.onFork(item.seq) })
      : null;
    return el("article", { class: `item message ${role}`, testid: "message", "data-role": role,
      "data-seq": Number.isSafeInteger(item.seq) ? item.seq : null },
      el("div", { class: "who" }, el("span", { text: who }),
        el("time", { text: formatTime(item.created_at), datetime: str(item.created_at) }), fork),
      this.markdownBlock(data.text),
      images.length > 0 ? el("div", { class: "message-images", testid: "message-images",
        text: `With ${images.length === 1 ? "an image" : `${images.length} images`}: ${images.map((image) =>
          `${str(image.mime_type, "?")}, ${Number.isSafeInteger(image.size) ? Math.ceil(image.size / 1024) : "?"} KiB`).join("; ")}` }) : null);
  }

  /** The key of a tool call: (turn, tool_call_id), since ids may repeat across turns. */
  toolKey(data) {
    const turn = Number.isInteger(data.turn) ? String(data.turn) : "";
    return `${turn}\u0000${str(data.tool_call_id)}`;
  }

  toolCall(item, data) {
    const key = this.toolKey(data);
    let card = this.toolCards.get(key);
    const created = !card;
    if (!card) {
      const id = str(data.tool_call_id);
      card = {
        element: el("article", { class: "item tool", testid: "tool-call", "data-tool-call-id": id,
          "data-turn": Number.isInteger(data.turn) ? data.turn : null }),
        call: { title: "", kind: "", status: "pending", input: undefined, content: [],
          locations: undefined, output: undefined, truncated: false, ...this.askedTools.get(key) },
        result: null,
        // The permission request that gates this call, shown inside the card.
        permission: null,
      };
      this.toolCards.set(key, card);
    }
    const { call } = card;
    if (typeof data.title === "string") call.title = data.title;
    if (typeof data.kind === "string") call.kind = data.kind;
    if (typeof data.status === "string") call.status = data.status;
    if ("input" in data) call.input = data.input;
    if (Array.isArray(data.content)) call.content = data.content;
    if (Array.isArray(data.locations)) call.locations = data.locations;
    if ("output" in data) call.output = data.output;
    if (data.truncated === true) call.truncated = true;
    this.renderTool(card);
    // An update re-renders the card where it first appeared; only a new card is appended.
    return created ? card.element : null;
  }

  toolResult(item, data) {
    const card = this.toolCards.get(this.toolKey(data));
    if (!card) {
      return el("article", { class: "item tool orphan", testid: "tool-result" },
        el("div", { class: "label", text: data.ok === false ? "Tool failed" : "Tool result" }),
        el("pre", { text: unfenced(str(data.output)) }));
    }
    card.result = { ok: data.ok !== false, output: str(data.output) };
    this.renderTool(card);
    return null;
  }

  renderTool(card) {
    const { element, call, result, permission } = card;
    element.dataset.status = call.status;
    const waiting = permission !== null && permission.element.dataset.state === "pending";
    element.toggleAttribute("data-waiting", waiting);
    const parts = [toolHead(call,
      el("span", { class: `tool-status status-${waiting ? "waiting" : classToken(call.status)}`, testid: "tool-status",
        text: waiting ? "waiting for approval" : call.status.replace(/_/g, " ") }))];
    // The request it waits for comes first: while it is open it shows what is asked in full,
    // so the card's own details wait for the answer.
    if (permission !== null) parts.push(permission.element);
    if (waiting) {
      element.replaceChildren(...parts);
      return;
    }
    // A tool that reports its output both as content (or raw output) and as its result shows it
    // once, as the result.
    parts.push(...toolDetails(call, this.toolTerminals,
      { showOutput: !result, skipText: result ? result.output : null }));
    if (result) {
      parts.push(el("div", { class: `tool-result ${result.ok ? "ok" : "failed"}`, testid: "tool-result" },
        el("div", { class: "label", text: result.ok ? "Result" : "Failed" }),
        el("pre", { text: unfenced(result.output) })));
    }
    element.replaceChildren(...parts);
  }

  toolTerminal(item, data) {
    // Shown inside the tool call whose content names it; on its own only if none does (yet).
    if (this.toolTerminals.item(data)) return null;
    return el("article", { class: "item tool terminal-only", testid: "tool-terminal-item" },
      el("div", { class: "label", text: "Terminal" }),
      this.toolTerminals.block(str(data.terminal_id), { standalone: true }));
  }

  permissionRequest(item, data) {
    const requestId = str(data.request_id);
    const call = obj(data.tool_call);
    const options = arr(data.options).map(obj);
    const buttons = [];
    const optionsBox = el("div", { class: "options", role: "group", "aria-label": "Answers" });
    // Every option the agent offered, in its order, each sending exactly its own id. None is
    // focused or chosen by default and no key picks one: an "always" answer is given only by
    // a person who clicks exactly it.
    for (const option of options) {
      const optionId = str(option.option_id);
      const kind = str(option.kind);
      const label = str(option.name, optionId);
      const hint = OPTION_KIND_HINT[kind] ?? kind;
      if (this.isDriver) {
        const button = el("button", {
          type: "button", class: `option kind-${classToken(kind)}`, testid: "permission-option",
          "data-option-id": optionId, "data-kind": kind, text: label, title: hint,
          onclick: () => {
            for (const b of buttons) b.disabled = true;
            button.classList.add("sent");
            if (!this.onPermission(requestId, optionId)) {
              for (const b of buttons) b.disabled = false;
              button.classList.remove("sent");
              this.opError("not_connected", "Not connected to the host; the answer was not sent.");
            }
          },
        });
        buttons.push(button);
        optionsBox.append(button);
      } else {
        optionsBox.append(el("span", { class: `option kind-${classToken(kind)}`, testid: "permission-option",
          "data-option-id": optionId, "data-kind": kind, text: label, title: hint }));
      }
    }
    const outcome = el("div", { class: "outcome", testid: "permission-outcome",
      text: this.isDriver ? "Waiting for an answer." : "Waiting for a driver to answer." });
    // Under the host's approval policy: who may answer, how many must approve, who did.
    const approval = data.approval && typeof data.approval === "object"
      ? el("div", { class: "approval", testid: "permission-approval", text: approvalText(data.approval),
        title: askedBy(data.approval) || null })
      : null;
    const title = str(data.title) || str(call.title) || "The agent asks for permission";
    // The tool call it gates, if shown: the request is shown in its card, and what the agent
    // told of the call before (its locations, say) completes what it asks about.
    const card = str(data.tool_call_id) ? this.toolCards.get(this.toolKey(data)) : undefined;
    const asked = card ? mergeCall(card.call, call) : call;
    if (!card && str(data.tool_call_id)) {
      this.askedTools.set(this.toolKey(data), Object.fromEntries(
        ["title", "kind"].filter((field) => str(call[field])).map((field) => [field, call[field]])));
    }
    // Everything decided on, unfolded while the request is open and folded once answered.
    const context = el("details", { class: "permission-context", open: true },
      el("summary", { text: "What the agent asks to do" }),
      el("div", { class: "permission-tool", testid: "permission-tool" },
        str(asked.title) && asked.title !== title
          ? el("div", { class: "tool-title", testid: "tool-title", text: asked.title }) : null,
        ...toolDetails(asked, this.toolTerminals, { open: true })));
    const element = el("article", {
      class: "item permission", testid: "permission-request", "data-request-id": requestId,
      "data-state": "pending", "data-tool-kind": str(call.kind) || null,
    }, el("div", { class: "label", text: "Permission requested" }),
    el("div", { class: "permission-title", testid: "permission-title" },
      call.kind ? el("span", { class: "tool-kind", testid: "tool-kind", text: str(call.kind) }) : null,
      el("span", { text: title })),
    context, approval, optionsBox, outcome);
    const entry = { element, buttons, outcome, context, card: null, approval: data.approval ?? null,
      approvalLine: approval };
    this.permissions.set(requestId, entry);
    // Inside the tool call it gates, when that card is shown: the story reads in order.
    if (card) {
      entry.card = card;
      card.permission = entry;
      element.classList.add("nested");
    }
    const decided = this.decisions.get(requestId);
    if (decided) this.markDecided(entry, decided);
    if (card) this.renderTool(card);
    this.showStatus();
    return element;
  }

  question(data) {
    const requestId = str(data.request_id);
    if (this.questions.has(requestId)) return null;
    const entry = questionCard(data, {
      isDriver: this.isDriver,
      onAnswer: (id, action, content) => this.onQuestion(id, action, content),
      onNotSent: () => this.opError("not_connected", "Not connected to the host; the answer was not sent."),
    });
    this.questions.set(requestId, entry);
    const answer = this.answers.get(requestId);
    if (answer) entry.close(...answer);
    this.showStatus();
    return entry.element;
  }

  questionAnswer(item, data) {
    const requestId = str(data.request_id);
    const answer = [str(item.created_by, "someone"), str(data.action), obj(data.content)];
    this.answers.set(requestId, answer);
    this.questions.get(requestId)?.close(...answer);
    this.showStatus();
  }

  permissionDecision(item, data) {
    const requestId = str(data.request_id);
    const cancelled = data.outcome === "cancelled";
    const decision = {
      by: str(item.created_by, "someone"),
      name: str(data.option_name, str(data.option_id)),
      optionId: str(data.option_id),
      kind: str(data.option_kind),
      cancelled,
    };
    decision.line = el("div", {
      class: "decision", testid: "permission-decision", "data-request-id": requestId,
      "data-option-id": decision.optionId, "data-option-kind": decision.kind || null,
      "data-outcome": cancelled ? "cancelled" : "selected", "data-by": decision.by,
      "data-decision-seq": String(item.seq),
    }, el("span", { text: cancelled
      ? `Cancelled by ${decision.by}${str(data.reason) ? `: ${data.reason}` : ""}`
      : decisionText(decision.by, data, decision.name) }),
    el("time", { text: formatTime(item.created_at), datetime: str(item.created_at) }));
    this.decisions.set(requestId, decision);
    const entry = this.permissions.get(requestId);
    if (entry) {
      // One line per answer: the request's own outcome line says who chose what.
      this.markDecided(entry, decision);
      return null;
    }
    // The request is not shown (it came before what this page loaded): the answer stands alone.
    decision.line.classList.add("item", "note");
    return decision.line;
  }

  /** One approval of a request that needs more: its line says who approved; it stays open. */
  permissionApproval(item, data) {
    const entry = this.permissions.get(str(data.request_id));
    const approved = arr(data.approved_by).map((name) => str(name));
    if (!entry || entry.approvalLine === null) {
      return this.note(item, `${str(item.created_by, "someone")} approved a permission request`);
    }
    entry.approvalLine.textContent = approvalText(entry.approval, approved);
    entry.approvalLine.dataset.approvedBy = approved.join(",");
    // Still open: the next person may answer (the one who approved is told if they try again).
    if (entry.element.dataset.state === "pending") {
      for (const button of entry.buttons) {
        button.disabled = false;
        button.classList.remove("sent");
      }
    }
    return null;
  }

  markDecided(entry, decision) {
    entry.element.dataset.state = "answered";
    entry.confirm?.remove();
    entry.confirm = null;
    entry.element.dataset.outcome = decision.cancelled ? "cancelled" : "selected";
    for (const button of entry.buttons) {
      button.disabled = true;
      button.classList.remove("sent");
      if (!decision.cancelled && button.dataset.optionId === decision.optionId) button.classList.add("chosen");
    }
    entry.outcome.replaceChildren(decision.line);
    // Answered: what was asked folds away, the answer stays in view.
    entry.context.open = false;
    if (entry.card) this.renderTool(entry.card);
    this.showStatus();
  }

  // ---- terminal ----

  ensureTerminal() {
    if (!this.terminal) {
      this.terminalBox.hidden = false;
      this.root.classList.add("has-terminal");
      this.terminal = this.onTerminal(this.terminalBox);
    }
    return this.terminal;
  }

  /** Scroll to the end of the page (the reader asked, or the snapshot is in) and follow it. */
  jumpToEnd() {
    const scroller = document.scrollingElement;
    scroller.scrollTop = scroller.scrollHeight;
    this.following = true;
    this.pill.hidden = true;
    this.pill.textContent = "New activity ↓";
  }

  /**
   * The conversation grew. A reader at the end sees the new part; one who scrolled up is left
   * where they are and offered the pill. `focus` is a permission request: it is news even
   * inside a tool card above the end, so its answers are scrolled into view.
   */
  follow({ focus = null } = {}) {
    if (this.conversation.dataset.loaded !== "true") return;
    if (!this.following) {
      this.pill.hidden = false;
      if (focus) this.pill.textContent = "Permission requested ↓";
      return;
    }
    this.jumpToEnd();
    if (focus && focus.isConnected) {
      // The card's end (its answers) hidden above the sticky header: bring it down to just
      // above the sticky footer.
      const bottom = focus.getBoundingClientRect().bottom;
      const top = this.header.getBoundingClientRect().bottom;
      if (bottom < top + FOLLOW_SLACK) {
        document.scrollingElement.scrollTop -= this.footer.getBoundingClientRect().top - 8 - bottom;
        // The reader is to answer it: later items must not scroll it away.
        this.following = false;
      }
    }
  }

  onScroll() {
    const scroller = document.scrollingElement;
    const top = scroller.scrollTop;
    const atEnd = scroller.scrollHeight - top - scroller.clientHeight <= FOLLOW_SLACK;
    // Only the reader moving up stops following: the page's own scrolls, and the browser
    // pulling the position back when content shrinks, do not (and the event comes a frame
    // late, when content added since may lie below what was the end).
    if (atEnd) this.following = true;
    else if (top < this.lastScrollTop && performance.now() - this.lastInput < USER_SCROLL_MS) this.following = false;
    this.lastScrollTop = top;
    if (this.following) {
      this.pill.hidden = true;
      this.pill.textContent = "New activity ↓";
    }
  }
}
