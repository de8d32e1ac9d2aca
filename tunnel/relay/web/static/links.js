// A file a tool call names (a location, a diff's file) as a link that opens it in the file panel
// (files.js), or as plain text where nothing opens files (the exported transcript); and the
// page's file reads, for what wants a file's lines (a diff's context).

import { el } from "./dom.js";

let opener = null;
let reader = null;

/** Open files with `open(path, line)` and read them with `reads` (a `FileReads`) from now on
 * (the live page sets them once). */
export function setFileOpener(open, reads = null) {
  opener = open;
  reader = reads;
}

/** The page's `FileReads`, or null where files cannot be read. */
export function fileReads() {
  return reader;
}

/** `text` naming `path` (and 1-based `line`, or null): a link when files open, else text. A
 * span with the link role, not an anchor: it goes nowhere by itself (the page reads the file
 * through the host), and a viewer's card holds no control to press. */
export function fileLink(path, line, text) {
  if (!opener || typeof path !== "string" || path === "") return el("span", { text });
  const at = Number.isInteger(line) && line >= 1 ? line : null;
  const open = () => opener(path, at);
  return el("span", { class: "file-link", testid: "file-link", role: "link", tabindex: "0", text,
    title: "Show this file", "data-path": path, "data-line": at ?? "",
    onclick: open,
    onkeydown: (event) => {
      if (event.key !== "Enter") return;
      event.preventDefault();
      open();
    } });
}
