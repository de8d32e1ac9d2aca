// A workspace file, read-only, in a panel beside the conversation: a tool call's location (or a
// diff's file) opens it around its line. The host reads it (`read_file`, answered by `file`:
// docs/application.md, "Reading a file"); what it sends is shown as text, never as markup.

import { arr, el, str } from "./dom.js";
import { FILE_WINDOW_LINES, MAX_FILE_FIND_LENGTH, MAX_FILE_PATH_LENGTH } from "./wire.js";

// Reads waiting for their answer at once, at most; an older one is dropped (answered null).
const MAX_WAITING = 32;

/**
 * The page's `read_file` requests and their answers. The host answers a channel's reads in the
 * order they were asked, so an answer settles the oldest read of its path and line; reads before
 * it that got none (lost with an attachment) settle null.
 */
export class FileReads {
  /** `send(message)`: the session's send, false when no attachment carries it. */
  constructor({ send }) {
    this.send = send;
    this.waiting = [];
  }

  /** A promise of the `file` message for `path` around `line` (or where `find` begins), or
   * null when it cannot be read now. */
  read(path, line = null, find = null) {
    if (typeof path !== "string" || path === "" || path.length > MAX_FILE_PATH_LENGTH) {
      return Promise.resolve(null);
    }
    const at = Number.isInteger(line) && line >= 1 ? line : null;
    const message = { op: "read_file", path, line: at };
    if (typeof find === "string" && find !== "") message.find = find.slice(0, MAX_FILE_FIND_LENGTH);
    if (!this.send(message)) return Promise.resolve(null);
    return new Promise((resolve) => {
      this.waiting.push({ path, line: at, resolve });
      while (this.waiting.length > MAX_WAITING) this.waiting.shift().resolve(null);
    });
  }

  /** A `file` message from the host. */
  received(message) {
    const index = this.waiting.findIndex((read) =>
      read.path === message.path && read.line === (message.line ?? null));
    if (index < 0) return;
    for (const read of this.waiting.splice(0, index)) read.resolve(null);
    this.waiting.shift().resolve(message);
  }
}

export class FilePanel {
  /** `reads`: the page's `FileReads`. */
  constructor({ reads }) {
    this.reads = reads;
    // The read whose answer the panel waits for: an older answer is not shown.
    this.wanted = null;
    this.title = el("span", { class: "file-title", testid: "file-title" });
    this.note = el("div", { class: "file-note", testid: "file-note", hidden: true });
    this.body = el("div", { class: "file-body", testid: "file-body", role: "list" });
    const close = el("button", { class: "file-close", testid: "file-close", type: "button",
      "aria-label": "Close the file", text: "×", onclick: () => this.close() });
    this.element = el("aside", { class: "file-panel", testid: "file-panel", hidden: true,
      "aria-label": "File" }, el("div", { class: "file-head" }, this.title, close), this.note,
    this.body);
    this.element.addEventListener("keydown", (event) => {
      if (event.key === "Escape") this.close();
    });
  }

  /** Show `path` around `line` (1-based, or null for its start). */
  open(path, line = null) {
    const at = Number.isInteger(line) && line >= 1 ? line : null;
    const wanted = { path, line: at };
    this.wanted = wanted;
    this.element.hidden = false;
    // The conversation moves aside for it (app.css), so the panel hides none of it on a desktop.
    document.body.classList.add("file-open");
    delete this.element.dataset.state;
    this.title.textContent = at === null ? path : `${path}:${at}`;
    this.body.replaceChildren();
    this.say("Reading…");
    this.reads.read(path, at).then((message) => {
      if (this.wanted !== wanted) return;
      if (message === null) this.say("Not connected: the file cannot be read now.");
      else this.show(message);
    });
  }

  close() {
    this.wanted = null;
    this.element.hidden = true;
    document.body.classList.remove("file-open");
    this.body.replaceChildren();
  }

  say(text) {
    this.note.textContent = text;
    this.note.hidden = text === "";
  }

  show(message) {
    const wanted = this.wanted;
    if (typeof message.refused === "string") {
      this.element.dataset.state = "refused";
      this.say(message.refused);
      return;
    }
    const first = Number.isInteger(message.first) ? message.first : 1;
    const lines = arr(message.lines).slice(0, FILE_WINDOW_LINES).map((line) => str(line));
    const total = Number.isInteger(message.total) ? message.total : lines.length;
    const shown = str(message.shown, wanted.path);
    this.element.dataset.state = "shown";
    this.title.textContent = wanted.line === null ? shown : `${shown}:${wanted.line}`;
    const last = first + lines.length - 1;
    const whole = first === 1 && last >= total;
    this.say([
      whole ? "" : `Lines ${first}–${last} of ${total}.`,
      message.cut === true ? "Long lines are cut." : "",
    ].filter(Boolean).join(" "));
    let target = null;
    const rows = lines.map((text, index) => {
      const number = first + index;
      const row = el("div", { class: "file-line", role: "listitem", "data-line": number },
        el("span", { class: "file-number", text: String(number) }),
        el("span", { class: "file-text", text }));
      if (number === wanted.line) {
        row.classList.add("file-target");
        row.dataset.testid = "file-target";
        target = row;
      }
      return row;
    });
    this.body.replaceChildren(...rows);
    if (target) target.scrollIntoView({ block: "center" });
  }
}
