// The host's approval policy as the page shows it (docs/policy.md): what an asked request needs
// ("Needs 2 approvals (from alice or bob): alice approved") and why a decision was made (the
// policy's rule, the people who approved, a remembered answer). Pure: text in, text out.

import { arr, obj, str } from "./dom.js";

/**
 * What a request asked under the policy needs, in words. `approval` is the request's
 * `approval` field; `approvedBy` the names that approved so far (default: its own list).
 */
export function approvalText(approval, approvedBy = null) {
  const spec = obj(approval);
  const needed = Number.isInteger(spec.approvals) && spec.approvals > 0 ? spec.approvals : 1;
  const names = arr(spec.answer).map((name) => str(name)).filter(Boolean);
  let text = `Needs ${needed} approval${needed === 1 ? "" : "s"}`;
  if (names.length > 0 && !(names.length === 2 && names[0] === "host" && names[1] === "drivers")) {
    text += ` (from ${names.join(" or ")})`;
  }
  const approved = arr(approvedBy ?? spec.approved_by).map((name) => str(name)).filter(Boolean);
  if (approved.length > 0) text += `: ${approved.join(", ")} approved`;
  return text;
}

/** The rule a request was asked by, in one line; "" when the policy's default asked it. */
export function askedBy(approval) {
  const rule = obj(obj(approval).rule);
  return str(rule.rule) ? `rule ${str(String(rule.index ?? "?"))}: ${str(rule.rule)}` : "";
}

/** Who or what decided, for the decision line: `by` is the item's `created_by`. */
export function decisionText(by, data, name) {
  const policy = obj(data.policy);
  if (str(policy.rule)) {
    const where = str(policy.source) + (Number.isInteger(policy.line) ? `:${policy.line}` : "");
    const rule = policy.default ? "its default" : `rule ${policy.index}`;
    return `The approval policy answered: ${name} (${rule} of ${where}: ${str(policy.rule)})`;
  }
  const remembered = obj(data.remembered);
  if (str(remembered.scope)) {
    const who = arr(remembered.by).map((n) => str(n)).join(", ") || by;
    return `${name}: ${who}'s answer, remembered for the ${str(remembered.scope)}`;
  }
  const approved = arr(data.approved_by).map((n) => str(n)).filter(Boolean);
  if (approved.length > 1) return `${approved.join(", ")} approved: ${name}`;
  const remember = str(data.remember);
  return `${by} answered: ${name}${remember ? ` (remembered for the ${remember})` : ""}`;
}
