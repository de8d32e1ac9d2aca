"""The policy's verdicts, as a table: kind, paths, command, agent, precedence, defaults."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tunnel.policy import ToolRequest, decide, parse_policy, preset
from tunnel.policy.decide import glob_match

POLICY = parse_policy(
    """
[default]
answer = ["host"]
remember = "turn"

[[rule]]                               # 1
verdict = "allow"
kind = ["read", "search"]

[[rule]]                               # 2
verdict = "deny"
paths = [".env", "secrets/**"]

[[rule]]                               # 3
verdict = "allow"
kind = "edit"
paths = ["src/**/*.py", "docs/*.md"]

[[rule]]                               # 4
verdict = "allow"
kind = "execute"
command = ["git status*", "pytest *"]

[[rule]]                               # 5
verdict = "ask"
kind = "execute"
command = "git push*"
answer = ["alice", "bob"]
approvals = 2

[[rule]]                               # 6
verdict = "deny"
kind = "delete"
agent = "gemini*"

[[rule]]                               # 7
verdict = "ask"
kind = ["delete", "move"]
remember = "session"

[[rule]]                               # 8
verdict = "ask"
kind = "read"
paths = "private/**"
""",
    source="team.toml",
)


@dataclass(frozen=True)
class Case:
    request: ToolRequest
    verdict: str
    rule: int
    """The deciding rule's index; 0: no rule matched (the default)."""


def req(
    kind: str, *paths: str | None, command: str | None = None, agent: str = "claude"
) -> ToolRequest:
    return ToolRequest(kind=kind, paths=paths, command=command, agent=agent)


CASES = {
    "read-anywhere-inside": Case(req("read", "README.md"), "allow", 1),
    "search-no-paths": Case(req("search"), "allow", 1),
    "deny-beats-allow-for-env": Case(req("read", ".env"), "deny", 2),
    "deny-under-secrets": Case(req("read", "secrets/a/key.pem"), "deny", 2),
    "one-denied-path-of-two": Case(req("read", "README.md", "secrets/x"), "deny", 2),
    "ask-beats-allow-for-private": Case(req("read", "private/notes.txt"), "ask", 8),
    "read-outside-is-asked": Case(req("read", None), "ask", 0),
    "edit-matching-globs": Case(req("edit", "src/tunnel/x.py", "docs/a.md"), "allow", 3),
    "edit-top-level-py-under-src": Case(req("edit", "src/x.py"), "allow", 3),
    "edit-one-path-outside-globs": Case(req("edit", "src/x.py", "setup.py"), "ask", 0),
    "edit-docs-nested-not-matched": Case(req("edit", "docs/sub/a.md"), "ask", 0),
    "edit-no-paths-not-matched-by-path-rule": Case(req("edit"), "ask", 0),
    "command-allowed": Case(req("execute", command="git status --short"), "allow", 4),
    "command-spaces-normalised": Case(req("execute", command="pytest   -q tests"), "allow", 4),
    "command-chained-not-allowed": Case(req("execute", command="git status; rm -rf ~"), "ask", 0),
    "command-subshell-not-allowed": Case(req("execute", command="pytest $(rm x)"), "ask", 0),
    "command-two-person": Case(req("execute", command="git push origin main"), "ask", 5),
    "command-unknown": Case(req("execute", command="make"), "ask", 0),
    "command-missing": Case(req("execute"), "ask", 0),
    "delete-by-gemini-denied": Case(req("delete", "a.txt", agent="Gemini-CLI"), "deny", 6),
    "delete-by-claude-asked": Case(req("delete", "a.txt"), "ask", 7),
    "unknown-kind-is-other": Case(req("teleport"), "ask", 0),
    "fetch-unmatched": Case(req("fetch"), "ask", 0),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_verdicts(case: Case) -> None:
    verdict = decide(POLICY, case.request)
    assert (verdict.verdict, verdict.rule.index) == (case.verdict, case.rule)
    assert verdict.matched == (case.rule != 0)


def test_an_unmatched_request_is_asked_as_the_default_says() -> None:
    verdict = decide(POLICY, req("fetch"))
    assert verdict.rule.answer == ("host",)
    assert verdict.rule.remember == "turn"
    assert verdict.rule.approvals == 1


def test_rule_scopes_and_people_are_kept() -> None:
    push = decide(POLICY, req("execute", command="git push")).rule
    assert (push.answer, push.approvals, push.remember) == (("alice", "bob"), 2, "once")
    move = decide(POLICY, req("move", "x")).rule
    assert (move.answer, move.remember) == (("host", "drivers"), "session")


def test_first_matching_rule_wins_within_a_verdict() -> None:
    policy = parse_policy(
        '[[rule]]\nverdict = "allow"\nkind = "read"\n[[rule]]\nverdict = "allow"\npaths = "**"\n',
        source="p.toml",
    )
    assert decide(policy, req("read", "a")).rule.index == 1
    assert decide(policy, req("edit", "a")).rule.index == 2


PRESET_CASES = {
    ("read-only", "read", "allow"),
    ("read-only", "search", "allow"),
    ("read-only", "edit", "deny"),
    ("read-only", "execute", "deny"),
    ("trust-reads", "read", "allow"),
    ("trust-reads", "execute", "ask"),
    ("ask", "read", "ask"),
}


@pytest.mark.parametrize(("name", "kind", "verdict"), sorted(PRESET_CASES))
def test_presets(name: str, kind: str, verdict: str) -> None:
    assert decide(preset(name), req(kind, "a.txt")).verdict == verdict


def test_read_only_asks_about_a_read_outside_the_workspace() -> None:
    assert decide(preset("read-only"), req("read", None)).verdict == "ask"


@pytest.mark.parametrize(
    ("glob", "path", "matches"),
    [
        ("src/**", "src/a/b.py", True),
        ("src/**", "src", False),
        ("**/*.py", "a.py", True),
        ("**/*.py", "a/b/c.py", True),
        ("*.py", "a/b.py", False),
        ("a?c", "abc", True),
        ("a?c", "a/c", False),
        ("docs/[x].md", "docs/[x].md", True),
    ],
)
def test_path_globs(glob: str, path: str, matches: bool) -> None:
    assert glob_match(glob, path) is matches


def test_a_deny_glob_can_catch_a_command_anywhere_in_the_line() -> None:
    policy = parse_policy(
        '[[rule]]\nverdict = "deny"\nkind = "execute"\ncommand = "*rm *"\n', source="p.toml"
    )
    assert decide(policy, req("execute", command="ls && rm -rf build")).verdict == "deny"
    assert decide(policy, req("execute", command="rm -rf build")).verdict == "deny"
    assert decide(policy, req("execute", command="git status")).verdict == "ask"
