// A terminal session (agent kind "terminal") shown with xterm.js: output items are written to
// it, and a driver's keystrokes and size changes come back out as callbacks. The screen is
// drawn at the size the host's program draws for, as the host says it: a screen drawn with
// cursor moves cannot be reflowed to another width, so it sits in its box, letterboxed when
// smaller and scrolled when larger. A host too old to say gets the box's size.

import { Terminal } from "./vendor/xterm.mjs";
import { FitAddon } from "./vendor/addon-fit.mjs";
import { MAX_TERMINAL_SIDE } from "./wire.js";

let nonceInstalled = false;

// xterm.js builds its theme and cell sizes as <style> elements. The page's CSP admits <style>
// only with the response's nonce, so every <style> this document creates gets it; markup from
// the network never passes through createElement (and DOMPurify removes <style> from it).
function installStyleNonce() {
  if (nonceInstalled) return;
  nonceInstalled = true;
  const meta = document.querySelector('meta[name="style-nonce"]');
  const nonce = meta ? meta.content : "";
  if (!nonce) return;
  const create = document.createElement.bind(document);
  document.createElement = (tagName, options) => {
    const element = create(tagName, options);
    if (String(tagName).toLowerCase() === "style") element.nonce = nonce;
    return element;
  };
}

export class TerminalView {
  constructor(container, { interactive, onInput, onResize }) {
    installStyleNonce();
    this.term = new Terminal({
      convertEol: false,
      cursorBlink: interactive,
      disableStdin: !interactive,
      scrollback: 5000,
      fontSize: 14,
      // At line height 1 the cell is exactly the font's ascent plus descent, and at a device
      // pixel ratio of 1 the rounding cuts the underline stroke of "_" off the bottom of the row.
      lineHeight: 1.2,
      fontFamily: "ui-monospace, SFMono-Regular, Menlo, Consolas, 'DejaVu Sans Mono', monospace",
      theme: { background: "#0f1115", foreground: "#e6e6e6" },
    });
    this.fit = new FitAddon();
    this.term.loadAddon(this.fit);
    this.term.open(container);
    this.encoder = new TextEncoder();
    if (interactive) {
      this.term.onData((data) => onInput(this.encoder.encode(data)));
      this.term.onBinary((data) => onInput(Uint8Array.from(data, (ch) => ch.charCodeAt(0) & 0xff)));
    }
    this.container = container;
    this.onResize = onResize;
    // The host's terminal size once it said it; until then (or from an older host) the screen
    // fits the box.
    this.host = null;
    // The box's size last offered to the host, so a driver asks again only when it changes.
    this.offered = null;
    this.observer = new ResizeObserver(() => this.refit());
    this.observer.observe(container);
    this.refit();
  }

  /** What fits the box, in cells, or null while it is not laid out. */
  proposed() {
    try {
      const size = this.fit.proposeDimensions();
      return size && Number.isInteger(size.cols) && Number.isInteger(size.rows) && size.cols > 0
        && size.rows > 0 ? { cols: size.cols, rows: size.rows } : null;
    } catch {
      return null;
    }
  }

  refit() {
    const size = this.proposed();
    // Not laid out yet (hidden container): the observer fits it once it has a size.
    if (size === null) return;
    if (this.host === null) this.term.resize(size.cols, size.rows);
    // A driver asks the host for the size of its box (app.js sends it on every attach too).
    if (this.offered === null || this.offered.cols !== size.cols || this.offered.rows !== size.rows) {
      this.offered = size;
      this.onResize(size.cols, size.rows);
    }
  }

  /**
   * The host's terminal is `cols` x `rows` (its `ready`, or a `terminal_size` event): draw the
   * screen at exactly that size. Anything but a size the host could have is ignored.
   */
  hostSize(cols, rows) {
    const valid = (side) => Number.isInteger(side) && side >= 1 && side <= MAX_TERMINAL_SIDE;
    if (!valid(cols) || !valid(rows)) return;
    this.host = { cols, rows };
    this.container.dataset.hostCols = String(cols);
    this.container.dataset.hostRows = String(rows);
    this.container.classList.add("host-sized");
    if (cols !== this.term.cols || rows !== this.term.rows) this.term.resize(cols, rows);
  }

  /** The size this page would like: what fits its box (what a driver asks the host for). */
  get size() {
    return this.proposed() ?? { cols: this.term.cols, rows: this.term.rows };
  }

  write(text) {
    this.term.write(text);
  }

  reset() {
    this.term.reset();
  }

  focus() {
    this.term.focus();
  }

  dispose() {
    this.observer.disconnect();
    this.term.dispose();
  }
}
