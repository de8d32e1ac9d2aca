// Line diffs for tool-call content of type "diff": which lines were removed, added or kept,
// shown as hunks under a header per file.

import { el } from "./dom.js";
import { fileLink, fileReads } from "./links.js";

// Above this many cells the quadratic table costs too much: show old then new instead.
const MAX_TABLE_CELLS = 250000;

/** [{op: " " | "-" | "+", line}] turning `oldLines` into `newLines`. */
export function diffLines(oldLines, newLines) {
  let start = 0;
  while (start < oldLines.length && start < newLines.length && oldLines[start] === newLines[start]) {
    start++;
  }
  let endOld = oldLines.length;
  let endNew = newLines.length;
  while (endOld > start && endNew > start && oldLines[endOld - 1] === newLines[endNew - 1]) {
    endOld--;
    endNew--;
  }
  const head = oldLines.slice(0, start).map((line) => ({ op: " ", line }));
  const tail = oldLines.slice(endOld).map((line) => ({ op: " ", line }));
  const a = oldLines.slice(start, endOld);
  const b = newLines.slice(start, endNew);
  let middle;
  if ((a.length + 1) * (b.length + 1) > MAX_TABLE_CELLS) {
    middle = [...a.map((line) => ({ op: "-", line })), ...b.map((line) => ({ op: "+", line }))];
  } else {
    middle = lcsDiff(a, b);
  }
  return [...head, ...middle, ...tail];
}

function lcsDiff(a, b) {
  const width = b.length + 1;
  // lengths[i * width + j]: longest common subsequence of a[i:] and b[j:].
  const lengths = new Uint32Array((a.length + 1) * width);
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      lengths[i * width + j] = a[i] === b[j]
        ? lengths[(i + 1) * width + j + 1] + 1
        : Math.max(lengths[(i + 1) * width + j], lengths[i * width + j + 1]);
    }
  }
  const out = [];
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    if (a[i] === b[j]) {
      out.push({ op: " ", line: a[i] });
      i++;
      j++;
    } else if (lengths[(i + 1) * width + j] >= lengths[i * width + j + 1]) {
      out.push({ op: "-", line: a[i++] });
    } else {
      out.push({ op: "+", line: b[j++] });
    }
  }
  while (i < a.length) out.push({ op: "-", line: a[i++] });
  while (j < b.length) out.push({ op: "+", line: b[j++] });
  return out;
}

function splitLines(text) {
  if (text === "") return [];
  const lines = text.split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  return lines;
}

const CLASS = { " ": "diff-ctx", "-": "diff-del", "+": "diff-add" };
// Unchanged lines shown around each change; longer runs between changes fold into one line.
export const CONTEXT_LINES = 3;
// Lines of the current file shown around a snippet the agent sent, when the file holds it.
const FILE_CONTEXT_LINES = 5;
// Below this width a diff starts folded (a phone), above it open; its toggle changes that.
const NARROW = "(max-width: 700px)";

/**
 * The rows of `rows` to show: every change with `context` unchanged lines around it, and for each
 * longer unchanged run one `{gap: n}` in its place. Each row keeps its old and new line numbers
 * (`old`, `new`: 1-based, null on the side it is not on).
 */
export function hunks(rows, context = CONTEXT_LINES) {
  let oldNo = 0;
  let newNo = 0;
  const numbered = rows.map((row) => {
    if (row.op !== "+") oldNo++;
    if (row.op !== "-") newNo++;
    return { ...row, old: row.op === "+" ? null : oldNo, new: row.op === "-" ? null : newNo };
  });
  const near = new Array(numbered.length).fill(false);
  numbered.forEach((row, index) => {
    if (row.op === " ") return;
    for (let i = Math.max(0, index - context); i <= Math.min(numbered.length - 1, index + context); i++) {
      near[i] = true;
    }
  });
  const out = [];
  let gap = 0;
  numbered.forEach((row, index) => {
    if (near[index]) {
      if (gap) out.push({ gap });
      gap = 0;
      out.push(row);
    } else {
      gap++;
    }
  });
  if (gap) out.push({ gap });
  return out;
}

