// Small DOM helpers every page module shares. `el` is the only way the page builds elements from
// data: text goes in as textContent, attributes as strings, handlers as listeners; it never
// parses markup.

/**
 * A new `tag` element. Attributes: `class`, `text` (textContent), `testid` (data-testid),
 * `onX` (an X event listener), anything else as an attribute (true: present; null, undefined
 * and false: absent). Null and undefined children are skipped.
 */
export function el(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") element.className = value;
    else if (key === "text") element.textContent = value;
    else if (key === "testid") element.dataset.testid = value;
    else if (key.startsWith("on")) element.addEventListener(key.slice(2), value);
    else element.setAttribute(key, value === true ? "" : String(value));
  }
  element.append(...children.filter((child) => child !== null && child !== undefined));
  return element;
}

/** `value` if it is a string, else `fallback`: wire data is untrusted and may be any type. */
export function str(value, fallback = "") {
  return typeof value === "string" ? value : fallback;
}

/** `value` as an object to read fields from ({} for anything else). */
export function obj(value) {
  return value && typeof value === "object" && !Array.isArray(value) ? value : {};
}

/** `value` as an array ([] for anything else). */
export function arr(value) {
  return Array.isArray(value) ? value : [];
}

export function formatTime(iso) {
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? "" : date.toLocaleTimeString();
}

/** JSON data as indented text, for showing raw tool input and output. */
export function pretty(value) {
  try {
    return JSON.stringify(value, (_key, v) => (v instanceof Uint8Array ? `<${v.length} bytes>` : v), 2);
  } catch {
    return String(value);
  }
}
