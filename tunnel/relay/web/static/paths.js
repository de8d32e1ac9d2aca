// Completion of `@path` in the composer from the host's workspace: while a word starting with
// `@` is typed, the host is asked (`paths`) for the paths that complete it, and choosing one puts
// it in the word; a directory's keeps the list open for what is in it. The host reads the files a
// prompt names (docs/agents.md, "Files in a prompt"); the page only ever sees their names.

import { arr, el, str } from "./dom.js";

// The `@word` just before the caret: at the start or after white space.
const TYPING_PATH = /(?:^|\s)@([^\s@]*)$/;
const ASK_AFTER_MS = 120;

export class PathCompletion {
  /** `input`: the composer's textarea; `ask(prefix)` sends a `paths` request. */
  constructor(input, ask) {
    this.input = input;
    this.ask = ask;
    this.prefix = null;
    this.matches = [];
    this.active = -1;
    this.timer = null;
    this.element = el("ul", { class: "completion", testid: "path-list", role: "listbox",
      id: "path-list", "aria-label": "Workspace files", hidden: true });
    input.addEventListener("input", () => this.update());
    input.addEventListener("blur", () => this.close());
  }

  get isOpen() {
    return !this.element.hidden;
  }

  /** The `@` word being typed, or null. */
  typing() {
    const before = this.input.value.slice(0, this.input.selectionStart ?? this.input.value.length);
    const match = TYPING_PATH.exec(before);
    return match ? match[1] : null;
  }

  update() {
    const prefix = this.typing();
    clearTimeout(this.timer);
    if (prefix === null) {
      this.prefix = null;
      this.close();
      return;
    }
    this.prefix = prefix;
    this.timer = setTimeout(() => this.ask(prefix), ASK_AFTER_MS);
  }

  /** A `paths` message from the host: shown if it answers what is typed now. */
  received(message) {
    if (str(message.prefix, null) !== this.prefix || this.prefix === null) return;
    this.matches = arr(message.paths).filter((path) => typeof path === "string" && path !== "");
    if (this.matches.length === 0) {
      this.close();
      return;
    }
    this.active = 0;
    this.render();
  }

  render() {
    this.element.replaceChildren(...this.matches.map((path, index) => el("li", {
      class: "command", testid: "path-option", role: "option", "data-path": path,
      "aria-selected": String(index === this.active),
      onmousedown: (event) => {
        event.preventDefault();
        this.choose(index);
      },
    }, el("span", { class: "command-name", text: `@${path}` }))));
    this.element.hidden = false;
    this.element.children[this.active]?.scrollIntoView({ block: "nearest" });
  }

  close() {
    this.element.hidden = true;
    this.element.replaceChildren();
    this.matches = [];
    this.active = -1;
  }

  /** Put path `index` in the `@` word; a file's is followed by a space. */
  choose(index) {
    const path = this.matches[index];
    const typed = this.typing();
    if (!path || typed === null) return;
    const caret = this.input.selectionStart ?? this.input.value.length;
    const start = caret - typed.length;
    const tail = path.endsWith("/") ? "" : " ";
    const value = this.input.value;
    this.input.value = value.slice(0, start) + path + tail + value.slice(caret);
    const at = start + path.length + tail.length;
    this.input.setSelectionRange(at, at);
    this.input.focus();
    this.close();
    if (path.endsWith("/")) this.update();
    else this.prefix = null;
  }

  /** The composer's keydown while the list is open; true if it was the list's key. */
  keydown(event) {
    if (!this.isOpen) return false;
    const count = this.matches.length;
    switch (event.key) {
      case "ArrowDown":
        this.active = (this.active + 1) % count;
        break;
      case "ArrowUp":
        this.active = (this.active - 1 + count) % count;
        break;
      case "Enter":
      case "Tab":
        if (event.shiftKey || event.isComposing) return false;
        this.choose(this.active);
        break;
      case "Escape":
        this.prefix = null;
        this.close();
        break;
      default:
        return false;
    }
    event.preventDefault();
    if (this.isOpen) this.render();
    return true;
  }
}
