// The timeline of a replay link (docs/web.md, "Replays"): the host sends a replay link's page
// one conversation's items up to a seq, and nothing after them (its `ready` says `replay`).
// The page holds them all and shows as many as the timeline's position says: play reveals them
// in order with their recorded timing compressed (each pause at most MAX_GAP_MS, divided by the
// speed), the slider moves anywhere, and a button per prompt and per decision jumps to it.
// Nothing here sends anything: a replay's channel may only read.

import { el, obj, str } from "./dom.js";

/** The speeds offered, times the recorded pace. */
export const SPEEDS = [1, 2, 4, 8, 16];
/** The longest pause between two items at 1x: a replay skips the time nobody typed. */
export const MAX_GAP_MS = 2000;
/** The shortest step at 1x, so items recorded in one instant still appear one after another. */
export const MIN_GAP_MS = 40;
/**
 * The most jump buttons shown: a replay with more prompts and decisions gets that many of them,
 * evenly spread (the slider still reaches every item), not a button for each of thousands.
 */
export const MAX_MARKS = 200;

/** Milliseconds from each item's predecessor to it at 1x (the first: 0), as `play` waits. */
export function gaps(items) {
  let previous = null;
  return items.map((item) => {
    const at = Date.parse(str(item?.created_at));
    const gap = previous === null || Number.isNaN(at) ? MIN_GAP_MS : at - previous;
    if (!Number.isNaN(at)) previous = at;
    return Math.min(MAX_GAP_MS, Math.max(MIN_GAP_MS, gap));
  });
}

/** The items to jump to: each prompt and each permission decision, with its index and label. */
export function marks(items) {
  const found = [];
  items.forEach((item, index) => {
    const data = obj(item?.data);
    const by = str(item?.created_by, "someone");
    if (item?.type === "message" && data.role === "user") {
      const text = str(data.text).split("\n")[0];
      const short = text.length > 60 ? `${text.slice(0, 59)}…` : text;
      found.push({ index, seq: item.seq, kind: "prompt", label: `${by}: ${short}` });
    } else if (item?.type === "permission_decision") {
      const chose = data.outcome === "cancelled" ? "cancelled" : str(data.option_name, "answered");
      found.push({ index, seq: item.seq, kind: "decision", label: `${by}: ${chose}` });
    }
  });
  return found;
}

/** At most `most` of `found`, evenly spread from its first. */
export function thinned(found, most = MAX_MARKS) {
  if (found.length <= most) return found;
  const step = found.length / most;
  return Array.from({ length: most }, (_, i) => found[Math.floor(i * step)]);
}

export class Timeline {
  constructor({ setTimer = (f, ms) => setTimeout(f, ms), clearTimer = clearTimeout } = {}) {
    Object.assign(this, { setTimer, clearTimer });
    // What the host's `ready` said ({ conversation, upto }); null: a live page, left alone.
    this.replay = null;
    this.view = null;
    // Every item of the replay, in seq order (the host sends each once, in order), and their
    // seqs: a long replay's items are each checked against them in constant time.
    this.items = [];
    this.seqs = new Set();
    this.delays = [];
    // How many of them the view shows.
    this.shown = 0;
    this.loaded = false;
    this.speed = SPEEDS[0];
    this.timer = null;
    this.element = null;
  }

  get playing() {
    return this.timer !== null;
  }

  /**
   * The view, seen through the timeline: unchanged for a live page. For a replay the items
   * stay here, and the view shows those the position says.
   */
  watch(view) {
    const timeline = this;
    const hooks = {
      ready(info) {
        const replay = obj(info?.replay);
        if (typeof replay.conversation === "string" && Number.isInteger(replay.upto)) {
          timeline.start(view, { conversation: replay.conversation, upto: replay.upto });
        }
        return false;
      },
      item(item) {
        if (!timeline.replay) return false;
        if (!timeline.seqs.has(item?.seq)) {
          timeline.seqs.add(item?.seq);
          timeline.items.push(item);
        }
        return true;
      },
      replayItems(items) {
        if (!timeline.replay) return false;
        timeline.items = [...items];
        timeline.seqs = new Set(items.map((item) => item?.seq));
        timeline.refresh();
        return true;
      },
      snapshotDone() {
        if (!timeline.replay) return false;
        timeline.loadedAll();
        return true;
      },
      resetConversation() {
        if (timeline.replay) timeline.forget();
        return false;
      },
    };
    return new Proxy(view, {
      get(target, name, receiver) {
        const value = Reflect.get(target, name, receiver);
        if (typeof value !== "function" || !Object.hasOwn(hooks, name)) return value;
        // A hook that takes the call keeps it from the view.
        return (...args) => (hooks[name](...args) ? undefined : value.apply(target, args));
      },
    });
  }

