"""The host's approval policy: which permission requests it answers itself, which it refuses,
and who must approve the rest (docs/policy.md). Pure: no I/O but reading the policy file."""

from __future__ import annotations

from .decide import ToolRequest, Verdict, decide
from .rules import (
    KINDS,
    PRESETS,
    SCOPES,
    Policy,
    PolicyError,
    Rule,
    load_policy,
    parse_policy,
    preset,
)
from .tally import Tally, Vote

__all__ = [
    "KINDS",
    "PRESETS",
    "SCOPES",
    "Policy",
    "PolicyError",
    "Rule",
    "Tally",
    "ToolRequest",
    "Verdict",
    "Vote",
    "decide",
    "load_policy",
    "parse_policy",
    "preset",
]
