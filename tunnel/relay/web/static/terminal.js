// A terminal session (agent kind "terminal") shown with xterm.js: output items are written to
// it, and a driver's keystrokes and size changes come back out as callbacks.

import { Terminal } from "./vendor/xterm.mjs";
import { FitAddon } from "./vendor/addon-fit.mjs";

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
    this.term.onResize(({ cols, rows }) => onResize(cols, rows));
    this.observer = new ResizeObserver(() => this.refit());
    this.observer.observe(container);
    this.refit();
  }

  refit() {
    try {
      this.fit.fit();
    } catch {
      // Not laid out yet (hidden container): the observer fits it once it has a size.
    }
  }

  get size() {
    return { cols: this.term.cols, rows: this.term.rows };
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
