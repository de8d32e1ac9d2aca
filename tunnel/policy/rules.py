"""A policy file (TOML) parsed and checked into `Policy`: its rules in order, each with where it
was written, and the built-in presets; every mistake is a `PolicyError` naming the file and line.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

VerdictName = Literal["allow", "ask", "deny"]
Scope = Literal["once", "turn", "session"]

KINDS = ("read", "edit", "delete", "move", "search", "execute", "think", "fetch", "other")
"""The tool call kinds of the Agent Client Protocol; anything else an agent says is `other`."""

VERDICTS: tuple[VerdictName, ...] = get_args(VerdictName)
SCOPES: tuple[Scope, ...] = get_args(Scope)
"""How long a human's "always" answer is remembered, narrowest first."""

ANSWERERS = ("host", "drivers")
"""The groups an `answer` list may name; any other entry is a person's name."""

MAX_APPROVALS = 16
MAX_RULES = 1000
MAX_FILE_BYTES = 1024 * 1024

_RULE_KEYS = {"verdict", "kind", "paths", "command", "agent", "answer", "approvals", "remember"}
_DEFAULT_KEYS = {"answer", "approvals", "remember"}


class PolicyError(ValueError):
    """The policy file has a mistake; the message is one line: `FILE:LINE: what is wrong`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """One rule of a policy, as written."""

    index: int
    """Its place in the file, from 1 (0 for the defaults of an unmatched request)."""
    line: int
    """The line of its `[[rule]]` header (0 for a preset's rules and the defaults)."""
    verdict: VerdictName
    kinds: frozenset[str] = frozenset()
    """Tool call kinds it matches; empty: any."""
    paths: tuple[str, ...] = ()
    """Globs every path of the request must match (relative to the workspace); empty: any."""
    commands: tuple[str, ...] = ()
    """Globs the command line of an `execute` request must match; empty: any."""
    agents: tuple[str, ...] = ()
    """Globs the agent's name must match; empty: any."""
    answer: tuple[str, ...] = ANSWERERS
    """Who may answer an `ask`: `host`, `drivers` (anyone with a drive link) and names."""
    approvals: int = 1
    """How many distinct people must allow it before it is allowed (any one refusal refuses)."""
    remember: Scope = "once"
    """The widest scope an "always" answer is remembered for; `once`: no always options."""

    @property
    def text(self) -> str:
        """The rule in one line, as the decision records it."""
        parts = [f"verdict = {self.verdict!r}"]
        if self.kinds:
            parts.append(f"kind = {sorted(self.kinds)!r}")
        for name, globs in (
            ("paths", self.paths),
            ("command", self.commands),
            ("agent", self.agents),
        ):
            if globs:
                parts.append(f"{name} = {list(globs)!r}")
        if self.verdict == "ask":
            parts.append(f"answer = {list(self.answer)!r}")
            parts.append(f"approvals = {self.approvals}")
            parts.append(f"remember = {self.remember!r}")
        return ", ".join(parts).replace("'", '"')


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """The rules of one policy file or preset, in the order they were written."""

    source: str
    """The file it was read from, or `preset:NAME`."""
    rules: tuple[Rule, ...]
    default: Rule = Rule(index=0, line=0, verdict="ask")
    """How a request no rule matches is asked (`[default]` in the file)."""


_READS = frozenset({"read", "search", "think"})

PRESETS: dict[str, tuple[Rule, ...]] = {
    "ask": (),
    "read-only": (
        Rule(index=1, line=0, verdict="allow", kinds=_READS),
        Rule(index=2, line=0, verdict="deny", kinds=frozenset(KINDS) - _READS),
    ),
    "trust-reads": (Rule(index=1, line=0, verdict="allow", kinds=_READS),),
}
"""`--approvals NAME`: `ask` asks about everything; `read-only` allows reads (read, search,
think) inside the workspace and refuses every other kind; `trust-reads` allows the same reads
and asks about the rest. A read of a path outside the workspace is asked about under both."""


def preset(name: str) -> Policy:
    """The built-in policy `name`; PolicyError for an unknown one."""
    if name not in PRESETS:
        raise PolicyError(f"--approvals: no preset {name!r} (choose {', '.join(PRESETS)})")
    return Policy(source=f"preset:{name}", rules=PRESETS[name])


def load_policy(path: Path) -> Policy:
    """Read and check the policy file at `path`."""
    try:
        with path.open("rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read the policy file: {exc.strerror}") from None
    if len(data) > MAX_FILE_BYTES:
        raise PolicyError(f"{path}: the policy file is larger than {MAX_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise PolicyError(f"{path}: the policy file is not UTF-8") from None
    return parse_policy(text, source=str(path))


def parse_policy(text: str, *, source: str) -> Policy:
    """The policy written in `text` (TOML, docs/policy.md); PolicyError names the first mistake."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        found = re.search(r"\(at line (\d+), column \d+\)", message)
        line = int(found.group(1)) if found else 1
        what = message[: found.start()].strip() if found else message
        raise PolicyError(f"{source}:{line}: not valid TOML: {what}") from None
    lines = _Lines(text, source)
    for key in document:
        if key not in ("rule", "default"):
            raise lines.error(
                lines.top_key(key), f"unknown table or key {key!r} (expected [[rule]], [default])"
            )
    default = Rule(index=0, line=0, verdict="ask")
    if "default" in document:
        table = document["default"]
        where = lines.header("default", 0)
        if not isinstance(table, dict):
            raise lines.error(lines.top_key("default"), "default must be a table: [default]")
        default = _rule(table, index=0, line=where, verdict="ask", keys=_DEFAULT_KEYS, lines=lines)
    raw_rules = document.get("rule", [])
    if not isinstance(raw_rules, list) or not all(isinstance(r, dict) for r in raw_rules):
        raise lines.error(lines.top_key("rule"), "rules must be written as [[rule]] tables")
    if len(raw_rules) > MAX_RULES:
        raise lines.error(lines.header("rule", MAX_RULES), f"more than {MAX_RULES} rules")
    rules = []
    for position, table in enumerate(raw_rules):
        line = lines.header("rule", position)
        verdict = table.get("verdict")
        if verdict not in VERDICTS:
            at = lines.key(line, "verdict") if "verdict" in table else line
            raise lines.error(
                at,
                f"rule {position + 1}: verdict must be one of {', '.join(VERDICTS)}"
                + ("" if "verdict" in table else " (it is missing)"),
            )
        rules.append(
            _rule(
                table, index=position + 1, line=line, verdict=verdict, keys=_RULE_KEYS, lines=lines
            )
        )
    return Policy(source=source, rules=tuple(rules), default=default)


def _rule(
    table: dict[str, Any],
    *,
    index: int,
    line: int,
    verdict: VerdictName,
    keys: set[str],
    lines: _Lines,
) -> Rule:
    name = f"rule {index}" if index else "default"

    def fail(key: str, what: str) -> PolicyError:
        return lines.error(lines.key(line, key), f"{name}: {key} {what}")

    for key in table:
        if key not in keys:
            raise fail(key, f"is not a known key (expected {', '.join(sorted(keys))})")
    if verdict != "ask":
        for key in ("answer", "approvals", "remember"):
            if key in table:
                raise fail(key, 'only applies to verdict = "ask"')
    kinds = _strings(table, "kind", fail)
    for kind in kinds:
        if kind not in KINDS:
            raise fail("kind", f"names {kind!r}, not a kind (expected {', '.join(KINDS)})")
    paths = _strings(table, "paths", fail)
    for glob in paths:
        if glob.startswith("/") or ".." in glob.split("/"):
            raise fail("paths", f"glob {glob!r} must be relative to the workspace, without ..")
    commands = _strings(table, "command", fail)
    if commands and kinds and kinds != ("execute",):
        raise fail("command", 'only matches kind = "execute"')
    agents = _strings(table, "agent", fail)
    answer = _strings(table, "answer", fail) if "answer" in table else ANSWERERS
    if not answer:
        raise fail("answer", "names nobody: nobody could answer")
    approvals = table.get("approvals", 1)
    if isinstance(approvals, bool) or not isinstance(approvals, int):
        raise fail("approvals", "must be a whole number")
    if not 1 <= approvals <= MAX_APPROVALS:
        raise fail("approvals", f"must be 1 to {MAX_APPROVALS}")
    remember = table.get("remember", "once")
    if remember not in SCOPES:
        raise fail("remember", f"must be one of {', '.join(SCOPES)}")
    return Rule(
        index=index,
        line=line,
        verdict=verdict,
        kinds=frozenset(kinds),
        paths=tuple(paths),
        commands=tuple(commands),
        agents=tuple(agents),
        answer=tuple(answer),
        approvals=approvals,
        remember=remember,
    )


def _strings(
    table: dict[str, Any], key: str, fail: Callable[[str, str], PolicyError]
) -> tuple[str, ...]:
    """A key given as a string or a list of strings, as a tuple."""
    value = table.get(key, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise fail(key, "must be a string or a list of non-empty strings")
    return tuple(value)


class _Lines:
    """Where things are in the file: tomllib keeps no positions, so the headers and keys are
    found in the text (comments and strings cannot hold a line that starts a table)."""

    def __init__(self, text: str, source: str) -> None:
        self._lines = text.splitlines()
        self._source = source

    def error(self, line: int, what: str) -> PolicyError:
        return PolicyError(f"{self._source}:{max(line, 1)}: {what}")

    def header(self, name: str, position: int) -> int:
        """The line of the `position`th `[[name]]` (or `[name]`) header, from 1; 0 if not found."""
        pattern = re.compile(rf"^\s*\[\[?\s*{re.escape(name)}\s*\]\]?\s*(#.*)?$")
        found = [n for n, text in enumerate(self._lines, 1) if pattern.match(text)]
        return found[position] if position < len(found) else 0

    def key(self, after: int, key: str) -> int:
        """The line of `key = ...` in the table whose header is on line `after`."""
        pattern = re.compile(rf"^\s*{re.escape(key)}\s*=")
        for n in range(after + 1, len(self._lines) + 1):
            text = self._lines[n - 1]
            if re.match(r"^\s*\[", text):
                break
            if pattern.match(text):
                return n
        return after

    def top_key(self, key: str) -> int:
        pattern = re.compile(rf"^\s*(\[\[?\s*)?{re.escape(key)}\b")
        for n, text in enumerate(self._lines, 1):
            if pattern.match(text):
                return n
        return 1
