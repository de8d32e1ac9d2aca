// The agent's context use and cost (`usage` session events, docs/application.md): one small line
// under the settings bar, the latest report only. Text in, text out, through textContent.

import { el, obj, str } from "./dom.js";

const THOUSAND = 1e3;
const count = (n) => (n >= 10 * THOUSAND ? `${Math.floor(n / THOUSAND)}k` : String(n));

/** A `usage` event's data in words: "53k of 200k tokens used (26%), 147k left, cost 0.42 USD". */
export function usageText(data) {
  const used = Number.isSafeInteger(data.used) && data.used >= 0 ? data.used : null;
  const size = Number.isSafeInteger(data.size) && data.size > 0 ? data.size : null;
  if (used === null) return "";
  let text = size === null ? `${count(used)} tokens used`
    : `${count(used)} of ${count(size)} tokens used (${Math.floor((100 * used) / size)}%), `
      + `${count(Math.max(0, size - used))} left`;
  const cost = obj(data.cost);
  if (Number.isFinite(cost.amount)) {
    text += `, cost ${cost.amount.toFixed(2)}${str(cost.currency) ? ` ${str(cost.currency)}` : ""}`;
  }
  return text;
}

export class UsageLine {
  constructor() {
    this.element = el("div", { class: "agent-usage", testid: "agent-usage", hidden: true });
  }

  update(data) {
    const text = usageText(obj(data));
    this.element.textContent = text;
    this.element.hidden = text === "";
  }

  reset() {
    this.element.textContent = "";
    this.element.hidden = true;
  }
}
