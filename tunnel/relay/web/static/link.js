// One attachment: a WebSocket to the relay's /v1/attach carrying one encrypted session channel.
// It speaks the link protocol (hello, open, data, window, close, and the broadcast's cast and
// cut; docs/protocol.md) and the channel crypto (docs/security.md); the application messages
// above it are plain objects. Casts go to the session as they came, still sealed: the session
// holds the broadcast's key. It never reconnects: the session decides whether and when to start
// a new one.
//
// The channel opens with a key exchange (docs/security.md, "Opening a channel"): the `open` offers
// an ephemeral X25519 key and a proof of the role secret, and the host's first `data` frame is
// its answer, ANSWER_SIZE bytes in clear, signed by its host key. Only an answer that checks out
// gives the keys, so until then the page sends nothing on the channel: messages wait in the
// outbox, and the answer's bytes are granted back like any other data.

import {
  CastError,
  DecryptionError,
  e2eRoot,
  OpeningError,
  relayToken,
  TeammateOpening,
} from "./crypto.js";
import { decodeFrame, encodeFrame, decodeMsgpack, encodeMsgpack, ProtocolError } from "./frames.js";
import {
  CloseCode,
  DEFAULT_LIMITS,
  MAX_CLOSE_CODE,
  MAX_NAME_LENGTH,
  PROTOCOL_VERSION,
} from "./wire.js";

// The dialer picks odd channel ids; this link only ever opens one channel.
const CHANNEL = 1;
// Frames waiting to be handled, casts included. Flow control bounds data and cast bytes to one
// window; this bounds the count too, against a flood of tiny frames.
const MAX_INBOX = 20000;
// Messages waiting for window or encryption: far more than a person can type while the host
// has not granted window for a whole 256 KiB.
const MAX_OUTBOX = 4096;

export const DEFAULT_NAME = "teammate";
// Without the u flag these match UTF-16 code units: a surrogate with no partner, and C0/C1
// controls.
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/g;

/**
 * `text` as a display name: lone surrogates replaced (they have no UTF-8 form), controls removed,
 * trimmed and cut to MAX_NAME_LENGTH code points, which is what the host counts (it refuses a
 * longer name); "" if nothing is left.
 */
export function cleanName(text) {
  const cleaned = String(text ?? "").replace(LONE_SURROGATE, "\uFFFD").replace(CONTROL, "").trim();
  return Array.from(cleaned).slice(0, MAX_NAME_LENGTH).join("").trim();
}

/** The name a channel is opened with (never empty); its UTF-8 bytes are bound into the keys. */
export function channelName(text) {
  return cleanName(text) || DEFAULT_NAME;
}

