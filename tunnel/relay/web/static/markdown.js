// Agent and teammate text is untrusted markdown: marked turns it into HTML, DOMPurify keeps only
// inert markup, and links are forced to open elsewhere without a referrer or an opener. The page's
// CSP is the second wall: even markup that slipped through could run no script.

import { Marked } from "./vendor/marked.esm.js";
import DOMPurify from "./vendor/purify.es.mjs";

const marked = new Marked({ gfm: true, breaks: true, async: false });

// Only these URL schemes survive in href/src; everything else (javascript:, data:, vbscript:,
// blob:, ...) is dropped. Relative links are kept: they point at the relay, which serves nothing
// that acts on a GET.
const SAFE_URL = /^(?:https?:|mailto:|#|\/(?!\/)|\.{0,2}\/|[^:/?#]*(?:[/?#]|$))/i;

const PURIFY_OPTIONS = {
  RETURN_DOM_FRAGMENT: true,
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "option", "iframe",
    "frame", "object", "embed", "svg", "math", "link", "meta", "base", "audio", "video",
    "source", "track"],
  FORBID_ATTR: ["style", "srcset", "action", "formaction", "ping", "target", "xlink:href"],
  ALLOW_DATA_ATTR: false,
  ALLOWED_URI_REGEXP: SAFE_URL,
};

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  for (const attribute of ["href", "src"]) {
    const value = node.getAttribute?.(attribute);
    if (value != null && !SAFE_URL.test(value.trim())) node.removeAttribute(attribute);
  }
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
