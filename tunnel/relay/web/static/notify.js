// Notifications of the host's permission requests, the page's side (docs/notifications.md, "The
// page and the service worker"): the service worker's registration, the toggle in the side
// panel that subscribes this browser to the host's pushes (`push_on`, `push_off`), whether this
// page is in view (`focus`, so the host pushes only to people not looking), and the requests a
// tapped notification brings the page to. A host that offers no push (no `push_key` in `ready`)
// gets none of these requests and the toggle stays hidden.

import { b64urlDecode, b64urlEncode } from "./crypto.js";
import { el } from "./dom.js";
import {
  MAX_BROWSER_ID_LENGTH,
  MAX_ID_LENGTH,
  MIN_BROWSER_ID_LENGTH,
  PUSH_KEY_SIZE,
} from "./wire.js";

// The browser's id for the host, kept per host id: which of a person's browsers is in view.
const BROWSER_KEY_PREFIX = "agent-tunnel.browser.";
const BROWSER_ID_BYTES = 16; // 22 base64url characters
const BROWSER_ID = new RegExp(`^[A-Za-z0-9_-]{${MIN_BROWSER_ID_LENGTH},${MAX_BROWSER_ID_LENGTH}}$`);
// A VAPID public key (PUSH_KEY_SIZE bytes) is an uncompressed P-256 point.
const UNCOMPRESSED_POINT = 0x04;
const WORKER_WAIT_MS = 5000;
/** The error codes a host answers a refused push_on with (docs/notifications.md). */
const PUSH_ON_REFUSALS = new Set(["forbidden", "bad_request", "not_supported"]);

const TEXT = {
  off: "Get a notification when the agent asks for permission while this page is not in view.",
  on: "On: this browser gets a notification when the agent asks for permission while this page is not in view.",
  asking: "Asking the browser…",
  waiting: "Waiting for the host…",
  unsupported: "This browser cannot get notifications from this page (it has no service workers or no push). On an iPhone or iPad, add the page to the Home Screen and open it from there.",
  blocked: "The browser blocks notifications for this page: allow them in its site settings, then turn them on here.",
  dismissed: "Notifications were not allowed. Turn them on again to be asked again.",
  notConnected: "Not connected to the host: turn notifications on once the page is connected.",
  badKey: "The host's push key is malformed: notifications cannot be turned on.",
};

/** The host's `push_key` as the 65 bytes of a P-256 point, or null if it is not one. */
export function pushKey(value) {
  if (typeof value !== "string") return null;
  let bytes;
  try {
    bytes = b64urlDecode(value);
  } catch {
    return null;
  }
  return bytes.length === PUSH_KEY_SIZE && bytes[0] === UNCOMPRESSED_POINT ? bytes : null;
}

function sameBytes(a, b) {
  if (!a || !b) return false;
  const x = new Uint8Array(a);
  const y = new Uint8Array(b);
  return x.length === y.length && x.every((byte, index) => byte === y[index]);
}

/** This browser's id for `hostId`: made once from crypto.getRandomValues, kept in localStorage. */
export function browserId(hostId) {
  const key = BROWSER_KEY_PREFIX + hostId;
  try {
    const kept = localStorage.getItem(key);
    if (kept && BROWSER_ID.test(kept)) return kept;
  } catch {
    // Storage may be off (private mode): the id then lasts for this page only.
  }
  const made = b64urlEncode(crypto.getRandomValues(new Uint8Array(BROWSER_ID_BYTES)));
  try {
    localStorage.setItem(key, made);
  } catch {
    // As above.
  }
  return made;
}

function isId(value) {
  return typeof value === "string" && value.length > 0 && value.length <= MAX_ID_LENGTH;
}

/**
 * The request a tapped notification opened this page at (`?request=ID&option=ID`), or null;
 * the two parameters are taken out of the address, the rest of it (the fragment) stays.
 */
export function requestInAddress(location, history) {
  const url = new URL(location.href);
  const requestId = url.searchParams.get("request");
  const optionId = url.searchParams.get("option");
  if (!url.searchParams.has("request") && !url.searchParams.has("option")) return null;
  url.searchParams.delete("request");
  url.searchParams.delete("option");
  history.replaceState(history.state, "", url.href);
  return isId(requestId) ? { requestId, optionId: isId(optionId) ? optionId : null } : null;
}

/**
 * The link the service worker of `hostId` keeps while notifications are on (an installed page
 * starts at /h/<host_id> without the fragment), or null.
 */
