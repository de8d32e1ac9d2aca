// Agent and teammate text is untrusted markdown: marked turns it into HTML, DOMPurify keeps only
// the elements and attributes markdown needs, and links are forced to open elsewhere without a
// referrer or an opener. The page's CSP is the second wall: even markup that slipped through
// could run no script.

import { Marked } from "./vendor/marked.esm.js";
import DOMPurify from "./vendor/purify.es.mjs";

const marked = new Marked({ gfm: true, breaks: true, async: false });

// Only these URL schemes survive in href/src; everything else (javascript:, data:, vbscript:,
// blob:, ...) is dropped. Relative links are kept: they point at the relay, which serves nothing
// that acts on a GET.
const SAFE_URL = /^(?:https?:|mailto:|#|\/(?!\/)|\.{0,2}\/|[^:/?#]*(?:[/?#]|$))/i;

// What marked makes of markdown (GFM tables and strikethrough included), and the few inline
// tags people write by hand. Nothing here is positioned, a form control, or able to load more
// than an image from the relay.
const TAGS = [
  "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "pre", "code",
  "ul", "ol", "li", "dl", "dt", "dd", "table", "thead", "tbody", "tfoot", "tr", "th", "td",
  "a", "img", "em", "strong", "b", "i", "u", "s", "del", "ins", "mark", "small", "sub", "sup",
  "kbd", "samp", "var", "abbr", "q", "span", "div", "details", "summary",
];

// The attributes markdown needs: a link's target and title, an image's source and text, a
// numbered list's first number, a table column's alignment. No `class`, `id`, `name`, `style`,
// `role`, `aria-*` or `data-*`: markup from the network must never reach the page's own styles,
// ids (getElementById, DOM clobbering) or test ids, or it could dress up as the page (a
// `class="screen blocking"` is the page's full-window modal). The `language-x` class marked puts
// on a fenced block goes too; the page does not highlight code.
const ATTRIBUTES = ["href", "title", "src", "alt", "start", "align"];

const PURIFY_OPTIONS = {
  RETURN_DOM_FRAGMENT: true,
  ALLOWED_TAGS: TAGS,
  ALLOWED_ATTR: ATTRIBUTES,
  ALLOW_DATA_ATTR: false,
  ALLOW_ARIA_ATTR: false,
  ALLOWED_URI_REGEXP: SAFE_URL,
};

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  for (const attribute of ["href", "src"]) {
    const value = node.getAttribute?.(attribute);
    if (value != null && !SAFE_URL.test(value.trim())) node.removeAttribute(attribute);
  }
  // Set after the attributes were checked: the only `target` and `rel` a link can have.
  if (node.tagName === "A") {
    node.setAttribute("rel", "noopener noreferrer nofollow");
    node.setAttribute("target", "_blank");
  }
});

/** A sanitized DocumentFragment for the markdown `text`. */
export function renderMarkdown(text) {
  let html;
  try {
    html = marked.parse(String(text ?? ""));
  } catch {
    const fallback = document.createDocumentFragment();
    fallback.append(document.createTextNode(String(text ?? "")));
    return fallback;
  }
  return DOMPurify.sanitize(html, PURIFY_OPTIONS);
}

/** Replace the children of `element` with the rendered `text`. */
export function setMarkdown(element, text) {
  element.replaceChildren(renderMarkdown(text));
}
