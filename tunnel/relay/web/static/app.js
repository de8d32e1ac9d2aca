// Page entry point: checks the secure context and the link, then wires the session, the view and
// (for terminal agents) xterm together. The secret never leaves the fragment: it is read here and
// only derived keys and the relay token are ever used.

import {
  ConversationMessageError,
  ConversationPanel,
  fragmentWith,
  parseConversationMessage,
  splitFragment,
} from "./conversations.js";
import { BadLinkError, cryptoAvailable, hostIdFromPath, parseFragment } from "./crypto.js";
import { cleanName } from "./link.js";
import { FilePanel, FileReads } from "./files.js";
import { setFileOpener } from "./links.js";
import { setLoginSender } from "./login.js";
import { Notifications, keptLink, requestInAddress } from "./notify.js";
import { Session } from "./session.js";
import { TerminalView } from "./terminal.js";
import { Timeline } from "./timeline.js";
import { VerifiedMark } from "./verified.js";
import { View } from "./view.js";
import { MAX_INPUT_SIZE } from "./wire.js";

const NAME_KEY = "agent-tunnel.name";
// Half of what the host takes in one input message (tunnel.app.requests.MAX_INPUT_SIZE).
const INPUT_CHUNK = MAX_INPUT_SIZE / 2;

function storedName() {
  try {
    return localStorage.getItem(NAME_KEY);
  } catch {
    return null;
  }
}

function storeName(name) {
  try {
    localStorage.setItem(NAME_KEY, name);
  } catch {
    // Storage may be off (private mode); the name then lasts for this page only.
  }
}

function chooseName() {
  const fromQuery = cleanName(new URLSearchParams(location.search).get("name"));
  if (fromQuery) {
    storeName(fromQuery);
    return fromQuery;
  }
  const stored = cleanName(storedName());
  if (stored) return stored;
  const suffix = Array.from(crypto.getRandomValues(new Uint8Array(2)), (b) => b.toString(16).padStart(2, "0")).join("");
  return `guest-${suffix}`;
}

function bareScreen(root, name, title, body) {
  const screen = document.createElement("div");
  screen.className = "screen blocking";
  screen.dataset.testid = `screen-${name}`;
  screen.setAttribute("role", "alert");
  const card = document.createElement("div");
  card.className = "screen-card";
  const h1 = document.createElement("h1");
  h1.textContent = title;
  const p = document.createElement("p");
  p.textContent = body;
  card.append(h1, p);
  screen.append(card);
  root.replaceChildren(screen);
}

