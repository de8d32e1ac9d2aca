"""The verdict on one permission request: the rules that match it, deny over ask over allow, the
first matching rule within a verdict; a request no rule matches is asked (the policy's default).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from .rules import KINDS, Policy, Rule

SHELL_OPERATORS = re.compile(r"[;&|`<>\n\r]|\$\(")
"""A command line holding one of these runs more than one command (or redirects): an `allow`
rule's command globs never match it, so `git status*` cannot allow `git status; rm -rf ~`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolRequest:
    """What the policy knows of a request: the tool call's kind, paths, command and the agent."""

    kind: str
    """One of KINDS; anything else is matched as `other`."""
    paths: tuple[str | None, ...] = ()
    """Each path the tool call touches, relative to the workspace after its symlinks were
    followed; None for one outside the workspace (or that could not be resolved)."""
    command: str | None = None
    """The command line of an `execute` tool call, when the agent sent one."""
    agent: str = ""
    """The agent's name."""

    @property
    def known_kind(self) -> str:
        return self.kind if self.kind in KINDS else "other"


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """What the policy says of a request."""

    rule: Rule
    """The rule that decided (the policy's default for an unmatched request)."""
    matched: bool
    """False when no rule matched."""

    @property
    def verdict(self) -> str:
        return self.rule.verdict


def decide(policy: Policy, request: ToolRequest) -> Verdict:
    """The verdict on `request`: deny over ask over allow, the first matching rule of that
    verdict; `ask` by the policy's default when no rule matches."""
    first: dict[str, Rule] = {}
    for rule in policy.rules:
        if rule.verdict not in first and matches(rule, request):
            first[rule.verdict] = rule
    for verdict in ("deny", "ask", "allow"):
        if verdict in first:
            return Verdict(rule=first[verdict], matched=True)
    return Verdict(rule=policy.default, matched=False)


def matches(rule: Rule, request: ToolRequest) -> bool:
    """Whether `rule` covers `request`: every condition it gives holds. Its paths hold when an
    `allow` rule's globs cover every path of the request, a `deny` or `ask` rule's any one.

    An `allow` rule never covers a path outside the workspace, nor a command line that chains
    commands (SHELL_OPERATORS): those are asked about unless a deny or ask rule covers them."""
    if rule.kinds and request.known_kind not in rule.kinds:
        return False
    agent = request.agent.lower()
    if rule.agents and not any(glob_match(g.lower(), agent, path=False) for g in rule.agents):
        return False
    if rule.verdict == "allow" and any(p is None for p in request.paths):
        return False
    if rule.paths:
        hits = [p is not None and any(glob_match(g, p) for g in rule.paths) for p in request.paths]
        # To allow, every path must be covered; to refuse or ask, one is enough.
        if not hits or not (all(hits) if rule.verdict == "allow" else any(hits)):
            return False
    if rule.commands:
        command = request.command
        if request.known_kind != "execute" or command is None:
            return False
        command = " ".join(command.split())
        if rule.verdict == "allow" and SHELL_OPERATORS.search(command):
            return False
        if not any(glob_match(g, command, path=False) for g in rule.commands):
            return False
    return True


def glob_match(glob: str, text: str, *, path: bool = True) -> bool:
    """Whether `text` matches `glob`. For paths, `*` and `?` stay within one component and `**`
    crosses any number of them (`src/**` is everything under src, `**/*.py` every Python file);
    for commands and agent names `*` matches anything."""
    return _compile(glob, path).fullmatch(text) is not None


@functools.lru_cache(maxsize=1024)
def _compile(glob: str, path: bool) -> re.Pattern[str]:
    out = []
    i = 0
    while i < len(glob):
        char = glob[i]
        if path and glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if path and glob.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if char == "*":
            out.append("[^/]*" if path else ".*")
        elif char == "?":
            out.append("[^/]" if path else ".")
        else:
            out.append(re.escape(char))
        i += 1
    return re.compile("".join(out), re.DOTALL)