export async function keptLink(hostId) {
  if (!("serviceWorker" in navigator)) return null;
  try {
    const registration = await navigator.serviceWorker.getRegistration(`/h/${hostId}`);
    const worker = registration?.active;
    if (!worker) return null;
    const channel = new MessageChannel();
    const answer = await new Promise((resolve) => {
      channel.port1.onmessage = (event) => resolve(event.data);
      setTimeout(() => resolve(null), WORKER_WAIT_MS);
      worker.postMessage({ type: "kept_link" }, [channel.port2]);
    });
    return answer && typeof answer.url === "string" ? answer.url : null;
  } catch {
    return null;
  }
}

export class Notifications {
  /**
   * `send(message)` sends a request to the host (false when not attached); `onOpenRequest(
   * requestId, optionId)` brings the page to a request a notification was tapped for.
   */
  constructor({ hostId, send, onOpenRequest }) {
    Object.assign(this, { hostId, send, onOpenRequest });
    this.supported = "serviceWorker" in navigator && "PushManager" in window &&
      "Notification" in window;
    this.key = null;
    this.browser = null;
    // This browser's subscription to the host's pushes, as the host was told of it.
    this.subscription = null;
    // Waiting for the host's answer to a push_on: its refusal comes as an `error`.
    this.awaiting = false;
    this.busy = false;
    this.lastFocus = null;
    this.checked = Promise.resolve();
    this.button = el("button", { type: "button", class: "notify-toggle", testid: "notify-toggle",
      "aria-pressed": "false", text: "Turn on notifications", onclick: () => this.toggle() });
    this.status = el("p", { class: "notify-status", testid: "notify-status", role: "status",
      text: TEXT.off });
    this.element = el("section", { class: "notify", testid: "notify", hidden: true },
      el("h2", { text: "Notifications" }), this.button, this.status);
    this.registration = this.supported ? this.register() : Promise.resolve(null);
    if (this.supported) {
      navigator.serviceWorker.addEventListener("message", (event) => this.onWorkerMessage(event));
    }
    for (const type of ["focus", "blur"]) window.addEventListener(type, () => this.sendFocus());
    document.addEventListener("visibilitychange", () => this.sendFocus());
  }

  async register() {
    try {
      // One worker per host: a push subscription belongs to one host's key.
      return await navigator.serviceWorker.register(new URL("./sw.js", import.meta.url),
        { scope: `/h/${this.hostId}` });
    } catch (error) {
      console.warn(`the service worker did not register: ${error}`);
      return null;
    }
  }

  /** The host's `ready` message: whether it offers push, and with which key. */
  offered(info) {
    const offered = typeof info.push_key === "string";
    this.key = pushKey(info.push_key);
    this.element.hidden = !offered;
    if (!offered) return;
    this.browser ??= browserId(this.hostId);
    if (!this.supported) {
      this.show("unsupported", TEXT.unsupported, { disabled: true });
      return;
    }
    if (this.key === null) {
      this.show("failed", TEXT.badKey, { disabled: true });
      return;
    }
    this.checked = this.checkSubscription().catch((error) => {
      this.subscription = null;
      this.show("failed", `The browser could not tell whether notifications are on: ${error?.message || error}`);
    });
  }

  /** What this browser is subscribed to already: kept if it is to this key, dropped if not. */
  async checkSubscription() {
    const registration = await this.registration;
    const subscription = registration ? await registration.pushManager.getSubscription() : null;
    if (subscription && !sameBytes(subscription.options.applicationServerKey, this.key)) {
      // The host has another key now: that subscription reaches nobody.
      await subscription.unsubscribe().catch(() => false);
      this.subscription = null;
    } else {
      this.subscription = subscription;
    }
    if (this.subscription === null) {
      this.show(Notification.permission === "denied" ? "blocked" : "off",
        Notification.permission === "denied" ? TEXT.blocked : TEXT.off);
    } else {
      this.show("on", TEXT.on);
    }
  }

  /** Attached again (after `ready`): say whether the page is in view, and renew the subscription. */
  async attached() {
    this.lastFocus = null;
    this.sendFocus();
    await this.checked;
    // The host keeps subscriptions, but one it lost (or never got) is given again; its
    // refusal now turns notifications off here too.
    if (this.subscription !== null && this.key !== null && this.sendOn(this.subscription)) {
      this.awaiting = true;
    }
  }

