"""docs/policy.md and the README kept true: their example files parse, and the presets and kinds
they list are the code's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tunnel.policy import KINDS, PRESETS, ToolRequest, decide, parse_policy

ROOT = Path(__file__).resolve().parents[2]
POLICY_DOC = (ROOT / "docs" / "policy.md").read_text(encoding="utf-8")
README = (ROOT / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("doc", [POLICY_DOC, README], ids=["policy.md", "README.md"])
def test_the_example_files_parse(doc: str) -> None:
    blocks = re.findall(r"```toml\n(.*?)```", doc, re.DOTALL)
    assert blocks
    for block in blocks:
        assert parse_policy(block, source="example.toml").rules


def test_the_example_decision_names_the_rule_where_it_is() -> None:
    (block,) = re.findall(r"```toml\n(.*?)```", POLICY_DOC, re.DOTALL)
    policy = parse_policy(block, source="team.toml")
    verdict = decide(policy, ToolRequest(kind="read", paths=(".env",)))
    rule = verdict.rule
    assert f'"index": {rule.index}, "line": {rule.line},' in POLICY_DOC


def test_the_presets_and_kinds_listed_are_the_codes() -> None:
    presets = POLICY_DOC[POLICY_DOC.index("## Presets") : POLICY_DOC.index("## The file")]
    table = re.findall(r"^\| `([a-z-]+)` \|", presets, re.MULTILINE)
    assert table == list(PRESETS)
    assert ", ".join(f"`{kind}`" for kind in KINDS) in POLICY_DOC
