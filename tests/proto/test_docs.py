"""docs/protocol.md stays true: its tables and its worked example come from the code."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

from tunnel.proto import KINDS, ChannelState, CloseCode, Open, decode_frame, encode_frame
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


def test_the_doc_keeps_the_application_messages_section() -> None:
    text = DOC.read_text()
    assert "## Application messages" in text
    assert "(security.md)" in text
    assert "(application.md)" in text
