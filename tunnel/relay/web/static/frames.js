// Link frames (docs/protocol.md): one msgpack map {"c", "k", "p"} per WebSocket message.
// Decoding checks every field the page relies on; anything else is a ProtocolError (4000).

import { decode, encode } from "./vendor/msgpack/index.mjs";

export const KINDS = ["hello", "open", "data", "close", "window"];
export const MAX_MESSAGE_SIZE = 1 << 20;
export const MAX_CHANNEL_ID = 2 ** 32 - 1;

export class ProtocolError extends Error {
  constructor(message, code = 4000) {
    super(message);
    this.name = "ProtocolError";
    this.code = code;
  }
}

const DECODE_OPTIONS = {
  maxStrLength: MAX_MESSAGE_SIZE,
  maxBinLength: MAX_MESSAGE_SIZE,
  maxArrayLength: 4096,
  maxMapLength: 4096,
  maxExtLength: 0,
};

function isPlainMap(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value) &&
    !(value instanceof Uint8Array);
}

function isChannelId(value) {
  return Number.isInteger(value) && value >= 0 && value <= MAX_CHANNEL_ID;
}

export function encodeFrame(frame) {
  const { c = null, k, p } = frame;
  return encode({ c, k, p });
}

/** Decode and check one frame; raises ProtocolError on anything malformed. */
export function decodeFrame(bytes) {
  if (bytes.byteLength > MAX_MESSAGE_SIZE) throw new ProtocolError("message too large", 4006);
  let frame;
  try {
    frame = decode(bytes, DECODE_OPTIONS);
  } catch {
    throw new ProtocolError("message is not msgpack");
  }
  if (!isPlainMap(frame)) throw new ProtocolError("frame is not a map");
  const keys = Object.keys(frame).sort().join(",");
  if (keys !== "c,k,p") throw new ProtocolError("frame keys are not c, k, p");
  const { c, k, p } = frame;
  if (!KINDS.includes(k)) throw new ProtocolError("unknown frame kind");
  if (!isPlainMap(p)) throw new ProtocolError("payload is not a map");
  if (k === "hello") {
    if (c !== null) throw new ProtocolError("hello carries a channel id");
    return { c, k, p };
  }
  if (!isChannelId(c)) throw new ProtocolError("bad channel id");
  switch (k) {
    case "open":
      if (typeof p.path !== "string" || !isPlainMap(p.meta)) throw new ProtocolError("bad open");
      break;
    case "data":
      if (!(p.d instanceof Uint8Array)) throw new ProtocolError("bad data");
      break;
    case "close":
      if (!Number.isInteger(p.code) || typeof p.reason !== "string") {
        throw new ProtocolError("bad close");
      }
      break;
    case "window":
      if (!Number.isInteger(p.n) || p.n < 0) throw new ProtocolError("bad window");
      break;
  }
  return { c, k, p };
}

export { decode as decodeMsgpack, encode as encodeMsgpack };
