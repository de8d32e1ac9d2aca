"""docs/protocol.md stays true: its tables and its worked example come from the code."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

from tunnel.proto import (
    KINDS,
    MAX_CAST_GROUPS,
    Cast,
    ChannelState,
    CloseCode,
    Cut,
    Frame,
    Join,
    Open,
    decode_frame,
    encode_frame,
)
from tunnel.proto import codes as codes_module
from tunnel.proto.states import TRANSITIONS, Action, Input

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"

EXAMPLE = Open(channel=1, path="session", meta={"role": "view", "salt": bytes(range(16))})


def close_code_meanings() -> dict[str, str]:
    """Each member's attribute docstring in codes.py (they are not kept at runtime)."""
    tree = ast.parse(Path(codes_module.__file__).read_text())
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "CloseCode").body
    meanings = {}
    for node, following in itertools.pairwise(body):
        if (
            isinstance(node, ast.Assign)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
        ):
            target = node.targets[0]
            assert isinstance(target, ast.Name)
            meanings[target.id] = " ".join(str(following.value.value).split())
    return meanings


def close_code_table() -> str:
    meanings = close_code_meanings()
    rows = ["| code | name | meaning |", "|---|---|---|"]
    rows += [f"| {int(code)} | `{code.name}` | {meanings[code.name]} |" for code in CloseCode]
    return "\n".join(rows)


def _cell(state: ChannelState | None, event: Input) -> str:
    outcome = TRANSITIONS[state, event]
    if outcome.action is Action.REJECT:
        assert outcome.error is not None
        return f"`{outcome.error.__name__}`"
    after = "gone" if outcome.next is None else outcome.next.name
    return f"{outcome.action.name.lower()} → {after}"


def lifecycle_table() -> str:
    states: list[ChannelState | None] = [None, *ChannelState]
    names = ["gone (no channel)" if s is None else s.name for s in states]
    rows = ["| input | " + " | ".join(names) + " |", "|---" * (len(states) + 1) + "|"]
    for event in Input:
        rows.append(f"| {event.value} | " + " | ".join(_cell(s, event) for s in states) + " |")
    return "\n".join(rows)


def test_the_close_code_table_lists_every_code() -> None:
    assert close_code_table() in DOC.read_text()


def test_the_lifecycle_table_is_the_one_in_states_py() -> None:
    assert lifecycle_table() in DOC.read_text()


def test_the_frames_table_lists_exactly_the_decoded_kinds() -> None:
    text = DOC.read_text()
    section = text.split("## Frames", 1)[1].split("### ", 1)[0]
    table = re.findall(r"^\| `(\w+)` \|", section, flags=re.MULTILINE)
    assert tuple(table) == KINDS


def test_the_worked_example_hex_is_what_the_encoder_produces() -> None:
    text = DOC.read_text()
    block = re.search(r"```text\n([0-9a-f \n]+)```", text)
    assert block is not None
    documented = bytes.fromhex(block.group(1))
    assert documented == encode_frame(EXAMPLE)
    assert decode_frame(documented) == EXAMPLE


BROADCAST_EXAMPLES: list[Frame] = [
    Cast(channel=None, data=b"\x01\x02\x03"),
    Cast(channel=1, data=b"\x01\x02\x03"),
    Join(channel=2),
    Cut(channel=1),
    Cast(channel=None, data=b"\x01\x02\x03", group=5),
    Join(channel=2, group=5),
]
"""The frames whose bytes docs/protocol.md shows in "Broadcast" and its groups, in order."""


def test_the_broadcast_bytes_are_what_the_encoder_produces() -> None:
    section = DOC.read_text().split("## Broadcast", 1)[1].split("\n## ", 1)[0]
    lines = [
        line
        for block in re.findall(r"```text\n(.*?)```", section, flags=re.DOTALL)
        for line in block.splitlines()
    ]
    documented = [bytes.fromhex(line.split("  ", 1)[0]) for line in lines]
    assert documented == [encode_frame(frame) for frame in BROADCAST_EXAMPLES]
    assert [decode_frame(raw) for raw in documented] == BROADCAST_EXAMPLES


def test_the_doc_names_the_number_of_broadcast_groups() -> None:
    text = DOC.read_text()
    assert f"`MAX_CAST_GROUPS` is {MAX_CAST_GROUPS}" in text
    assert f"0..`MAX_CAST_GROUPS`-1 ({MAX_CAST_GROUPS - 1})" in text


def test_the_doc_keeps_the_application_messages_section() -> None:
    text = DOC.read_text()
    assert "## Application messages" in text
    assert "(security.md)" in text
    assert "(application.md)" in text