function rowElement(row, from = null) {
  if (row.gap !== undefined) {
    return el("span", { class: "diff-gap", text: `⋯ ${row.gap} unchanged line${row.gap === 1 ? "" : "s"}\n` });
  }
  const line = el("span", { class: CLASS[row.op], text: `${row.op} ${row.line}\n` });
  if (row.old !== null) line.dataset.old = String(row.old + (from ?? 1) - 1);
  if (row.new !== null) line.dataset.new = String(row.new + (from ?? 1) - 1);
  return line;
}

/**
 * A <figure> showing the change to `path`: a header (the file, what changed, a toggle) and the
 * hunks, folded on a narrow screen. `oldText` null means a new file. Opened the first time, a
 * change whose new text the current file holds elsewhere than at its start (a snippet) gets the
 * file's lines around it and their numbers, read from the host.
 */
export function renderDiff(path, oldText, newText) {
  const oldLines = oldText === null ? [] : splitLines(oldText);
  const newLines = splitLines(newText);
  const rows = diffLines(oldLines, newLines);
  const added = rows.filter((row) => row.op === "+").length;
  const removed = rows.filter((row) => row.op === "-").length;
  const shown = hunks(rows);
  const pre = el("pre", { class: "diff-body", testid: "diff-body" },
    ...shown.map((row) => rowElement(row)));
  const caption = el("figcaption", {}, fileLink(path, null, path),
    oldText === null ? " (new file)" : null);
  const folded = typeof matchMedia === "function" && matchMedia(NARROW).matches;
  // A disclosure, not a button: it only shows or hides, and a viewer's card holds no control.
  const toggle = el("summary", { class: "diff-toggle", testid: "diff-toggle",
    text: folded ? "Show" : "Hide" });
  const body = el("details", { class: "diff-fold", testid: "diff-fold", open: !folded }, toggle, pre);
  const figure = el("figure", { class: "diff", testid: "diff" },
    el("div", { class: "diff-head" }, caption,
      el("span", { class: "diff-stat", testid: "diff-stat", text: `+${added} −${removed}` })),
    body);
  let widened = false;
  const widen = () => {
    if (widened || oldText === null || newLines.length === 0) return;
    widened = true;
    const reads = fileReads();
    if (!reads) return;
    reads.read(path, null, newLines.join("\n")).then((message) => {
      const found = message && Number.isInteger(message.found) ? message.found : null;
      if (found === null || !Array.isArray(message.lines) || !Number.isInteger(message.first)) return;
      const fileLines = message.lines.map((line) => String(line));
      const at = (number) => fileLines[number - message.first];
      const before = [];
      for (let n = Math.max(message.first, found - FILE_CONTEXT_LINES); n < found; n++) {
        before.push({ op: " ", line: at(n), old: null, new: n });
      }
      const end = found + newLines.length;
      const after = [];
      for (let n = end; n < end + FILE_CONTEXT_LINES && at(n) !== undefined; n++) {
        after.push({ op: " ", line: at(n), old: null, new: n });
      }
      if (found === 1 && after.length === 0) return; // the whole file: nothing around it
      const fromFile = (row) => {
        const line = rowElement(row);
        line.classList.add("diff-file");
        delete line.dataset.old;
        return line;
      };
      // The diff's own rows, numbered where the file has them.
      pre.replaceChildren(...before.map(fromFile),
        ...shown.map((row) => {
          const line = rowElement(row, found);
          delete line.dataset.old;
          if (row.new === null) delete line.dataset.new;
          return line;
        }),
        ...after.map(fromFile));
      figure.dataset.context = "file";
    });
  };
  body.addEventListener("toggle", () => {
    toggle.textContent = body.open ? "Hide" : "Show";
    if (body.open) widen();
  });
  if (!folded && typeof IntersectionObserver === "function") {
    // Read once the diff is on screen: a long replay does not ask for every file it shows.
    const seen = new IntersectionObserver((entries) => {
      if (!entries.some((entry) => entry.isIntersecting)) return;
      seen.disconnect();
      widen();
    });
    seen.observe(figure);
  }
  return figure;
}
