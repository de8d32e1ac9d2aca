"""Which ACP session modes ask a person before the agent edits files or runs commands: one table
for every agent we know, pure, no I/O (docs/agents.md, "Modes that ask").

Mode ids are the agent's own. A mode this table does not name may not ask (a new agent, a new
mode): a surface says so, and an approval policy that needs requests asked refuses it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tunnel.policy import Policy

ASKS: Mapping[str, bool] = {
    # Claude Code (claude-agent-acp): "default" asks before edits and commands, "plan" edits
    # nothing and asks to leave plan mode; "acceptEdits" edits without asking, "auto" lets
    # Claude's own classifier decide, "dontAsk" refuses what is not allowed beforehand,
    # "bypassPermissions" asks nothing.
    "default": True,
    "plan": True,
    "acceptEdits": False,
    "auto": False,
    "dontAsk": False,
    "bypassPermissions": False,
    # Gemini CLI: "default" asks; "autoEdit" edits without asking, "yolo" asks nothing.
    "autoEdit": False,
    "yolo": False,
    # codex-acp: "read-only" asks before edits and commands; "auto" (its Default) edits the
    # workspace and runs commands without asking, "full-access" asks nothing.
    "read-only": True,
    "full-access": False,
    # Qwen Code: "default" and "plan" as above; "auto-edit" edits without asking, "auto" (the
    # mode it starts in) lets a model of its own decide, "yolo" asks nothing.
    "auto-edit": False,
}
"""Mode id: whether the agent asks before each edit and command in that mode."""

ASKING_TEXT = "asks before edits and commands"
NOT_ASKING_TEXT = "may edit files and run commands without asking"
UNKNOWN_TEXT = "may edit files and run commands without asking (a mode not known to ask)"


def mode_asks(mode_id: str) -> bool:
    """Whether the agent asks before edits and commands in `mode_id`; False for a mode not in
    `ASKS` (it may not ask)."""
    return ASKS.get(mode_id, False)


def asking_text(mode_id: str) -> str:
    """The words every surface shows for the mode: does it ask?"""
    if mode_id not in ASKS:
        return UNKNOWN_TEXT
    return ASKING_TEXT if ASKS[mode_id] else NOT_ASKING_TEXT


def approval(modes: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The `approval` of a `settings` event for its `modes`: `{"asks": bool, "text": str}`;
    None when the agent has no modes."""
    if not modes or not isinstance(modes.get("current"), str):
        return None
    current: str = modes["current"]
    return {"asks": mode_asks(current), "text": asking_text(current)}


def asking_mode(available: Iterable[str]) -> str | None:
    """The mode to switch to when requests must be asked: "default" if offered, else the first
    offered mode that asks; None if none does."""
    offered = list(available)
    if "default" in offered:
        return "default"
    return next((mode for mode in offered if mode_asks(mode)), None)


CHANGING_KINDS = ("edit", "delete", "move", "execute", "fetch", "other")
"""Tool call kinds an agent in a mode that does not ask would run without a request."""


def policy_needs_asking(policy: Policy) -> bool:
    """Whether `policy` must see requests of some changing kind: unless its first rule for
    each such kind allows it whatever the paths, command or agent, the agent must ask."""
    for kind in CHANGING_KINDS:
        rule = next((r for r in policy.rules if not r.kinds or kind in r.kinds), policy.default)
        if rule.verdict != "allow" or rule.paths or rule.commands or rule.agents:
            return True
    return False
