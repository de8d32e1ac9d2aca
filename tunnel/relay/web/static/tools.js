// Tool calls as the page shows them, in a tool card and in a permission request alike: kind,
// title, locations, raw input, content (text, diffs, terminals) and raw output; and the terminals
// an ACP agent runs through the host, whose output is shown inside the tool call that names them.
// Every field is untrusted: it goes in as text, never as markup.

import { renderDiff } from "./diff.js";
import { arr, el, obj, pretty, str } from "./dom.js";
import { fileLink } from "./links.js";

// Characters of a running terminal's output kept in the page; older output is dropped (the
// host's tool_terminal item keeps the end of it too).
const MAX_TERMINAL_CHARS = 128 * 1024;

// Terminal escape sequences: CSI (colours, cursor moves), OSC (titles, links) up to BEL or ST,
// DCS/SOS/PM/APC strings, and two-character escapes. Output is shown as plain text.
const ESCAPES = new RegExp([
  "\\x1b\\[[0-?]*[ -/]*[@-~]",
  "\\x1b\\][^\\x07\\x1b]*(?:\\x07|\\x1b\\\\)?",
  "\\x1b[PX^_][^\\x1b]*(?:\\x1b\\\\)?",
  "\\x1b[ -~]?",
  "\\x9b[0-?]*[ -/]*[@-~]",
].join("|"), "g");
// Control characters other than tab and newline (C0, DEL and C1).
const CONTROLS = new RegExp("[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f]", "g");

/**
 * Terminal output as plain text: escape sequences and control characters removed, and a line
 * rewritten after a carriage return (progress bars) shown as its last version.
 */
export function terminalText(text) {
  const lines = String(text).replace(ESCAPES, "").replace(/\r\n/g, "\n").split("\n");
  return lines.map((line) => {
    const parts = line.split("\r").filter((part) => part !== "");
    return (parts.length ? parts[parts.length - 1] : "").replace(CONTROLS, "");
  }).join("\n");
}

// One fenced code block, whole: its fence, an info string, the code, the same fence.
const FENCED = /^(`{3,})[^`\n]*\n(?:([\s\S]*?)\n)?\1[ \t]*\n?$/;

/**
 * The code inside `text` when `text` is one fenced code block whole (Claude's adapter sends a
 * Read or Bash result so); any other text as it is. Attach does the same (`unfenced` in
 * tunnel/terminal/render.py). The code is shown as text, never as markup.
 */
export function unfenced(text) {
  const value = String(text ?? "");
  const match = FENCED.exec(value);
  if (!match) return value;
  const code = match[2] ?? "";
  // A closing fence inside means two blocks and text between them: not one block.
  if (new RegExp(`^\`{${match[1].length},}[ \t]*$`, "m").test(code)) return value;
  return code;
}

function commandLine(command) {
  if (typeof command === "string") return command;
  return arr(command).map((arg) => {
    const text = str(arg, String(arg));
    return /^[\w@%+=:,./-]+$/.test(text) ? text : `'${text.replace(/'/g, "'\\''")}'`;
  }).join(" ");
}

/**
 * The terminals of the conversation, by terminal id (the host makes them unique): live output
 * from `tool_terminal` events, then the stored `tool_terminal` item once the command ended. A
 * tool call shows one with `block(id)`, which stays current as output arrives.
 */
export class ToolTerminals {
  constructor() {
    this.entries = new Map();
  }

  entry(id) {
    let entry = this.entries.get(id);
    if (!entry) {
      entry = { id, command: null, cwd: null, raw: "", done: null, blocks: new Set(),
        standalone: null, pending: false };
      this.entries.set(id, entry);
    }
    return entry;
  }

  /** A `tool_terminal` event: output as it arrives (the first one names the command). */
  event(data) {
    const id = str(data.terminal_id);
    if (!id) return;
    const entry = this.entry(id);
    if (data.command !== undefined && entry.command === null) entry.command = data.command;
    // The stored item is the final word: output still in flight adds nothing to it.
    if (entry.done) return;
    entry.raw += str(data.text);
    if (entry.raw.length > MAX_TERMINAL_CHARS) entry.raw = entry.raw.slice(-MAX_TERMINAL_CHARS);
    this.refreshSoon(entry);
  }

  /** A `tool_terminal` item: the command ended (or was released). True if a tool call shows it. */
  item(data) {
    const id = str(data.terminal_id);
    const entry = this.entry(id);
    if (data.command !== undefined) entry.command = data.command;
    entry.cwd = typeof data.cwd === "string" ? data.cwd : null;
    entry.raw = str(data.output);
    entry.done = {
      exitCode: Number.isInteger(data.exit_code) ? data.exit_code : null,
      signal: str(data.signal) || null,
      released: data.released === true,
      truncated: data.truncated === true,
    };
    this.refresh(entry);
    return this.shown(entry);
  }

  shown(entry) {
    for (const block of entry.blocks) if (block.isConnected && block !== entry.standalone) return true;
    return false;
  }

  /** An element showing terminal `id`, kept up to date until it leaves the document. */
  block(id, { standalone = false } = {}) {
    const entry = this.entry(id);
    const head = el("div", { class: "term-head" });
    const body = el("pre", { class: "term-output", testid: "tool-terminal-output" });
    const block = el("div", { class: "tool-terminal", testid: "tool-terminal", "data-terminal-id": id },
      head, body);
    block.parts = { head, body };
    if (standalone) {
      entry.standalone = block;
    } else if (entry.standalone) {
      // A tool call shows it now: the entry shown on its own is no longer needed.
      entry.standalone.closest(".item")?.remove();
      entry.standalone = null;
    }
    entry.blocks.add(block);
    this.fill(entry, block);
    return block;
  }

