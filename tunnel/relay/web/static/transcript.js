// Entry point of an exported transcript (`tunnel log export --html`, docs/web.md, "The exported
// transcript"): the conversation's items, embedded in the file, shown by the page's own view as
// a viewer's page shows them, and the host's signatures checked by the page's verified mark.
// It runs from a file with no network: nothing here connects, and the file holds every module
// this one imports.

import { arr, el, obj, str } from "./dom.js";
import { VerifiedMark } from "./verified.js";
import { View } from "./view.js";

// What draws a terminal agent's screen (escape sequences, other control characters but line
// breaks and tabs): the page draws them with xterm.js, which the transcript leaves out and shows
// the text only.
const TERMINAL_CONTROLS = /\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[P^_X][^\x1b]*(?:\x1b\\)?|\x1b[ -~]?|[\x00-\x08\x0b-\x1f\x7f-\x9f]/g;

/** The transcript in `element`: base64 of UTF-8 JSON, so no text of it is ever parsed as HTML. */
export function readTranscript(element) {
  const bytes = Uint8Array.from(atob(element.textContent.trim()), (c) => c.charCodeAt(0));
  return obj(JSON.parse(new TextDecoder().decode(bytes)));
}

/** A terminal agent's output as text, where the page has its xterm.js screen. */
class TerminalText {
  constructor(container) {
    this.pre = el("pre", { class: "terminal-text", testid: "terminal-text" });
    container.append(this.pre);
  }

  write(text) {
    this.pre.textContent += str(text).replace(TERMINAL_CONTROLS, "");
  }

  hostSize() {}

  reset() {
    this.pre.textContent = "";
  }
}

/** The verified mark, whose title names the host: a transcript has no link to check it against. */
class TranscriptMark extends VerifiedMark {
  show(result) {
    super.show(result);
    if (result.state === "verified") {
      this.element.title = `Items #${result.from} to #${result.to} are exactly what host ` +
        `${this.chain.hostId} signed. Compare this id with the one in the host's links.`;
    }
  }
}

function agentName(items) {
  let name = "";
  for (const item of items) {
    const data = obj(item.data);
    if (item.type === "session_event" && data.what === "agent_started" && str(data.agent)) name = data.agent;
  }
  return name || "agent";
}

/** What `tunnel log verify` found when the file was written, in words. */
function auditBox(verification, signatures) {
  const report = obj(verification);
  const ok = report.ok === true;
  const signed = signatures.length > 0;
  const problems = arr(report.problems).map((problem) => str(problem));
  const more = Number.isInteger(report.problem_count) ? report.problem_count - problems.length : 0;
  const title = !ok ? "The audit chain does not verify"
    : signed ? "The audit chain verifies" : "Not signed by the host";
  return el("section", {
    class: `transcript-audit ${ok ? "ok" : "failed"}`, testid: "transcript-audit",
    "data-ok": String(ok), "data-signed": String(signed),
  },
  el("div", { class: "label", text: title }),
  el("p", { testid: "transcript-audit-summary", text: str(report.summary) }),
  problems.length ? el("ul", { testid: "transcript-audit-problems" },
    ...problems.map((problem) => el("li", { text: problem })),
    more > 0 ? el("li", { text: `... and ${more} more` }) : null) : null);
}

function show(transcript) {
  const items = arr(transcript.items).map(obj);
  const signatures = arr(transcript.signatures).map(obj);
  const root = document.getElementById("app");
  const view = new View(root, {
    role: "view",
    name: "",
    onPrompt: () => false,
    onCancel: () => false,
    onPermission: () => false,
    onSetting: () => false,
    onRetry: () => {},
    onRename: () => {},
    onTerminal: (container) => new TerminalText(container),
  });
  root.dataset.transcript = "true";
  const terminal = items.some((item) => item.type === "terminal");
  view.ready({ agent: { name: agentName(items), kind: terminal ? "terminal" : "chat" } });
  const conversationId = str(transcript.conversation_id);
  document.title = `${conversationId} · ${view.agentName.textContent} · agent-tunnel transcript`;
  // Nothing here is live: no connection, no one attached, no status, no name to give.
  view.status.dataset.state = "transcript";
  view.status.textContent = "Transcript";
  view.agentStatus.hidden = true;
  for (const hidden of [view.roleBadge, view.nameInput, view.drawerButton, view.presenceList,
    view.presenceList.previousElementSibling]) hidden.hidden = true;
  const last = items.length ? items[items.length - 1].seq : null;
  view.footer.querySelector("[data-testid=viewer-notice]").textContent =
    `A copy of conversation ${conversationId}` +
    (last === null ? ", which holds no item" : `, items #${items[0].seq} to #${last}`) +
    `, written ${str(transcript.exported_at)}. Nothing here is live.`;

  // The signatures, checked again here from the items this file holds.
  const newest = signatures.reduce((a, b) => (b.seq > (a?.seq ?? -1) ? b : a), null);
  const mark = new TranscriptMark(newest ? str(newest.host_id) : null);
  view.agentStatus.after(mark.element);
  view.conversation.before(auditBox(transcript.verification, signatures));
  const watched = mark.watch(view);
  // A reader of a transcript starts at its top.
  view.following = false;
  for (const item of items) watched.item(item);
  view.conversation.dataset.loaded = "true";
  for (const { kind: _kind, ...head } of signatures) watched.event({ kind: "head", data: head });
  // For tests and debugging from the console.
  window.__tunnel = { view, verified: mark, transcript };
}

show(readTranscript(document.getElementById("transcript-data")));
