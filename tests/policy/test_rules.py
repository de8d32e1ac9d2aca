"""A policy file's mistakes: one line naming the file, the line and what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from tunnel.policy import PolicyError, load_policy, parse_policy, preset

MISTAKES = {
    "not-toml": ('[[rule]]\nverdict = "allow\n', 2, "not valid TOML"),
    "unknown-top-key": ('[[rule]]\nverdict = "allow"\n\n[rules]\nx = 1\n', 4, "unknown table"),
    "missing-verdict": ('# a comment\n[[rule]]\nkind = "read"\n', 2, "verdict must be one of"),
    "bad-verdict": ('[[rule]]\nverdict = "maybe"\n', 2, "verdict must be one of"),
    "bad-kind": ('[[rule]]\nverdict = "allow"\nkind = ["read", "exec"]\n', 3, "'exec'"),
    "unknown-key": (
        '[[rule]]\nverdict = "allow"\n\n[[rule]]\nverdict = "deny"\npath = "x"\n',
        6,
        "rule 2: path is not a known key",
    ),
    "approvals-on-allow": ('[[rule]]\nverdict = "allow"\napprovals = 2\n', 3, "only applies"),
    "approvals-zero": ('[[rule]]\nverdict = "ask"\napprovals = 0\n', 3, "approvals must be 1 to"),
    "approvals-text": ('[[rule]]\nverdict = "ask"\napprovals = "2"\n', 3, "whole number"),
    "bad-scope": ('[[rule]]\nverdict = "ask"\nremember = "root"\n', 3, "remember must be"),
    "nobody-answers": ('[[rule]]\nverdict = "ask"\nanswer = []\n', 3, "names nobody"),
    "absolute-glob": ('[[rule]]\nverdict = "allow"\npaths = "/etc/*"\n', 3, "relative"),
    "dotdot-glob": ('[[rule]]\nverdict = "allow"\npaths = "../x"\n', 3, "relative"),
    "command-for-read": (
        '[[rule]]\nverdict = "allow"\nkind = "read"\ncommand = "ls"\n',
        4,
        'only matches kind = "execute"',
    ),
    "paths-not-strings": ('[[rule]]\nverdict = "deny"\npaths = [1]\n', 3, "list of non-empty"),
    "default-verdict": ('[default]\nverdict = "allow"\n', 2, "default: verdict is not a known key"),
}


@pytest.mark.parametrize(("text", "line", "says"), MISTAKES.values(), ids=MISTAKES.keys())
def test_a_mistake_names_file_line_and_what(text: str, line: int, says: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, source="team.toml")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"team.toml:{line}: "), message
    assert says in message


def test_a_rule_keeps_its_place_and_text() -> None:
    policy = parse_policy(
        '\n[[rule]]\nverdict = "ask"\nkind = "execute"\ncommand = "git push*"\napprovals = 2\n',
        source="team.toml",
    )
    (rule,) = policy.rules
    assert (rule.index, rule.line) == (1, 2)
    assert rule.text == (
        'verdict = "ask", kind = ["execute"], command = ["git push*"], '
        'answer = ["host", "drivers"], approvals = 2, remember = "once"'
    )


def test_load_policy_reads_a_file_and_says_when_it_cannot(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('[[rule]]\nverdict = "deny"\nkind = "delete"\n')
    assert load_policy(path).rules[0].kinds == frozenset({"delete"})
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "missing.toml")


def test_an_unknown_preset_is_named() -> None:
    with pytest.raises(PolicyError, match="--approvals: no preset 'yolo'"):
        preset("yolo")
