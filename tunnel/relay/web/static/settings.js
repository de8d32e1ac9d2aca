// The agent's modes, models and config options (the latest `settings` session event,
// docs/agents.md "Modes, models and config options"): shown to everyone, switched by drivers.
// A driver's choice is only a request: the bar shows what the host recorded, and a change shows
// once the agent agreed and the host stored it with who asked.

import { arr, el, obj, str } from "./dom.js";

/** The settings a `settings` event offers, in the order the bar shows them. */
export function settingEntries(data) {
  const entries = [];
  const modes = obj(data.modes);
  const models = obj(data.models);
  const hasModes = Array.isArray(modes.available);
  const hasModels = Array.isArray(models.available);
  if (hasModes) {
    entries.push({ key: "mode", label: "Mode", type: "select", current: modes.current,
      choices: choiceList(modes.available) });
  }
  if (hasModels) {
    entries.push({ key: "model", label: "Model", type: "select", current: models.current,
      choices: choiceList(models.available) });
  }
  for (const raw of arr(data.config_options)) {
    const option = obj(raw);
    const id = str(option.id);
    if (!id) continue;
    // The host offers a mode or model option as `modes` / `models` already, and a driver's
    // set_mode / set_model goes through it: the same choice is not shown twice.
    if ((option.category === "mode" && hasModes) || (option.category === "model" && hasModels)) continue;
    const type = option.type === "boolean" ? "boolean" : "select";
    entries.push({ key: `config:${id}`, configId: id, label: str(option.name, id), type,
      description: str(option.description), current: option.current_value,
      choices: type === "select" ? choiceList(option.options) : [] });
  }
  return entries;
}

function choiceList(list) {
  return arr(list).map(obj).filter((choice) => typeof choice.id === "string").map((choice) => ({
    id: choice.id, name: str(choice.name, choice.id), description: str(choice.description),
    group: str(choice.group),
  }));
}

/** The name the event gives `id` among `choices` (the id itself if it names none). */
function choiceName(choices, id) {
  const found = choices.find((choice) => choice.id === id);
  return found ? found.name : String(id);
}

/** Whether the agent asks before edits and commands in its current mode, in the host's words
 * (docs/agents.md "Modes that ask"); "" when the agent has no modes. */
export function approvalText(data) {
  const approval = obj(obj(data).approval);
  return typeof approval.text === "string" ? `The agent ${approval.text}` : "";
}

/** One line for the conversation: who changed what, or what the agent now offers; with
 * whether the mode asks, when the agent has modes. */
export function settingsText(data, by) {
  const line = changeText(data, by);
  const approval = approvalText(data);
  return approval ? `${line}. ${approval}.` : line;
}

function changeText(data, by) {
  const entries = settingEntries(data);
  const change = obj(data.change);
  const who = by || "someone";
  if (typeof change.mode === "string") {
    const entry = entries.find((e) => e.key === "mode");
    return `${who} switched the mode to ${entry ? choiceName(entry.choices, change.mode) : change.mode}`;
  }
  if (typeof change.model === "string") {
    const entry = entries.find((e) => e.key === "model");
    return `${who} switched the model to ${entry ? choiceName(entry.choices, change.model) : change.model}`;
  }
  const config = obj(change.config);
  if (typeof config.id === "string") {
    const entry = entries.find((e) => e.configId === config.id);
    return `${who} set ${entry ? entry.label : config.id} to ${valueName(entry, config.value)}`;
  }
  const current = entries.filter((e) => e.key === "mode" || e.key === "model")
    .map((e) => `${e.label.toLowerCase()} ${valueName(e, e.current)}`);
  return current.length ? `Agent settings: ${current.join(" · ")}` : "Agent settings changed";
}

function valueName(entry, value) {
  if (typeof value === "boolean") return value ? "on" : "off";
  return entry ? choiceName(entry.choices, value) : String(value);
}

