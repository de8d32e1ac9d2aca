// The verified mark beside the agent's status: how far the items this page holds are what the
// host's key signed (docs/web.md, "The verified mark"), checked by chain.js from the host's
// `head` events and the items as they arrive.

import { ChainCheck } from "./chain.js";

const LABELS = {
  verified: (r) => [`✓ signed to #${r.to}`, `Items #${r.from} to #${r.to} are exactly what the ` +
    "host signed; its key was checked against the link."],
  failed: (r) => ["✗ not as signed", `The conversation does not match the host's signature: ${r.reason}.`],
  unchecked: (r) => ["signed, not checked", `The host signed its log, but this page cannot check it: ${r.reason}.`],
};

export class VerifiedMark {
  constructor(hostId) {
    this.chain = new ChainCheck(hostId);
    this.element = document.createElement("span");
    this.element.className = "verified";
    this.element.dataset.testid = "verified-mark";
    this.element.dataset.state = "unsigned";
    this.element.hidden = true;
    this.result = { state: "unsigned" };
    this.running = null;
    this.again = false;
  }

  /**
   * The view, seen through the mark: every call reaches the view as before; the items, the
   * `head` events and a reset also reach the mark.
   */
  watch(view) {
    const mark = this;
    const hooks = {
      item(item) {
        mark.chain.item(item);
        if (mark.result.state === "unchecked") mark.refresh();
      },
      replayItems(items) {
        for (const item of items) mark.chain.item(item);
        mark.refresh();
      },
      event(event) {
        if (event?.kind === "head") {
          mark.chain.setHead(event.data);
          mark.refresh();
        }
      },
      resetConversation() {
        mark.chain.reset();
        mark.refresh();
      },
    };
    return new Proxy(view, {
      get(target, name, receiver) {
        const value = Reflect.get(target, name, receiver);
        if (typeof value !== "function" || !Object.hasOwn(hooks, name)) return value;
        return (...args) => {
          // The mark takes its copy first: the view may annotate what it is given.
          hooks[name](...args);
          return value.apply(target, args);
        };
      },
    });
  }

  /** Check again; one check at a time, and one more if asked meanwhile. */
  refresh() {
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = (async () => {
      do {
        this.again = false;
        this.show(await this.chain.check());
      } while (this.again);
      this.running = null;
    })();
    return this.running;
  }

  show(result) {
    this.result = result;
    this.element.dataset.state = result.state;
    const label = LABELS[result.state];
    this.element.hidden = !label;
    if (!label) return;
    const [text, title] = label(result);
    this.element.textContent = text;
    this.element.title = title;
    if (result.state === "verified") {
      this.element.dataset.from = String(result.from);
      this.element.dataset.to = String(result.to);
    }
  }
}
