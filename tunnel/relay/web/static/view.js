// The page's DOM: header (agent, sandbox, role, connection, presence), the conversation, the
// agent's settings, the composer for drivers, and the full-page screens. Every piece of remote
// text goes in as textContent or through the markdown sanitizer; nothing remote is ever assigned
// to innerHTML.

import { CommandCompletion, commandList } from "./completion.js";
import { arr, el, formatTime, obj, pretty, str } from "./dom.js";
import { setMarkdown } from "./markdown.js";
import { SettingsBar, settingsText } from "./settings.js";
import { ToolTerminals, toolDetails, toolHead } from "./tools.js";
import { MAX_NAME_LENGTH } from "./wire.js";

const ROLE_LABEL = { drive: "driver", view: "viewer" };
const OP_ERROR_MS = 8000;
// Commands named in the conversation's note about the agent's commands; the rest are counted.
const COMMANDS_NAMED = 12;
// What each permission option kind means, shown on its button.
const OPTION_KIND_HINT = {
  allow_once: "Allow this once",
  allow_always: "Allow, and let the agent do this again without asking",
  reject_once: "Reject this once",
  reject_always: "Reject, and let the agent not ask for this again",
};

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
  constructor(root, { role, name, onPrompt, onCancel, onPermission, onSetting, onRetry, onRename,
    onTerminal }) {
    Object.assign(this, { root, role, name, onPrompt, onCancel, onPermission, onSetting, onRetry,
      onRename, onTerminal });
    this.isDriver = role === "drive";
    // Tool calls by (turn, tool_call_id): an agent may reuse an id in a later turn.
    this.toolCards = new Map();
    this.toolTerminals = new ToolTerminals();
    this.permissions = new Map();
    this.decisions = new Map();
    this.streams = new Map();
    this.terminal = null;
    this.agentKind = "chat";
    this.opErrorTimer = null;
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
    const header = el("header", { class: "top" },
      el("span", { class: "brand", text: "agent-tunnel" }),
      this.agentName, this.agentStatus, this.sandboxBadge,
      el("span", { class: "spacer" }),
      this.roleBadge, this.nameInput, this.status);

    this.conversation = el("section", { class: "conversation", testid: "conversation", "aria-live": "polite" });
    this.streamArea = el("div", { class: "streams", testid: "streams" });
    this.terminalBox = el("div", { class: "terminal-box", testid: "terminal", hidden: true });
    this.planPanel = el("div", { class: "live-plan", testid: "live-plan", hidden: true });
    const main = el("main", { class: "main" },
      el("div", { class: "column" }, this.terminalBox, this.conversation, this.streamArea),
      el("aside", { class: "side" },
        el("h2", { text: "Here now" }), this.presenceList,
        this.planPanel));

    this.footer = el("footer", { class: "bottom" });
    this.settings = new SettingsBar({
      editable: this.isDriver,
      onChange: (entry, value) => {
        if (this.onSetting(entry, value)) return true;
        this.opError("not_connected", "Not connected to the host; the change was not sent.");
        return false;
      },
    });
    this.footer.append(this.settings.element);
    if (this.isDriver) {
      this.input = el("textarea", {
        class: "composer-input", testid: "composer-input", rows: 2,
        placeholder: "Message the agent (Enter sends, Shift+Enter for a new line, / for the agent's commands)",
        "aria-label": "Message",
        onkeydown: (event) => {
          if (this.completion.keydown(event)) return;
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
      this.composer = el("form", {
        class: "composer", testid: "composer",
        onsubmit: (event) => { event.preventDefault(); this.submit(); },
      }, this.completion.element, this.input, this.sendButton, this.cancelButton);
      this.footer.append(this.composer);
    } else {
      this.footer.append(el("div", {
        class: "viewer-notice", testid: "viewer-notice",
        text: "You are viewing this session read-only: your link cannot send prompts or answer permission requests.",
      }));
    }
    this.toast = el("div", { class: "toast", testid: "op-error", role: "alert", hidden: true });
    this.screenBox = el("div", { class: "screen-box" });
    this.root.replaceChildren(header, main, this.footer, this.toast, this.screenBox);
  }

  submit() {
    const text = this.input.value;
    if (!text.trim()) return;
    if (this.onPrompt(text)) {
      this.input.value = "";
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
    if (this.agentKind === "terminal") this.ensureTerminal();
    if (this.composer) this.composer.hidden = this.agentKind === "terminal";
    this.showSandbox(info.sandbox);
  }

  showSandbox(sandbox) {
    const badge = this.sandboxBadge;
    // A host too old to say: claim nothing either way.
    badge.hidden = !sandbox || typeof sandbox !== "object";
    if (badge.hidden) return;
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
    this.toolTerminals.clear();
    this.permissions.clear();
    this.decisions.clear();
    this.streams.clear();
    this.settings.reset();
    if (this.completion) this.completion.reset();
    if (this.terminal) this.terminal.reset();
  }

  snapshotDone() {
    this.conversation.dataset.loaded = "true";
    this.scrollToEnd(true);
  }

  presence(members) {
    this.presenceList.replaceChildren(...members.map((member) => el("li", {
      testid: "presence-member", "data-role": str(member.role), "data-name": str(member.name),
    }, el("span", { class: "who", text: str(member.name, "?") }),
    el("span", { class: "what", text: ROLE_LABEL[member.role] ?? str(member.role) }))));
  }

  opError(code, message) {
    this.toast.hidden = false;
    this.toast.dataset.code = code;
    this.toast.textContent = message ? `${message} (${code})` : code;
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
      case "status":
        this.agentStatus.dataset.state = data.state === "running" ? "running" : "idle";
        this.agentStatus.textContent = data.state === "running"
          ? (data.queued > 0 ? `working (${data.queued} queued)` : "working")
          : "idle";
        if (this.cancelButton) this.cancelButton.disabled = data.state !== "running";
        break;
      case "storage":
        // The host's log cannot be written: it pauses the session until it can (docs/log.md).
        if (data.state === "ok") {
          this.agentStatus.dataset.state = "idle";
          this.agentStatus.textContent = "idle";
        } else {
          this.agentStatus.dataset.state = "paused";
          this.agentStatus.textContent = `paused: the host's log cannot be written (${str(data.reason, "error")})`;
        }
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
        this.scrollToEnd();
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
      class: `plan-entry status-${str(entry.status)}`, "data-status": str(entry.status),
    }, el("span", { class: "mark", "aria-hidden": "true" }), el("span", { text: str(entry.content) }))));
  }

  // ---- items ----

  item(item) {
    const data = item.data && typeof item.data === "object" ? item.data : {};
    let element = null;
    switch (item.type) {
      case "message":
        element = this.messageItem(item, data);
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
      case "plan": {
        // Every change of plan is stored; the side panel shows the current one, so each stored
        // version stays folded in the conversation.
        const entries = Array.isArray(data.entries) ? data.entries : [];
        const done = entries.filter((entry) => entry.status === "completed").length;
        element = el("details", { class: "item plan-item", testid: "plan" },
          el("summary", { text: `Plan: ${done} of ${entries.length} done` }),
          this.planList(entries));
        this.livePlan(entries);
        break;
      }
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
      if (!element.isConnected) this.conversation.append(element);
      this.scrollToEnd();
    }
  }

  sessionEvent(item, data) {
    const element = this.sessionEventElement(item, data);
    element.dataset.what = str(data.what);
    return element;
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
      default:
        return this.note(item, this.sessionEventText(data));
    }
  }

  sessionEventText(data) {
    const what = str(data.what, "event");
    const text = {
      agent_started: "The agent started.",
      agent_exited: "The agent exited.",
      cancelled: "The turn was cancelled.",
      fs_refused: `Refused: the agent's ${str(data.op, "access")} of ${str(data.path, "?")} is outside the workspace.`,
      terminal_refused: `Refused: the agent's command ${str(data.command, "?")} would run in ${str(data.cwd, "?")}, outside the workspace.`,
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
    return el("article", { class: `item message ${role}`, testid: "message", "data-role": role },
      el("div", { class: "who" }, el("span", { text: who }),
        el("time", { text: formatTime(item.created_at), datetime: str(item.created_at) })),
      this.markdownBlock(data.text));
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
          locations: undefined, output: undefined, truncated: false },
        result: null,
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
        el("pre", { text: str(data.output) }));
    }
    card.result = { ok: data.ok !== false, output: str(data.output) };
    this.renderTool(card);
    return null;
  }

  renderTool(card) {
    const { element, call, result } = card;
    element.dataset.status = call.status;
    const parts = [toolHead(call,
      el("span", { class: `tool-status status-${call.status}`, testid: "tool-status", text: call.status }))];
    // A tool that reports its output both as content (or raw output) and as its result shows it
    // once, as the result.
    parts.push(...toolDetails(call, this.toolTerminals,
      { showOutput: !result, skipText: result ? result.output : null }));
    if (result) {
      parts.push(el("div", { class: `tool-result ${result.ok ? "ok" : "failed"}`, testid: "tool-result" },
        el("div", { class: "label", text: result.ok ? "Result" : "Failed" }),
        el("pre", { text: result.output })));
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
          type: "button", class: `option kind-${kind}`, testid: "permission-option",
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
        optionsBox.append(el("span", { class: `option kind-${kind}`, testid: "permission-option",
          "data-option-id": optionId, "data-kind": kind, text: label, title: hint }));
      }
    }
    const outcome = el("div", { class: "outcome", testid: "permission-outcome",
      text: this.isDriver ? "Waiting for an answer." : "Waiting for a driver to answer." });
    const title = str(data.title) || str(call.title) || "The agent asks for permission";
    const element = el("article", {
      class: "item permission", testid: "permission-request", "data-request-id": requestId,
      "data-state": "pending", "data-tool-kind": str(call.kind) || null,
    }, el("div", { class: "label", text: "Permission requested" }),
    el("div", { class: "permission-title", testid: "permission-title" },
      call.kind ? el("span", { class: "tool-kind", testid: "tool-kind", text: str(call.kind) }) : null,
      el("span", { text: title })),
    el("div", { class: "permission-tool", testid: "permission-tool" },
      str(call.title) && call.title !== title
        ? el("div", { class: "tool-title", testid: "tool-title", text: call.title }) : null,
      ...toolDetails(call, this.toolTerminals, { open: true })),
    optionsBox, outcome);
    const entry = { element, buttons, outcome };
    this.permissions.set(requestId, entry);
    const decided = this.decisions.get(requestId);
    if (decided) this.markDecided(entry, decided);
    return element;
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
    this.decisions.set(requestId, decision);
    const entry = this.permissions.get(requestId);
    if (entry) this.markDecided(entry, decision);
    const text = cancelled
      ? `The permission request was cancelled (${decision.by}).`
      : `${decision.by} answered: ${decision.name}`;
    return el("div", {
      class: "item note decision", testid: "permission-decision", "data-request-id": requestId,
      "data-option-id": decision.optionId, "data-option-kind": decision.kind || null,
      "data-outcome": cancelled ? "cancelled" : "selected", "data-by": decision.by,
    }, el("span", { text }),
    el("time", { text: formatTime(item.created_at), datetime: str(item.created_at) }));
  }

  markDecided(entry, decision) {
    entry.element.dataset.state = "answered";
    entry.element.dataset.outcome = decision.cancelled ? "cancelled" : "selected";
    for (const button of entry.buttons) {
      button.disabled = true;
      button.classList.remove("sent");
      if (!decision.cancelled && button.dataset.optionId === decision.optionId) button.classList.add("chosen");
    }
    entry.outcome.textContent = decision.cancelled
      ? `Cancelled (${decision.by})`
      : `${decision.name}, answered by ${decision.by}`;
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

  scrollToEnd(force = false) {
    const scroller = document.scrollingElement;
    if (!scroller) return;
    const nearEnd = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 160;
    if (force || nearEnd) scroller.scrollTop = scroller.scrollHeight;
  }
}