export function attachUrl(location) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}/v1/attach`;
}

/**
 * One host message (docs/application.md) from its msgpack bytes: a map with a string `op`.
 * Anything else is a ProtocolError: the host, whose key sealed it, broke the protocol.
 */
export function decodeHostMessage(plaintext) {
  let message;
  try {
    message = decodeMsgpack(plaintext, { maxExtLength: 0 });
  } catch {
    throw new ProtocolError("application message is not msgpack");
  }
  if (message === null || typeof message !== "object" || typeof message.op !== "string") {
    throw new ProtocolError("application message has no op");
  }
  return message;
}

/**
 * The messages of an opened cast, still encoded (docs/application.md, "The broadcast"): its
 * plaintext is a msgpack array of bin, each what a `data` message would hold. CastError
 * otherwise, which breaks the broadcast as a cast that does not open does (as the Python
 * client does); a message in it that is not a host message is decodeHostMessage's to refuse.
 */
export function decodeCast(plaintext) {
  let messages;
  try {
    messages = decodeMsgpack(plaintext, { maxExtLength: 0 });
  } catch {
    throw new CastError("a cast that is not a list of messages");
  }
  if (!Array.isArray(messages) || !messages.every((bytes) => bytes instanceof Uint8Array)) {
    throw new CastError("a cast that is not a list of messages");
  }
  return messages;
}

/**
 * Attach to a host's session. `onMessage(message)` gets every decrypted application message,
 * `onCast(bytes)` every cast of the host's broadcast (still sealed) and `onCut()` the relay's
 * `cut`, all in arrival order: each is awaited (when it returns a promise) before the next frame
 * is handled, and the bytes of a message or cast are granted back only then. `onEnd({code,
 * reason})` is called exactly once when the attachment is over, whatever ended it; `onOpen()`
 * once the relay accepted our hello and the channel open is sent. An error thrown by a handler
 * ends the attachment with its `code` (PROTOCOL_ERROR if it has none).
 */
export class SessionLink {
  constructor({ url, hostId, role, secret, name, onMessage, onEnd, onOpen = () => {},
    onCast = () => {}, onCut = () => {}, subscribe = null }) {
    Object.assign(this, { url, hostId, role, secret, onMessage, onEnd, onOpen, onCast, onCut });
    // The early subscribe `{after, tail, conversation}` the open carries, or null: the host's
    // first answer then holds the snapshot (docs/protocol.md, "Application messages").
    this.subscribe = subscribe;
    // Exactly this string goes in the hello, the open and the opening's transcript.
    this.name = channelName(name);
    this.ws = null;
    this.ended = false;
    this.state = "connecting"; // -> hello-received -> open -> closing
    this.inbox = [];
    this.draining = false;
    this.outbox = [];
    this.flushing = false;
    // Until the relay's hello says otherwise, the default limits of tunnel.proto.limits.
    this.initialWindow = DEFAULT_LIMITS.initial_window;
    this.largestMessage = DEFAULT_LIMITS.initial_window;
    this.sendWindow = DEFAULT_LIMITS.initial_window;
    this.receiveWindow = DEFAULT_LIMITS.initial_window;
    // Bytes received (all of them consumed: frames are handled whole, one at a time) and not yet
    // granted back. Grants never exceed it, so the relay's send window never exceeds its initial
    // size, which it treats as a flow-control error.
    this.unacknowledged = 0;
    // Made by start(); null again once the host's answer was offered to it.
    this.opening = null;
    // Null until the host's answer checked out and the keys are made.
    this.channelCrypto = null;
    this.closeSent = false;
  }

  async start() {
    this.token = await relayToken(this.secret, this.hostId);
    this.opening = await TeammateOpening.create({
      root: await e2eRoot(this.secret, this.hostId),
      hostId: this.hostId,
      role: this.role,
      name: this.name,
      subscribe: this.subscribe,
    });
    if (this.ended) return;
    const ws = new WebSocket(this.url);
    ws.binaryType = "arraybuffer";
    this.ws = ws;
    ws.onmessage = (event) => this.receive(event.data);
    ws.onclose = (event) => this.end(event.code || CloseCode.ABNORMAL_CLOSURE, event.reason || "");
    // An error is always followed by a close event, which ends the attachment.
    ws.onerror = () => {};
  }

  /** Queue one application message (a plain object); false if it could not be queued. */
  send(message) {
    if (this.ended || this.outbox.length >= MAX_OUTBOX) return false;
    this.outbox.push({ plaintext: encodeMsgpack(message), ciphertext: null });
    this.flush();
    return true;
  }

  /** End the attachment from this side; the page calls it on unload or to reconnect. */
  close(code = CloseCode.NORMAL, reason = "") {
    // A page may only close a WebSocket with 1000 or 3000-4999 (the protocol's codes end at the
    // same 4999); the attachment still reports the real code.
    const wsCode = code === CloseCode.NORMAL || (code >= 3000 && code <= MAX_CLOSE_CODE)
      ? code
      : CloseCode.NORMAL;
    if (this.ws && this.ws.readyState <= WebSocket.OPEN) this.ws.close(wsCode);
    this.end(code, reason);
  }

  end(code, reason) {
    if (this.ended) return;
    this.ended = true;
    this.state = "closed";
    this.inbox.length = 0;
    this.outbox.length = 0;
    if (this.ws) {
      this.ws.onmessage = null;
      this.ws.onclose = null;
    }
    this.onEnd({ code, reason });
  }

  fail(error) {
    const code = Number.isInteger(error.code) ? error.code : CloseCode.PROTOCOL_ERROR;
    // The host learns why its channel ended when the fault was in what it sent on it: its
    // answer, or a message that did not decrypt.
    const reason = error instanceof OpeningError
      ? error.message
      : code === CloseCode.DECRYPTION_FAILED ? "decryption failed" : undefined;
    if (this.state === "open" && !this.closeSent && reason) {
      this.rawSend({ c: CHANNEL, k: "close", p: { code, reason } });
      this.closeSent = true;
    }
    this.close(code, reason ?? (error instanceof ProtocolError ? "protocol error" : ""));
  }

  rawSend(frame) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(encodeFrame(frame));
  }

  receive(data) {
    if (this.ended) return;
    if (!(data instanceof ArrayBuffer)) {
      this.fail(new ProtocolError("text message on a binary link"));
      return;
    }
    if (this.inbox.length >= MAX_INBOX) {
      this.fail(new ProtocolError("too many frames queued", CloseCode.LIMIT_REACHED));
      return;
    }
    this.inbox.push(new Uint8Array(data));
    this.drain();
  }

  // Frames are handled strictly one after another: decryption is asynchronous but the nonce
  // counter requires wire order.
  async drain() {
    if (this.draining) return;
    this.draining = true;
    try {
      while (!this.ended && this.inbox.length > 0) {
        const bytes = this.inbox.shift();
        await this.handle(decodeFrame(bytes));
      }
    } catch (error) {
      this.fail(error);
    } finally {
      this.draining = false;
    }
  }

  async handle(frame) {
    if (this.state === "connecting") {
      if (frame.k !== "hello" || frame.p.role !== "relay") {
        throw new ProtocolError("the relay did not start with its hello");
      }
      this.applyRelayLimits(frame.p.limits);
      this.state = "hello-received";
      this.rawSend({
        c: null,
        k: "hello",
        p: {
          role: "teammate",
          version: PROTOCOL_VERSION,
          host_id: this.hostId,
          token: this.token,
          name: this.name,
        },
      });
      this.rawSend({
        c: CHANNEL,
        k: "open",
        p: { path: "session", meta: this.opening.meta() },
      });
      this.state = "open";
      this.onOpen();
      this.flush();
      return;
    }
    if (frame.k === "hello") throw new ProtocolError("second hello");
    if (frame.k === "join" || frame.k === "part" || (frame.k === "cast" && frame.c === null)) {
      // A host's own broadcast frames, which only a relay may receive (docs/protocol.md).
      throw new ProtocolError("a broadcast frame in the wrong direction");
    }
    if (frame.k === "open") {
      // Nobody may open channels towards a browser.
      const p = { code: CloseCode.REFUSED, reason: "not served" };
      this.rawSend({ c: frame.c, k: "close", p });
      return;
    }
    if (frame.c !== CHANNEL) throw new ProtocolError("frame for a channel that was never opened");
    switch (frame.k) {
      case "data":
        await this.handleData(frame.p.d);
        return;
      case "cast":
        await this.handleCast(frame.p.d);
        return;
      case "cut":
        // Like data, a cut that crossed our close is dropped.
        if (!this.closeSent) await this.onCut();
        return;
      case "window":
        // A peer only grants back what it consumed, so an honest window never grows past its
        // initial size (docs/protocol.md).
        if (this.sendWindow + frame.p.n > this.initialWindow) {
          throw new ProtocolError("window grant beyond the initial window", CloseCode.FLOW_CONTROL);
        }
        this.sendWindow += frame.p.n;
        this.flush();
        return;
      case "close":
        if (!this.closeSent) {
          this.rawSend({ c: CHANNEL, k: "close", p: { code: frame.p.code, reason: "" } });
          this.closeSent = true;
        }
        this.close(frame.p.code, frame.p.reason);
        return;
    }
  }

  applyRelayLimits(limits) {
    if (!limits) return;
    const window = limits.initial_window;
    if (Number.isInteger(window) && window > 0) {
      this.initialWindow = window;
      this.sendWindow = window;
      this.receiveWindow = window;
    }
    const maxData = limits.max_data_size;
    this.largestMessage = Number.isInteger(maxData) && maxData > 0
      ? Math.min(maxData, this.initialWindow)
      : this.initialWindow;
  }

  // Counts received `data` or `cast` bytes against the receive window (docs/protocol.md, "Flow
  // control": a cast to a channel costs its window as data does).
  receiveBytes(bytes, kind) {
    if (bytes.byteLength > this.receiveWindow - this.unacknowledged) {
      throw new ProtocolError(`${kind} beyond the window`, CloseCode.FLOW_CONTROL);
    }
    this.unacknowledged += bytes.byteLength;
  }

  async handleData(data) {
    if (this.closeSent) return;
    this.receiveBytes(data, "data");
    if (this.channelCrypto === null) {
      await this.acceptAnswer(data);
      if (this.ended) return;
      this.grantConsumed();
      this.flush();
      return;
    }
    const message = decodeHostMessage(await this.channelCrypto.receive.decrypt(data));
    if (this.ended) return;
    await this.onMessage(message);
    if (this.ended) return;
    this.grantConsumed();
  }

  // A cast is consumed once the session has taken it (opened it, or ignored it), in its place
  // among the data frames: only then is its window granted back.
  async handleCast(cast) {
    if (this.closeSent) return;
    this.receiveBytes(cast, "cast");
    await this.onCast(cast);
    if (this.ended) return;
    this.grantConsumed();
  }

  // The host's first message: its answer to our offer. OpeningError (4000 for another size, a
  // host of another version; 4003 for a key or signature that is not the host's) ends the
  // attachment, having sent nothing on the channel but its close.
  async acceptAnswer(answer) {
    const opening = this.opening;
    this.opening = null;
    this.channelCrypto = await opening.finish(answer.slice());
    if (this.subscribe !== null) {
      // The key confirmation, first of all: the open asked for everything already, and only
      // this shows the host a live teammate, not a replayed open (docs/security.md).
      this.outbox.unshift({ plaintext: new Uint8Array(0), ciphertext: null });
    }
  }

  // Called once a data frame is consumed; every received byte is consumed by then, so the grant
  // is exactly what was consumed. The rule of docs/protocol.md: grant once half the window has
  // been consumed, or as soon as the peer's window is too small for the largest message it may
  // send (else a host waiting to send one large message after a small one would wait forever).
  grantConsumed() {
    const n = this.unacknowledged;
    if (n === 0) return;
    const peerWindow = this.receiveWindow - n;
    if (n >= Math.max(1, Math.floor(this.initialWindow / 2)) || peerWindow < this.largestMessage) {
      this.rawSend({ c: CHANNEL, k: "window", p: { n } });
      this.unacknowledged = 0;
    }
  }

  // Encrypts in queue order (the nonce is the message's position) and sends while the window
  // allows; a message waits whole for window, it is never split.
  async flush() {
    // Nothing goes on the channel before the host's answer checked out: there are no keys yet.
    if (this.flushing || this.state !== "open" || this.channelCrypto === null) return;
    this.flushing = true;
    try {
      while (!this.ended && !this.closeSent && this.outbox.length > 0) {
        const head = this.outbox[0];
        if (head.ciphertext === null) {
          head.ciphertext = await this.channelCrypto.send.encrypt(head.plaintext);
          if (this.ended) return;
        }
        if (head.ciphertext.byteLength > this.sendWindow) return;
        this.outbox.shift();
        this.sendWindow -= head.ciphertext.byteLength;
        this.rawSend({ c: CHANNEL, k: "data", p: { d: head.ciphertext } });
      }
    } catch (error) {
      this.fail(error);
    } finally {
      this.flushing = false;
    }
  }
}

export { DecryptionError };
