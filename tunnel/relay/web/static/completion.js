// Completion of the agent's slash commands (its latest `commands` session event) in the
// composer: typing `/` lists them with their descriptions, choosing one fills the composer, and
// the text is then sent as an ordinary prompt, which is how an agent's own commands run.

import { arr, el, obj, str } from "./dom.js";

// What is being typed while the list is open: a slash and a command name, nothing after it
// (`//` is not a command).
const TYPING_COMMAND = /^\/([^\s/][^\s]*)?$/;

/** The commands of a `commands` event: `{name, description, hint}` with a name. */
export function commandList(data) {
  return arr(data.commands).map(obj).filter((command) => str(command.name) !== "").map((command) => ({
    name: command.name, description: str(command.description), hint: str(command.hint),
  }));
}

export class CommandCompletion {
  /** `input`: the composer's textarea; the list element is `this.element`. */
  constructor(input) {
    this.input = input;
    this.commands = [];
    this.matches = [];
    this.active = -1;
    this.dismissedFor = null;
    this.element = el("ul", { class: "completion", testid: "command-list", role: "listbox",
      id: "command-list", "aria-label": "The agent's commands", hidden: true });
    input.setAttribute("aria-autocomplete", "list");
    input.setAttribute("aria-controls", "command-list");
    input.setAttribute("aria-expanded", "false");
    input.addEventListener("input", () => this.update());
    input.addEventListener("blur", () => this.close());
  }

  setCommands(commands) {
    this.commands = commands;
    if (this.isOpen) this.update();
  }

  get isOpen() {
    return !this.element.hidden;
  }

  update() {
    const text = this.input.value;
    const typing = TYPING_COMMAND.exec(text);
    // Closed (Escape, or a command chosen) until the text changes.
    if (this.dismissedFor !== null && text !== this.dismissedFor) this.dismissedFor = null;
    if (!typing || this.dismissedFor !== null || this.commands.length === 0) {
      this.close();
      return;
    }
    const word = (typing[1] ?? "").toLowerCase();
    const starts = this.commands.filter((c) => c.name.toLowerCase().startsWith(word));
    const contains = this.commands.filter((c) => !c.name.toLowerCase().startsWith(word) &&
      c.name.toLowerCase().includes(word));
    this.matches = [...starts, ...contains];
    if (this.matches.length === 0) {
      this.close();
      return;
    }
    this.active = 0;
    this.render();
  }

  render() {
    this.element.replaceChildren(...this.matches.map((command, index) => el("li", {
      class: "command", testid: "command-option", role: "option", id: `command-option-${index}`,
      "data-name": command.name, "aria-selected": String(index === this.active),
      // mousedown, not click: the composer keeps its focus (blur would close the list first).
      onmousedown: (event) => {
        event.preventDefault();
        this.choose(index);
      },
    }, el("span", { class: "command-name", text: `/${command.name}` }),
    command.hint ? el("span", { class: "command-hint", text: command.hint }) : null,
    el("span", { class: "command-description", text: command.description }))));
    this.element.hidden = false;
    this.input.setAttribute("aria-expanded", "true");
    this.input.setAttribute("aria-activedescendant", `command-option-${this.active}`);
    this.element.children[this.active]?.scrollIntoView({ block: "nearest" });
  }

  close() {
    this.element.hidden = true;
    this.element.replaceChildren();
    this.matches = [];
    this.active = -1;
    this.input.setAttribute("aria-expanded", "false");
    this.input.removeAttribute("aria-activedescendant");
  }

  /** Fill the composer with command `index` of the list (and a space if it takes input). */
  choose(index) {
    const command = this.matches[index];
    if (!command) return;
    const text = `/${command.name}${command.hint ? " " : ""}`;
    this.input.value = text;
    this.dismissedFor = text;
    this.close();
    this.input.focus();
    this.input.setSelectionRange(text.length, text.length);
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
        this.dismissedFor = this.input.value;
        this.close();
        break;
      default:
        return false;
    }
    event.preventDefault();
    if (this.isOpen) this.render();
    return true;
  }

  reset() {
    this.commands = [];
    this.close();
  }
}