/**
 * The bar: for drivers a select (or a checkbox) per setting that calls
 * `onChange(entry, value)` and returns whether the request went out; for viewers the same
 * settings as text.
 */
export class SettingsBar {
  constructor({ editable, onChange }) {
    this.editable = editable;
    this.onChange = onChange;
    this.data = null;
    this.changedBy = new Map();
    this.element = el("div", { class: "agent-settings", testid: "agent-settings", hidden: true });
  }

  /** A `settings` session event: the whole current state; `by` changed it when `change` says. */
  update(data, by) {
    this.data = data;
    const change = obj(data.change);
    if (typeof change.mode === "string") this.changedBy.set("mode", by);
    if (typeof change.model === "string") this.changedBy.set("model", by);
    const config = obj(change.config);
    if (typeof config.id === "string") this.changedBy.set(`config:${config.id}`, by);
    this.render();
  }

  /** Show the recorded state again (a change the host refused, or one not sent). */
  refresh() {
    if (this.data) this.render();
  }

  reset() {
    this.data = null;
    this.changedBy.clear();
    this.element.replaceChildren();
    this.element.hidden = true;
  }

  render() {
    const entries = settingEntries(this.data);
    this.element.hidden = entries.length === 0;
    this.element.replaceChildren(...entries.map((entry) => this.setting(entry)));
    const approval = approvalText(this.data);
    if (approval) {
      const asks = obj(this.data.approval).asks === true;
      this.element.append(el("span", { class: asks ? "approval" : "approval approval-unasked",
        testid: "agent-approval", "data-asks": String(asks), text: approval }));
    }
  }

  setting(entry) {
    const by = this.changedBy.get(entry.key);
    const current = entry.choices.find((choice) => choice.id === entry.current);
    const about = entry.description || (current ? current.description : "");
    const wrapper = el("label", {
      class: "setting", testid: "setting", "data-setting": entry.key,
      "data-current": String(entry.current ?? ""),
      title: [about, by ? `last changed by ${by}` : ""].filter(Boolean).join(" · ") || null,
    }, el("span", { class: "setting-name", text: entry.label }));
    if (!this.editable) {
      wrapper.append(el("span", { class: "setting-value", testid: "setting-value",
        text: valueName(entry, entry.current) }));
      return wrapper;
    }
    if (entry.type === "boolean") {
      const box = el("input", { type: "checkbox", class: "setting-toggle", testid: "setting-toggle",
        "data-setting": entry.key });
      box.checked = entry.current === true;
      box.addEventListener("change", () => this.choose(wrapper, box, entry, box.checked));
      wrapper.append(box);
      return wrapper;
    }
    const select = el("select", { class: "setting-select", testid: "setting-select",
      "data-setting": entry.key });
    const known = entry.choices.some((choice) => choice.id === entry.current);
    if (!known && entry.current !== undefined && entry.current !== null) {
      // The agent's current choice is not among those it lists: show it all the same.
      select.append(this.optionElement({ id: String(entry.current), name: String(entry.current) }));
    }
    const groups = new Map();
    for (const choice of entry.choices) {
      const option = this.optionElement(choice);
      if (!choice.group) {
        select.append(option);
        continue;
      }
      let group = groups.get(choice.group);
      if (!group) {
        group = el("optgroup", { label: choice.group });
        groups.set(choice.group, group);
        select.append(group);
      }
      group.append(option);
    }
    select.value = String(entry.current ?? "");
    select.addEventListener("change", () => this.choose(wrapper, select, entry, select.value));
    wrapper.append(select);
    return wrapper;
  }

  optionElement(choice) {
    const option = el("option", { text: choice.name, title: choice.description || null });
    option.value = choice.id;
    return option;
  }

  choose(wrapper, control, entry, value) {
    if (!this.onChange(entry, value)) {
      this.render();
      return;
    }
    // Until the host records the change (or refuses it), this setting takes no other request.
    wrapper.dataset.pending = "true";
    control.disabled = true;
  }
}
