// The service worker of one host's page (registered with the scope /h/<host_id>), there for
// notifications only (docs/notifications.md, "The page and the service worker"): it shows the
// permission requests and the agent's questions the host pushes, closes those the host
// withdraws, and on a tap brings up the page at the request. It never answers a request, handles
// no fetch and caches nothing.
// The one thing it keeps is the page's link (its secret in the fragment), in IndexedDB, and only
// while the page has notifications on: a tap with no window of the host open needs it to open one.
// A classic script with no imports, so that every browser with push runs it.

"use strict";

// The host of this registration: the page registers it with its own path as the scope.
const HOST = new URL(self.registration.scope).pathname.replace(/^\/h\//, "").replace(/\/$/, "");
const PAGE_PATH = `/h/${HOST}`;
const DATABASE = "agent-tunnel";
const LINKS = "links";
const ICON = new URL("icon-192.png", self.location.href).href;
// Cuts for what a push says: a notification is a few lines; the page shows everything.
const MAX_AGENT = 64;
const MAX_TITLE = 160;
const MAX_BODY = 300;
// As long as an id the host takes in a request (MAX_ID_LENGTH of tunnel.app.requests); a
// classic worker imports no module, so it cannot read wire.js.
const MAX_ID = 256;
const MAX_OPTIONS = 16;
const MAX_OPTION_NAME = 64;
// Control characters, and the bidirectional overrides, isolates and marks that could make a
// title read as another.
const UNSHOWN = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]+/g;

/** `value` as one line of at most `max` code points ("" if it is not a string). */
function line(value, max) {
  if (typeof value !== "string") return "";
  const points = [...value.replace(UNSHOWN, " ").replace(/\s+/g, " ").trim()];
  return points.length > max ? `${points.slice(0, max - 1).join("")}…` : points.join("");
}

function isId(value) {
  return typeof value === "string" && value.length > 0 && value.length <= MAX_ID;
}

/**
 * A push payload checked: `{type: "request" | "withdraw", tag, request_id, ...}` with every
 * field of the kind it must be, or null for anything else (another host's, a newer version's,
 * garbage). The payload is the host's, sealed for this browser, but it is still only text.
 */
function readPush(payload) {
  if (!payload || typeof payload !== "object" || payload.v !== 1) return null;
  if (payload.host !== HOST || !isId(payload.request_id)) return null;
  const tag = `${HOST}/${payload.request_id}`;
  if (payload.tag !== tag) return null;
  if (payload.type === "withdraw") return { type: "withdraw", tag };
  if (payload.type !== "request") return null;
  const options = (Array.isArray(payload.options) ? payload.options : [])
    .filter((option) => option && typeof option === "object" && isId(option.option_id))
    .slice(0, MAX_OPTIONS)
    .map((option) => ({
      option_id: option.option_id,
      name: line(option.name, MAX_OPTION_NAME) || line(option.option_id, MAX_OPTION_NAME),
    }));
  return {
    type: "request",
    tag,
    request_id: payload.request_id,
    agent: line(payload.agent, MAX_AGENT) || "The agent",
    title: line(payload.title, MAX_TITLE) || "permission",
    body: line(payload.command, MAX_BODY) || line(payload.kind, MAX_BODY),
    options,
    reminder: payload.reminder === true,
  };
}

/** The actions of a request's notification: "Open", then as many options as the browser shows. */
function actionsFor(options) {
  const max = Number.isInteger(Notification.maxActions) ? Notification.maxActions : 2;
  if (max < 1) return [];
  const actions = [{ action: "open", title: "Open" }];
  // An option's action only opens the page with it chosen: the person confirms there.
  options.slice(0, max - 1).forEach((option, index) => {
    actions.push({ action: `option:${index}`, title: option.name });
  });
  return actions;
}

async function showRequest(request) {
  await self.registration.showNotification(`${request.agent} asks: ${request.title}`, {
    body: request.body,
    tag: request.tag,
    // A reminder replaces the notification of the same request and sounds again.
    renotify: request.reminder,
    icon: ICON,
    data: { host: HOST, request_id: request.request_id, options: request.options },
    actions: actionsFor(request.options),
  });
}