  start(view, replay) {
    const first = this.replay === null;
    this.view = view;
    this.replay = replay;
    if (!first) return;
    view.root.dataset.replay = "true";
    this.build();
    view.footer.prepend(this.element);
    const notice = view.footer.querySelector('[data-testid="viewer-notice"]');
    if (notice) {
      notice.textContent = `A replay of conversation ${replay.conversation} up to item ` +
        `#${replay.upto}: it shows what happened until then, nothing after, and this link ` +
        "cannot send anything.";
    }
  }

  build() {
    this.playButton = el("button", { class: "timeline-play", testid: "timeline-play",
      type: "button", text: "▶ Play", onclick: () => (this.playing ? this.pause() : this.play()) });
    this.speedSelect = el("select", { class: "timeline-speed", testid: "timeline-speed",
      "aria-label": "Speed", onchange: () => this.setSpeed(Number(this.speedSelect.value)) },
    ...SPEEDS.map((speed) => el("option", { value: speed, text: `${speed}x` })));
    this.slider = el("input", { class: "timeline-slider", testid: "timeline-slider",
      type: "range", min: 0, max: 0, value: 0, step: 1, "aria-label": "Position in the replay",
      oninput: () => this.seek(Number(this.slider.value)) });
    this.position = el("span", { class: "timeline-position", testid: "timeline-position" });
    this.markList = el("div", { class: "timeline-marks", testid: "timeline-marks",
      role: "group", "aria-label": "Jump to a prompt or a decision" });
    this.element = el("section", { class: "timeline", testid: "timeline",
      "aria-label": "Replay timeline" },
    el("div", { class: "timeline-controls" }, this.playButton, this.speedSelect, this.slider,
      this.position),
    this.markList);
    this.showPosition();
  }

  /** The snapshot is in: the timeline spans it, and the view shows all of it to start with. */
  loadedAll() {
    this.items.sort((a, b) => a.seq - b.seq);
    this.delays = gaps(this.items);
    const first = !this.loaded;
    this.loaded = true;
    this.slider.max = String(this.items.length);
    this.markList.replaceChildren(...thinned(marks(this.items)).map((mark) => el("button", {
      class: `timeline-mark ${mark.kind}`, testid: "timeline-mark", type: "button",
      "data-kind": mark.kind, "data-seq": mark.seq, text: mark.label,
      title: `Jump to item #${mark.seq}`, onclick: () => this.jumpTo(mark.index),
    })));
    if (first) this.shown = this.items.length;
    this.refresh();
    this.view.snapshotDone();
  }

  forget() {
    this.pause();
    this.items = [];
    this.seqs = new Set();
    this.delays = [];
    this.shown = 0;
    this.loaded = false;
  }

  /** Show the first `count` items afresh. */
  seek(count) {
    const target = Math.max(0, Math.min(this.items.length, count));
    if (!this.view || target < this.shown) {
      this.shown = target;
      this.refresh();
      return;
    }
    // Forward, the view only adds the items passed, as play does: rebuilding a long replay
    // from its first item at every step of the slider takes seconds.
    while (this.shown < target) {
      this.view.item(this.items[this.shown]);
      this.shown += 1;
    }
    this.showPosition();
  }

  /** Show everything up to the item at `index`, and stop there. */
  jumpTo(index) {
    this.pause();
    this.seek(index + 1);
    this.view.jumpToEnd?.();
  }

  refresh() {
    this.view?.replayItems(this.items.slice(0, this.shown), []);
    this.showPosition();
  }

  showPosition() {
    if (!this.element) return;
    const total = this.items.length;
    this.slider.value = String(this.shown);
    this.position.textContent = `${this.shown} / ${total}`;
    this.element.dataset.shown = String(this.shown);
    this.element.dataset.total = String(total);
    this.element.dataset.playing = String(this.playing);
    this.playButton.textContent = this.playing ? "❚❚ Pause" : "▶ Play";
    for (const button of this.markList.children) {
      const seq = Number(button.dataset.seq);
      button.dataset.reached = String(this.shown > 0 && this.items[this.shown - 1].seq >= seq);
    }
  }

  setSpeed(speed) {
    if (!SPEEDS.includes(speed)) return;
    this.speed = speed;
    this.speedSelect.value = String(speed);
  }

  /** Reveal the items from the position on, at the speed chosen; from the start at the end. */
  play() {
    if (!this.loaded || this.playing) return;
    if (this.shown >= this.items.length) this.seek(0);
    this.step();
    this.showPosition();
  }

  step() {
    if (this.shown >= this.items.length) {
      this.pause();
      return;
    }
    this.timer = this.setTimer(() => {
      this.timer = null;
      this.view.item(this.items[this.shown]);
      this.shown += 1;
      this.view.jumpToEnd?.();
      this.showPosition();
      this.step();
    }, this.delays[this.shown] / this.speed);
    this.showPosition();
  }

  pause() {
    if (this.timer !== null) this.clearTimer(this.timer);
    this.timer = null;
    this.showPosition();
  }
}
