"""What `tunnel log audit` prints: per turn, who asked for what, which permission requests the
agent made, who decided each and by which rule (docs/log.md, "Audit"). Pure: items in, lines out.

It reads the fields the items have and tolerates those they lack: a log written before a field
existed prints without it, never fails.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from tunnel.log.chain import Chain, SignedHead
from tunnel.log.item import Item, format_time

__all__ = ["Audit", "chain_line"]

_TEXT_CHARS: Final = 80
"""How much of a prompt or a title a line quotes."""


@dataclass(slots=True)
class _Turn:
    prompt: Item | None
    lines: list[str] = field(default_factory=list)


class Audit:
    """Feed it a conversation's items in seq order (`add`), then read `lines()`."""

    def __init__(self) -> None:
        self._turns: dict[int | None, _Turn] = {}
        self._requests: dict[str, Item] = {}

    def add(self, item: Item) -> None:
        """Take one item into the audit."""
        data = item.data
        if item.type == "message" and data.get("role") == "user":
            self._turns[item.seq] = _Turn(prompt=item)
            return
        if item.type == "permission_request":
            request_id = _str(data.get("request_id"))
            self._requests[request_id] = item
            self._turn(item).lines.append(_request_line(item))
        elif item.type in ("permission_approval", "permission_decision"):
            request = self._requests.get(_str(data.get("request_id")))
            line = _approval_line(item) if item.type == "permission_approval" else None
            self._turn(request or item).lines.append(line or _decision_line(item))

    def _turn(self, item: Item) -> _Turn:
        turn = item.data.get("turn")
        key = turn if type(turn) is int and turn in self._turns else None
        if key not in self._turns:
            self._turns[key] = _Turn(prompt=None)
        return self._turns[key]

    def lines(self) -> list[str]:
        """Per turn (in seq order), its prompt and then its requests and decisions; what
        belongs to no known turn comes last."""
        out: list[str] = []
        for key in sorted(k for k in self._turns if k is not None):
            turn = self._turns[key]
            assert turn.prompt is not None
            prompt = turn.prompt
            text = _quote(prompt.data.get("text"))
            out.append(
                f"turn #{prompt.seq}  {format_time(prompt.created_at)}  {prompt.created_by} "
                f"asked: {text}"
            )
            out.extend(turn.lines or ["  no permission requests"])
        loose = self._turns.get(None)
        if loose is not None and loose.lines:
            out.append("outside any turn:")
            out.extend(loose.lines)
        return out


def chain_line(
    items: Iterable[Item], signatures: Iterable[SignedHead], conversation_id: str
) -> str:
    """One line on the conversation's chain: how far its host's signatures cover it."""
    chain = Chain(conversation_id)
    heads: dict[int, bytes] = {}
    for item in items:
        if item.seq != chain.seq + 1:
            return f"chain: item {item.id} out of order; `tunnel log check` says more"
        heads[item.seq] = chain.add(item)
    good = [s for s in signatures if heads.get(s.seq) == s.hash and s.valid()]
    if chain.seq < 0:
        return "chain: no items"
    if not good:
        return f"chain: unsigned up to seq {chain.seq}"
    newest = max(good, key=lambda s: s.seq)
    line = f"chain: signed by host {newest.host_id} up to seq {newest.seq}"
    if newest.seq < chain.seq:
        line += f"; unsigned after it (seq {newest.seq + 1}..{chain.seq})"
    return line


def _request_line(item: Item) -> str:
    data = item.data
    call = data.get("tool_call")
    call = call if isinstance(call, Mapping) else {}
    kind = _str(call.get("kind"))
    what = f"[{kind}] " if kind else ""
    line = f"  #{item.seq} {item.created_by} asked: {what}{_quote(data.get('title'))}"
    approval = data.get("approval")
    if isinstance(approval, Mapping):
        answer = approval.get("answer")
        who = ", ".join(map(str, answer)) if isinstance(answer, list) and answer else ""
        needs = approval.get("approvals")
        if who:
            line += f"; may answer: {who}"
        if type(needs) is int and needs > 1:
            line += f"; needs {needs} approvals"
        rule = approval.get("rule")
        if isinstance(rule, Mapping):
            line += f"; {_rule_text(rule)}"
    return line


def _approval_line(item: Item) -> str:
    """One approval of a request that needs more (the two-person rule): it stays open."""
    data = item.data
    option = _str(data.get("option_name")) or _str(data.get("option_id"))
    line = f"  #{item.seq} approved by {item.created_by}" + (f": {option}" if option else "")
    needed = data.get("needed")
    if type(needed) is int:
        line += f"; {needed} more needed"
    return line


def _decision_line(item: Item) -> str:
    data = item.data
    option = _str(data.get("option_name")) or _str(data.get("option_id"))
    kind = _str(data.get("option_kind"))
    outcome = _str(data.get("outcome"))
    chose = "cancelled" if outcome == "cancelled" else f"{option}" + (f" ({kind})" if kind else "")
    line = f"  #{item.seq} decided by {item.created_by}" + (f": {chose}" if chose else "")
    policy = data.get("policy")
    if isinstance(policy, Mapping):
        line += f"; by {_rule_text(policy)}"
    remembered = data.get("remembered")
    if isinstance(remembered, Mapping):
        by = remembered.get("by")
        people = ", ".join(map(str, by)) if isinstance(by, list) else ""
        line += f"; remembered ({_str(remembered.get('scope'))}) from {people}"
    approved = data.get("approved_by")
    if isinstance(approved, list) and approved:
        line += f"; approved by {', '.join(map(str, approved))}"
    reason = data.get("reason")
    if isinstance(reason, str) and reason:
        line += f"; {reason}"
    return line


def _rule_text(rule: Mapping[str, Any]) -> str:
    if rule.get("default"):
        return "the policy's default (no rule matched)"
    parts = ["rule"]
    index = rule.get("index")
    if type(index) is int:
        parts.append(f"{index}")
    source = rule.get("source")
    if isinstance(source, str) and source:
        parts.append(f"of {source}")
    line = rule.get("line")
    if type(line) is int and line:
        parts.append(f"line {line}")
    text = rule.get("rule")
    described = " ".join(parts)
    return f"{described}: {_quote(text)}" if isinstance(text, str) and text else described


def _quote(value: object) -> str:
    if not isinstance(value, str):
        return '""'
    first = value.strip().splitlines()[0] if value.strip() else ""
    if len(first) > _TEXT_CHARS:
        first = first[: _TEXT_CHARS - 1] + "…"
    return f'"{first}"'


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""
