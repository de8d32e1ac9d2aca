// The agent's request for a login (`auth_required`, docs/agents.md "Logging in"): the methods it
// offers, each with a button for a driver that has the host log the agent in with it.

import { arr, el, formatTime, obj, str } from "./dom.js";

let sender = null;

/** Send `authenticate` requests with `send(message)` from now on (the live page sets it). */
export function setLoginSender(send) {
  sender = send;
}

/** The card of an `auth_required` session event; buttons only for a driver of the live page. */
export function loginCard(item, data, isDriver) {
  const methods = arr(data.methods).map(obj).filter((method) => str(method.id));
  const reason = str(data.reason);
  const list = el("ul", { class: "login-methods" }, ...methods.map((method) => {
    const id = str(method.id);
    const name = str(method.name, id);
    return el("li", { class: "login-method", testid: "login-method", "data-method-id": id },
      el("span", { class: "login-name", text: name }),
      str(method.description) ? el("span", { class: "login-description", text: ` — ${str(method.description)}` }) : null,
      isDriver && sender ? el("button", { class: "login-button", testid: "login-button", type: "button",
        text: "Log in", onclick: () => sender({ op: "authenticate", method_id: id }) }) : null);
  }));
  return el("article", { class: "item login", testid: "auth-required", role: "note" },
    el("div", { class: "who" }, el("span", { text: `The agent needs a login${reason ? `: ${reason}` : ""}.` }),
      el("time", { text: formatTime(item.created_at), datetime: str(item.created_at) })),
    methods.length ? list : el("p", { text: "It offers no login method." }),
    isDriver ? null : el("p", { class: "login-viewer", text: "A driver can log it in." }));
}