async function closeTag(tag) {
  for (const notification of await self.registration.getNotifications({ tag })) {
    notification.close();
  }
}

/** What a push asks for: show a request, or close the notification of one withdrawn. */
async function handlePush(data) {
  let payload = null;
  try {
    payload = data ? data.json() : null;
  } catch {
    return;
  }
  const push = readPush(payload);
  if (push === null) return;
  if (push.type === "withdraw") await closeTag(push.tag);
  else await showRequest(push);
}

/**
 * A tap on a request's notification (`action`: "", "open" or "option:N"): the page of this host
 * at that request, with the option chosen if the tap was on one, for the person to confirm.
 * An open window of the host is focused and told; otherwise the link kept while notifications
 * are on opens one, the request in its address.
 */
async function openRequest(notification, action) {
  const data = notification.data && typeof notification.data === "object" ? notification.data : {};
  if (data.host !== HOST || !isId(data.request_id)) return;
  const chosen = /^option:(\d+)$/.exec(action || "");
  const option = chosen && Array.isArray(data.options) ? data.options[Number(chosen[1])] : null;
  const target = {
    type: "open_request",
    request_id: data.request_id,
    option_id: option && isId(option.option_id) ? option.option_id : null,
  };
  const windows = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
  const open = windows.find((client) => new URL(client.url).pathname === PAGE_PATH);
  if (open) {
    let client = open;
    try {
      client = (await open.focus()) ?? open;
    } catch {
      // Focusing needs the tap's user activation; the page is told all the same.
    }
    client.postMessage(target);
    return;
  }
  const link = await keptLink();
  const url = new URL(link ?? PAGE_PATH, self.location.origin);
  url.searchParams.set("request", target.request_id);
  if (target.option_id !== null) url.searchParams.set("option", target.option_id);
  await self.clients.openWindow(url.href);
}

// ---- the kept link: IndexedDB, one record per host, only while notifications are on ----

function database() {
  return new Promise((resolve, reject) => {
    const request = indexedDB.open(DATABASE, 1);
    request.onupgradeneeded = () => request.result.createObjectStore(LINKS);
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error);
  });
}

async function withLinks(mode, work) {
  const db = await database();
  try {
    return await new Promise((resolve, reject) => {
      const transaction = db.transaction(LINKS, mode);
      const request = work(transaction.objectStore(LINKS));
      transaction.oncomplete = () => resolve(request.result);
      transaction.onerror = () => reject(transaction.error);
      transaction.onabort = () => reject(transaction.error);
    });
  } finally {
    db.close();
  }
}

async function keptLink() {
  try {
    const value = await withLinks("readonly", (store) => store.get(HOST));
    return typeof value === "string" ? value : null;
  } catch {
    return null;
  }
}

/** The page's link for this host, only if it is one: this origin, this host's page. */
function isPageLink(value) {
  if (typeof value !== "string") return false;
  try {
    const url = new URL(value);
    return url.origin === self.location.origin && url.pathname === PAGE_PATH && url.hash.length > 1;
  } catch {
    return false;
  }
}

/** The page's messages: keep its link (notifications on), forget it (off), or say it. */
async function handleMessage(message, port) {
  let reply = { ok: false };
  try {
    if (message.type === "keep_link" && isPageLink(message.url)) {
      await withLinks("readwrite", (store) => store.put(message.url, HOST));
      reply = { ok: true };
    } else if (message.type === "forget_link") {
      await withLinks("readwrite", (store) => store.delete(HOST));
      reply = { ok: true };
    } else if (message.type === "kept_link") {
      reply = { ok: true, url: await keptLink() };
    }
  } finally {
    if (port) port.postMessage(reply);
  }
}

self.addEventListener("install", () => self.skipWaiting());

self.addEventListener("push", (event) => {
  event.waitUntil(handlePush(event.data));
});

self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  event.waitUntil(openRequest(event.notification, event.action));
});

self.addEventListener("message", (event) => {
  // Only this host's page speaks to this worker: another page of the origin has its own.
  const source = event.source;
  if (!source || source.type !== "window" || new URL(source.url).pathname !== PAGE_PATH) return;
  const message = event.data && typeof event.data === "object" ? event.data : {};
  event.waitUntil(handleMessage(message, event.ports[0] ?? null));
});
