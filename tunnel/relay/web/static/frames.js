// Link frames (docs/protocol.md): one msgpack map {"c", "k", "p"} per WebSocket message.
// Decoding checks every field the page relies on; anything else is a ProtocolError (4000).
// `data`, `window`, `close` and the broadcast's `cast`, `join`, `part` and `cut` frames are
// refused exactly where tunnel.proto.frames.decode_frame refuses them (with the default limits);
// the kinds, ids and ranges come from Python through wire.js.

import { Decoder, decode, encode } from "./vendor/msgpack/index.mjs";
import {
  CloseCode,
  DEFAULT_LIMITS,
  KINDS,
  MAX_CHANNEL_ID,
  MAX_CLOSE_CODE,
  MAX_WINDOW,
  MIN_CLOSE_CODE,
} from "./wire.js";

export class ProtocolError extends Error {
  constructor(message, code = CloseCode.PROTOCOL_ERROR) {
    super(message);
    this.name = "ProtocolError";
    this.code = code;
  }
}

const DECODE_OPTIONS = {
  maxStrLength: DEFAULT_LIMITS.max_message_size,
  maxBinLength: DEFAULT_LIMITS.max_message_size,
  maxArrayLength: 4096,
  maxMapLength: 4096,
  maxExtLength: 0,
};

// Python tells a msgpack float from an int (`type(n) is not int`); a JS number does not. This
// decoder counts the floats it meets, so that a frame whose fields are all ints and strings
// (window, close) can be refused when one of them was a float on the wire, as Python does.
class FrameDecoder extends Decoder {
  floats = 0;

  readF32() {
    this.floats += 1;
    return super.readF32();
  }

  readF64() {
    this.floats += 1;
    return super.readF64();
  }
}

function decodeCountingFloats(bytes, options) {
  const decoder = new FrameDecoder(options);
  return { value: decoder.decode(bytes), floats: decoder.floats };
}

function isPlainMap(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value) &&
    !(value instanceof Uint8Array);
}

function hasKeys(map, keys) {
  return Object.keys(map).sort().join(",") === keys;
}

function isChannelId(value) {
  return Number.isInteger(value) && value >= 0 && value <= MAX_CHANNEL_ID;
}

export function encodeFrame(frame) {
  const { c = null, k, p } = frame;
  return encode({ c, k, p });
}

// The payload of `data` and `cast`: exactly {d}, d non-empty bin (an empty message would cost no
// window) of at most max_data_size. Python checks the size before the channel id, so a frame
// with both wrong is a LIMIT_REACHED there, and here too.
function checkBytes(p, kind) {
  if (!hasKeys(p, "d") || !(p.d instanceof Uint8Array) || p.d.byteLength === 0) {
    throw new ProtocolError(`bad ${kind}`);
  }
  if (p.d.byteLength > DEFAULT_LIMITS.max_data_size) {
    throw new ProtocolError(`${kind} larger than max_data_size`, CloseCode.LIMIT_REACHED);
  }
}

// A channel id where one is required. Every field of these frames is an int, a str or bin, so a
// float anywhere in the frame was the id (1.0, which a JS number cannot tell from 1).
function checkChannelId(c, floats) {
  if (floats > 0 || !isChannelId(c)) throw new ProtocolError("bad channel id");
}

// `cast` (docs/protocol.md, "Broadcast"): nil from a host to the relay, a channel id from the
// relay to a teammate; which way it may go is the link's business.
function checkCast(c, p, floats) {
  checkBytes(p, "cast");
  if (c !== null) checkChannelId(c, floats);
}

// `join`, `part` and `cut`: a channel id and an empty payload.
function checkSignal(c, p, floats, kind) {
  if (Object.keys(p).length !== 0) throw new ProtocolError(`a ${kind} payload must be empty`);
  checkChannelId(c, floats);
}

/** Decode and check one frame; raises ProtocolError on anything malformed. */
export function decodeFrame(bytes) {
  if (bytes.byteLength > DEFAULT_LIMITS.max_message_size) {
    throw new ProtocolError("message too large", CloseCode.LIMIT_REACHED);
  }
  let frame;
  let floats;
  try {
    ({ value: frame, floats } = decodeCountingFloats(bytes, DECODE_OPTIONS));
  } catch {
    throw new ProtocolError("message is not msgpack");
  }
  if (!isPlainMap(frame)) throw new ProtocolError("frame is not a map");
  if (!hasKeys(frame, "c,k,p")) throw new ProtocolError("frame keys are not c, k, p");
  const { c, k, p } = frame;
  if (!KINDS.includes(k)) throw new ProtocolError("unknown frame kind");
  if (!isPlainMap(p)) throw new ProtocolError("payload is not a map");
  switch (k) {
    case "hello":
      if (c !== null) throw new ProtocolError("hello carries a channel id");
      break;
    case "open":
      if (!isChannelId(c)) throw new ProtocolError("bad channel id");
      if (typeof p.path !== "string" || !isPlainMap(p.meta)) throw new ProtocolError("bad open");
      break;
    case "data":
      checkBytes(p, "data");
      checkChannelId(c, floats);
      break;
    case "close":
      // Exactly {code, reason}, code an int in MIN_CLOSE_CODE..MAX_CLOSE_CODE (no float).
      if (!hasKeys(p, "code,reason") || floats > 0 || !Number.isInteger(p.code) ||
        p.code < MIN_CLOSE_CODE || p.code > MAX_CLOSE_CODE || typeof p.reason !== "string") {
        throw new ProtocolError("bad close");
      }
      checkChannelId(c, floats);
      break;
    case "window":
      // Exactly {n}, n an int in 1..MAX_WINDOW (no float): a grant of nothing is malformed.
      if (!hasKeys(p, "n") || floats > 0 || !Number.isInteger(p.n) || p.n < 1 ||
        p.n > MAX_WINDOW) {
        throw new ProtocolError("bad window");
      }
      checkChannelId(c, floats);
      break;
    case "cast":
      checkCast(c, p, floats);
      break;
    case "join":
    case "part":
    case "cut":
      checkSignal(c, p, floats, k);
      break;
    default:
      // A kind Python added that this page does not know how to check yet.
      throw new ProtocolError("unknown frame kind");
  }
  return { c, k, p };
}

export { decode as decodeMsgpack, encode as encodeMsgpack };
