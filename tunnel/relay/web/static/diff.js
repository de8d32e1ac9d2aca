// Line diffs for tool-call content of type "diff": which lines were removed, added or kept.

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

/** A <figure> showing the change to `path`; `oldText` null means a new file. */
export function renderDiff(path, oldText, newText) {
  const rows = diffLines(oldText === null ? [] : splitLines(oldText), splitLines(newText));
  const pre = document.createElement("pre");
  pre.className = "diff-body";
  for (const { op, line } of rows) {
    const row = document.createElement("span");
    row.className = CLASS[op];
    row.textContent = `${op} ${line}\n`;
    pre.append(row);
  }
  const caption = document.createElement("figcaption");
  caption.textContent = oldText === null ? `${path} (new file)` : path;
  const figure = document.createElement("figure");
  figure.className = "diff";
  figure.dataset.testid = "diff";
  figure.append(caption, pre);
  return figure;
}