function boot() {
  const root = document.getElementById("app");
  // Pasting another link into the address bar only changes the fragment: start over with it.
  window.addEventListener("hashchange", () => location.reload());
  if (!cryptoAvailable()) {
    bareScreen(root, "needs-https", "This page needs https",
      "End-to-end encryption uses the browser's WebCrypto, which only works on https (or on " +
      "localhost). Ask whoever runs the relay to serve it over TLS, then open the link again " +
      "with https://.");
    return;
  }
  const hostId = hostIdFromPath(location.pathname);
  let link;
  // The fragment may name the conversation shown after the link (`#drive.SECRET/c-1234`), so a
  // reload returns to it; the secret stays in the fragment and nowhere else.
  const fragment = splitFragment(location.hash);
  try {
    if (!hostId) throw new BadLinkError("the page address has no host id");
    link = parseFragment(fragment.link);
  } catch (error) {
    const reason = error instanceof BadLinkError ? error.message : "the link is malformed";
    const badLink = () => bareScreen(root, "bad-link", "This link does not work",
      `The share link is incomplete (${reason}). Ask the host for the link again and open it ` +
      "exactly as sent: the part after # holds the key.");
    if (!hostId || location.hash) {
      badLink();
      return;
    }
    // The installed page starts without the fragment: the link kept while notifications are
    // on (notify.js) opens it, if there is one.
    keptLink(hostId).then((url) => (url ? location.replace(url) : badLink()));
    return;
  }
  const name = chooseName();
  let session = null;
  // The new conversations this page asked for (New, Fork) that the host has not said started.
  let started = 0;
  let malformedSeen = false;
  let terminal = null;
  const view = new View(root, {
    role: link.role,
    name,
    // Images only when there are some: a host from before them takes the prompt as it was.
    onPrompt: (text, images = []) =>
      session.send(images.length > 0 ? { op: "prompt", text, images } : { op: "prompt", text }),
    onCancel: () => session.send({ op: "cancel" }),
    onPermission: (requestId, optionId) =>
      session.send({ op: "permission", request_id: requestId, option_id: optionId }),
    onPaths: (prefix) => session.send({ op: "paths", prefix }),
    onQuestion: (requestId, action, content) =>
      session.send({ op: "elicitation", request_id: requestId, action, content }),
    onSetting: (setting, value) => {
      if (setting.key === "mode") return session.send({ op: "set_mode", mode_id: value });
      if (setting.key === "model") return session.send({ op: "set_model", model_id: value });
      return session.send({ op: "set_config", config_id: setting.configId, value });
    },
    onRetry: () => session.connect(),
    onFork: (seq) => {
      if (!session.conversationId) return;
      if (session.send({ op: "fork", conversation: session.conversationId, upto: seq })) started += 1;
      else view.opError("not_connected", "Not connected to the host; the fork was not asked for.");
    },
    onRename: (newName) => {
      const cleaned = cleanName(newName);
      if (!cleaned || cleaned === session.name) return;
      storeName(cleaned);
      // The name travels in the hello and the open: reattach to show the new one.
      session.name = cleaned;
      view.name = cleaned;
      if (session.link) session.link.close();
    },
    onTerminal: (container) => {
      terminal = new TerminalView(container, {
        interactive: link.role === "drive",
        onInput: (data) => {
          // The host takes at most MAX_INPUT_SIZE bytes per input message; a big paste goes in
          // pieces.
          for (let start = 0; start < data.length; start += INPUT_CHUNK) {
            session.send({ op: "input", data: data.subarray(start, start + INPUT_CHUNK) });
          }
        },
        onResize: (cols, rows) => {
          if (link.role === "drive") session.send({ op: "resize", cols, rows });
        },
      });
      return terminal;
    },
  });
  // Notifications of permission requests, when the host offers them (docs/notifications.md).
  const notifications = new Notifications({
    hostId,
    send: (message) => session.send(message),
    onOpenRequest: (requestId, optionId) => view.openRequest(requestId, optionId),
  });
  view.sandboxDetail.after(notifications.element);
  const opened = requestInAddress(location, history);
  if (opened) view.openRequest(opened.requestId, opened.optionId);
  // Workspace files a tool call names, read from the host and shown beside the conversation.
  const reads = new FileReads({ send: (message) => session.send(message) });
  const files = new FilePanel({ reads });
  root.after(files.element);
  setFileOpener((path, line) => files.open(path, line), reads);
  setLoginSender((message) => session.send(message));
  // The host's conversations: the list in the side panel (the drawer on a phone), its button
  // in the header.
  const conversations = new ConversationPanel({
    isDriver: link.role === "drive",
    onSwitch: (id) => {
      // On a phone the drawer closes on the conversation chosen.
      view.toggleDrawer(false);
      session.switchTo(id);
    },
    onNew: (agent) => {
      if (session.send({ op: "new_conversation", agent })) started += 1;
      else view.opError("not_connected", "Not connected to the host; nothing was started.");
    },
    onClose: (id) => {
      if (!session.send({ op: "close_conversation", conversation: id })) {
        view.opError("not_connected", "Not connected to the host; nothing was closed.");
      }
    },
    onOpen: () => {
      if (view.narrow.matches) view.toggleDrawer(true);
      else conversations.element.scrollIntoView({ block: "nearest" });
    },
  });
  view.side.querySelector(".drawer-close").after(conversations.element);
  view.drawerButton.before(conversations.button);
  const showClosed = () => view.setClosed(conversations.currentEntry()?.state === "closed");
  const onConversationMessage = (message) => {
    let parsed;
    try {
      parsed = parseConversationMessage(message);
    } catch (error) {
      if (!(error instanceof ConversationMessageError)) throw error;
      // A host that sends a malformed list keeps doing so: say it once.
      if (!malformedSeen) console.warn(`conversations: ${error.message}`);
      malformedSeen = true;
      return;
    }
    if (parsed.op === "conversations") {
      conversations.update(parsed);
      showClosed();
    } else if (started > 0) {
      // The conversation this page's New or Fork started: show it.
      started -= 1;
      view.toggleDrawer(false);
      session.switchTo(parsed.conversation);
    }
  };
  // The host's signature over its log, checked against the items this page holds.
  const verified = new VerifiedMark(hostId);
  const timeline = new Timeline();
  view.agentStatus.after(verified.element);
  session = new Session({
    location, hostId, role: link.role, secret: link.secret, name,
    // A replay link's items go through its timeline (docs/web.md, "Replays").
    view: verified.watch(timeline.watch(view)),
    conversation: fragment.conversation,
    onConversation: (id) => {
      conversations.setCurrent(id);
      showClosed();
      history.replaceState(history.state, "", fragmentWith(location.hash, id));
    },
    onSubscribed: () => {
      // A driver's terminal tells the host its size each time it (re)attaches.
      if (terminal && link.role === "drive") {
        const { cols, rows } = terminal.size;
        session.send({ op: "resize", cols, rows });
      }
      notifications.attached();
    },
    onHostMessage: (message) => {
      if (message.op === "ready") notifications.offered(message);
      else if (message.op === "push") notifications.confirmed(message);
      else if (message.op === "paths") view.paths?.received(message);
      else if (message.op === "file") reads.received(message);
      else if (message.op === "error") notifications.refused(message);
      else if (message.op === "conversations" || message.op === "conversation_started") {
        onConversationMessage(message);
      }
    },
  });
  window.addEventListener("pagehide", () => session.stop());
  // For tests and debugging from the console; it holds nothing the page's own script lacks.
  window.__tunnel = { session, view, verified, notifications, files, conversations, timeline };
  session.start();
}

boot();