  sendFocus() {
    if (this.key === null || this.browser === null) return;
    const focused = document.visibilityState === "visible" && document.hasFocus();
    if (focused === this.lastFocus) return;
    if (this.send({ op: "focus", focused, browser: this.browser })) this.lastFocus = focused;
  }

  sendOn(subscription) {
    const keys = subscription.toJSON().keys ?? {};
    return this.send({ op: "push_on", endpoint: subscription.endpoint, p256dh: String(keys.p256dh),
      auth: String(keys.auth), browser: this.browser });
  }

  toggle() {
    if (this.busy) return;
    this.busy = true;
    const work = this.subscription === null ? this.turnOn() : this.turnOff();
    work.catch((error) => {
      this.show("failed", `Notifications could not be changed: ${error?.message || error}`);
    }).finally(() => {
      this.busy = false;
      this.button.disabled = false;
    });
  }

  async turnOn() {
    this.show("working", TEXT.asking, { disabled: true });
    const permission = await Notification.requestPermission();
    if (permission !== "granted") {
      this.show(permission === "denied" ? "blocked" : "off",
        permission === "denied" ? TEXT.blocked : TEXT.dismissed);
      return;
    }
    const registration = await this.registration;
    if (registration === null) {
      this.show("failed", TEXT.unsupported);
      return;
    }
    let subscription;
    try {
      await navigator.serviceWorker.ready;
      subscription = await registration.pushManager.subscribe({ userVisibleOnly: true,
        applicationServerKey: this.key });
    } catch (error) {
      this.show("failed", `The browser could not subscribe to push notifications: ${error?.message || error}. Its push service may be unreachable, or turned off.`);
      return;
    }
    this.subscription = subscription;
    this.awaiting = true;
    if (!this.sendOn(subscription)) {
      await this.dropSubscription();
      this.show("off", TEXT.notConnected);
      return;
    }
    this.show("working", TEXT.waiting, { disabled: true });
  }

  async turnOff() {
    this.show("working", "Turning notifications off…", { disabled: true });
    const endpoint = this.subscription.endpoint;
    await this.dropSubscription();
    this.send({ op: "push_off", endpoint });
    this.show("off", TEXT.off);
  }

  async dropSubscription() {
    const subscription = this.subscription;
    this.subscription = null;
    this.awaiting = false;
    await this.keepLink(false);
    if (subscription) await subscription.unsubscribe().catch(() => false);
  }

  /** The host's `push` confirmation (docs/notifications.md). */
  async confirmed(message) {
    if (this.subscription === null || message.endpoint !== this.subscription.endpoint) return;
    this.awaiting = false;
    if (message.on === true) {
      // A tap while no window of this host is open opens the link the worker keeps.
      await this.keepLink(true);
      this.show("on", TEXT.on);
    } else if (message.on === false) {
      await this.dropSubscription();
      this.show("off", TEXT.off);
    }
  }

  /** The host's `error`: while a push_on waits for its answer, one of the codes the host
   * refuses a push_on with is that answer; any other error is about something else. */
  async refused(message) {
    if (!this.awaiting || !PUSH_ON_REFUSALS.has(message.code)) return;
    await this.dropSubscription();
    this.show("failed", `The host did not turn notifications on: ${String(message.message)}`);
  }

  /** Keep the page's link in the worker's storage (notifications on), or drop it. */
  async keepLink(keep) {
    const registration = await this.registration;
    const worker = registration?.active;
    if (!worker) return;
    const channel = new MessageChannel();
    const answered = new Promise((resolve) => {
      channel.port1.onmessage = resolve;
      // A worker that does not answer (being replaced, say) holds up nothing.
      setTimeout(resolve, WORKER_WAIT_MS);
    });
    worker.postMessage(keep ? { type: "keep_link", url: location.href } : { type: "forget_link" },
      [channel.port2]);
    await answered;
  }

  onWorkerMessage(event) {
    const message = event.data && typeof event.data === "object" ? event.data : {};
    if (message.type !== "open_request" || !isId(message.request_id)) return;
    this.onOpenRequest(message.request_id, isId(message.option_id) ? message.option_id : null);
  }

  show(state, text, { disabled = false } = {}) {
    const on = state === "on";
    this.element.dataset.state = state;
    this.status.dataset.state = state;
    this.status.textContent = text;
    this.button.textContent = on ? "Turn off notifications" : "Turn on notifications";
    this.button.setAttribute("aria-pressed", String(on));
    this.button.disabled = disabled;
  }
}
