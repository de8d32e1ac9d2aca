// The agent's questions (`elicitation_request`, docs/application.md): a form card built from the
// question's flat fields, for a driver to answer (Send, Decline, Dismiss) and read-only for a
// viewer, closed by its `elicitation_response`. Every text is the agent's or a teammate's, so it
// goes in as textContent only (`el`). The host checks the answer against the fields again.

import { arr, el, obj, str } from "./dom.js";

const ACTION_TEXT = { accept: "answered", decline: "declined" };

/** The values the form holds now, by field name, as the field's kind takes them. */
function formValues(inputs) {
  const content = {};
  for (const { spec, input } of inputs) {
    const name = str(spec.name);
    const kind = str(spec.kind);
    if (kind === "boolean") {
      content[name] = input.checked;
    } else if (kind === "choices") {
      const picked = [...input.selectedOptions].map((option) => option.value);
      if (picked.length > 0 || spec.required) content[name] = picked;
    } else if (input.value !== "") {
      content[name] = kind === "integer" || kind === "number" ? Number(input.value) : input.value;
    }
  }
  return content;
}

function fieldInput(spec, index, enabled) {
  const kind = str(spec.kind);
  const id = `q-${index}-${Math.random().toString(36).slice(2, 8)}`;
  const common = { id, "data-field": str(spec.name), testid: "question-input", disabled: !enabled,
    required: spec.required === true };
  let input;
  if (kind === "boolean") {
    input = el("input", { ...common, type: "checkbox" });
    input.checked = spec.default === true;
  } else if (kind === "choice" || kind === "choices") {
    input = el("select", { ...common, multiple: kind === "choices" },
      kind === "choice" && spec.required !== true ? el("option", { value: "", text: "" }) : null,
      ...arr(spec.choices).map(obj).map((choice) =>
        el("option", { value: str(choice.value), text: str(choice.label, str(choice.value)) })));
    const chosen = kind === "choices" ? arr(spec.default) : [spec.default];
    for (const option of input.options) option.selected = chosen.includes(option.value);
    if (kind === "choice" && !chosen.some((v) => typeof v === "string")) input.selectedIndex = -1;
  } else if (kind === "integer" || kind === "number") {
    input = el("input", { ...common, type: "number", step: kind === "integer" ? "1" : "any",
      min: Number.isFinite(spec.min) ? spec.min : null, max: Number.isFinite(spec.max) ? spec.max : null });
    if (Number.isFinite(spec.default)) input.value = String(spec.default);
  } else {
    const type = { email: "email", uri: "url", date: "date", "date-time": "datetime-local" }[str(spec.format)] ?? "text";
    input = el("input", { ...common, type, minlength: Number.isInteger(spec.min) ? spec.min : null,
      maxlength: Number.isInteger(spec.max) ? spec.max : null });
    if (typeof spec.default === "string") input.value = spec.default;
  }
  return input;
}

/**
 * A question's card. `onAnswer(requestId, action, content)` sends a driver's answer and says
 * whether it could; `isDriver` false shows the form read-only. Returns `{ element, close }`:
 * `close(by, action, content)` marks it answered for everyone.
 */
export function questionCard(data, { isDriver, onAnswer, onNotSent }) {
  const requestId = str(data.request_id);
  const fields = arr(data.fields).map(obj).filter((spec) => str(spec.name));
  const inputs = [];
  const rows = fields.map((spec, index) => {
    const input = fieldInput(spec, index, isDriver);
    inputs.push({ spec, input });
    const label = el("label", { for: input.id, text: str(spec.title, str(spec.name)) },
      spec.required === true ? el("span", { class: "required", text: " *", title: "required" }) : null);
    return el("div", { class: `question-field kind-${str(spec.kind)}`, testid: "question-field",
      "data-field": str(spec.name) }, label, input,
    str(spec.description) ? el("div", { class: "hint", text: str(spec.description) }) : null);
  });
  const buttons = [];
  const outcome = el("div", { class: "outcome", testid: "question-outcome",
    text: isDriver ? "Waiting for an answer." : "Waiting for a driver to answer." });
  const send = (action) => {
    const content = action === "accept" ? formValues(inputs) : null;
    for (const b of buttons) b.disabled = true;
    if (!onAnswer(requestId, action, content)) {
      for (const b of buttons) b.disabled = false;
      onNotSent();
    }
  };
  const form = el("form", { class: "question-form", testid: "question-form", novalidate: true,
    onsubmit: (event) => { event.preventDefault(); if (isDriver) send("accept"); } }, ...rows);
  if (isDriver) {
    for (const [action, text] of [["accept", "Send"], ["decline", "Decline"], ["cancel", "Dismiss"]]) {
      const button = el("button", { type: action === "accept" ? "submit" : "button", class: `answer ${action}`,
        testid: `question-${action}`, text, onclick: action === "accept" ? null : () => send(action) });
      buttons.push(button);
    }
    form.append(el("div", { class: "options" }, ...buttons));
  }
  const element = el("article", { class: "item question", testid: "question", "data-request-id": requestId,
    "data-state": "pending" },
  el("div", { class: "label", text: "The agent asks" }),
  el("div", { class: "question-message", testid: "question-message", text: str(data.message) }),
  form, outcome);
  const close = (by, action, content) => {
    element.dataset.state = "answered";
    element.dataset.action = action;
    for (const b of buttons) b.remove();
    for (const { input } of inputs) input.disabled = true;
    const shown = Object.entries(obj(content)).map(([name, value]) =>
      `${name}: ${Array.isArray(value) ? value.join(", ") : String(value)}`).join("; ");
    outcome.textContent = action === "cancel" ? `Cancelled by ${by}`
      : `${by} ${ACTION_TEXT[action] ?? "answered"}${shown ? `: ${shown}` : ""}`;
    outcome.dataset.by = by;
  };
  return { element, close };
}