  refreshSoon(entry) {
    // However fast the output comes, re-render at most once per frame.
    if (entry.pending) return;
    entry.pending = true;
    requestAnimationFrame(() => {
      entry.pending = false;
      this.refresh(entry);
    });
  }

  refresh(entry) {
    for (const block of [...entry.blocks]) {
      if (block.isConnected) this.fill(entry, block);
      else entry.blocks.delete(block);
    }
  }

  fill(entry, block) {
    const { head, body } = block.parts;
    const done = entry.done;
    let state = "running";
    if (done) {
      if (done.signal) state = `killed by ${done.signal}`;
      else if (done.exitCode !== null) state = `exit code ${done.exitCode}`;
      else state = done.released ? "released" : "ended";
    }
    block.dataset.state = done ? "exited" : "running";
    if (done && done.exitCode !== null) block.dataset.exitCode = String(done.exitCode);
    head.replaceChildren(
      el("span", { class: "term-command", testid: "tool-terminal-command",
        text: entry.command === null ? `terminal ${entry.id}` : `$ ${commandLine(entry.command)}` }),
      entry.cwd ? el("span", { class: "term-cwd", text: `in ${entry.cwd}` }) : null,
      el("span", { class: "term-state", testid: "tool-terminal-state", text: state }));
    const text = terminalText(entry.raw);
    body.textContent = done && done.truncated ? `… (earlier output not kept)\n${text}` : text;
    body.hidden = text === "";
  }

  clear() {
    this.entries.clear();
  }
}

function locationText(location) {
  const where = obj(location);
  const path = str(where.path, pretty(location));
  return Number.isInteger(where.line) ? `${path}:${where.line}` : path;
}

/** Whether `value` tells nothing: missing, an empty string, an empty list or an empty map. */
function blank(value) {
  if (value === undefined || value === null || value === "") return true;
  if (Array.isArray(value)) return value.length === 0;
  return typeof value === "object" && Object.keys(value).length === 0;
}

/**
 * What a permission request asks about: the tool call as known before (`known`, from its card)
 * with the request's own fields over it. A field the request leaves out or sends empty (`[]`,
 * `{}`, as some agents do for a call they described before) never replaces a known value; one
 * with something in it does. Attach merges the same way.
 */
export function mergeCall(known, fields) {
  const merged = { ...known };
  for (const [key, value] of Object.entries(fields)) {
    if (blank(value) && !blank(merged[key])) continue;
    if (value !== undefined && value !== null) merged[key] = value;
  }
  return merged;
}

/** The kind badge and title of a tool call. */
export function toolHead(call, ...more) {
  return el("div", { class: "tool-head" },
    el("span", { class: "tool-kind", testid: "tool-kind", text: str(call.kind) || "tool" }),
    el("span", { class: "tool-title", testid: "tool-title", text: str(call.title) || "tool call" }),
    ...more);
}

/**
 * The details of a tool call: locations, raw input, content and raw output, and whether any was
 * cut. `open`: show the input unfolded (a permission request, where it is what is decided on).
 * `skipText`: a text block equal to it is not shown (it is the tool's result, shown after).
 */
export function toolDetails(call, terminals, { open = false, showOutput = true, skipText = null } = {}) {
  const parts = [];
  const locations = arr(call.locations);
  if (locations.length) {
    parts.push(el("ul", { class: "tool-locations", testid: "tool-locations" },
      ...locations.map((location) => el("li", {},
        fileLink(obj(location).path, obj(location).line, locationText(location))))));
  }
  // A command to run is what an execute request is about: shown as a command line, not only as
  // a field of the raw input.
  const input = obj(call.input);
  const command = typeof input.command === "string" || Array.isArray(input.command)
    ? commandLine(input.command) : "";
  if (command) {
    parts.push(el("pre", { class: "tool-command", testid: "tool-command",
      text: `$ ${command}${typeof input.cwd === "string" ? `\n  (in ${input.cwd})` : ""}` }));
  }
  if (call.input !== undefined && call.input !== null) {
    parts.push(el("details", { class: "tool-input", testid: "tool-input", open },
      el("summary", { text: "Input" }),
      el("pre", { text: typeof call.input === "string" ? call.input : pretty(call.input) })));
  }
  for (const entry of arr(call.content)) {
    const block = obj(entry);
    if (block.type === "diff") {
      parts.push(renderDiff(str(block.path), typeof block.old_text === "string" ? block.old_text : null,
        str(block.new_text)));
    } else if (block.type === "text") {
      if (skipText !== null && block.text === skipText) continue;
      parts.push(el("pre", { class: "tool-text", testid: "tool-text", text: unfenced(str(block.text)) }));
    } else if (block.type === "terminal" && str(block.terminal_id)) {
      parts.push(terminals.block(str(block.terminal_id)));
    } else {
      parts.push(el("pre", { class: "tool-text", testid: "tool-text", text: pretty(entry) }));
    }
  }
  if (showOutput && call.output !== undefined && call.output !== null) {
    parts.push(el("details", { class: "tool-output", testid: "tool-output", open },
      el("summary", { text: "Output" }),
      el("pre", { text: typeof call.output === "string" ? call.output : pretty(call.output) })));
  }
  if (call.truncated === true) {
    parts.push(el("div", { class: "tool-truncated", testid: "tool-truncated",
      text: "Parts of this tool call were too large and were cut by the host." }));
  }
  return parts;
}
