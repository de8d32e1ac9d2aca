"""`printable()`: no control, format or separator character survives; everything else does."""

from __future__ import annotations

import sys
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.terminal.hostile import CORPUS, LONE_SURROGATES, WIRE, dangerous, is_dangerous
from tunnel.terminal.sanitize import printable


@pytest.mark.parametrize("text", [*CORPUS.values(), LONE_SURROGATES], ids=[*CORPUS, "surrogates"])
def test_every_class_of_control_sequence_comes_out_inert(text: str) -> None:
    shown = printable(text)
    assert dangerous(shown) == []
    # Nothing is dropped: each dangerous character became a visible escape.
    assert shown.count("\\") >= sum(map(is_dangerous, text)) - text.count("\r\n")


def test_every_dangerous_code_point_unicode_knows_is_escaped() -> None:
    # A newer Python's Unicode may add format characters: this names any the module misses.
    missed = [
        f"U+{code:04X} {unicodedata.category(chr(code))}"
        for code in range(sys.maxunicode + 1)
        if is_dangerous(chr(code)) and printable(chr(code)) == chr(code)
    ]
    assert missed == []


def test_the_visible_form_is_a_python_style_escape() -> None:
    assert printable("\x1b[2J") == "\\x1b[2J"
    assert printable("\x00\x07\x7f\x9b") == "\\x00\\x07\\x7f\\x9b"
    assert printable("invoice\u202efdp.exe") == "invoice\\u202efdp.exe"
    assert printable("\U000e0041") == "\\U000e0041"
    assert printable(LONE_SURROGATES) == "\\ud800x\\udfff"
    assert printable("tail\x1b") == "tail\\x1b"


def test_a_lone_cr_is_escaped_but_a_crlf_line_end_is_a_line_end() -> None:
    assert printable("harmless\rrm -rf ~") == "harmless\\x0drm -rf ~"
    assert printable("one\r\ntwo\r\n") == "one\ntwo\n"
    assert printable("\r\r\n") == "\\x0d\n"


@pytest.mark.parametrize(
    "text",
    [
        "plain ascii, [bold]markup[/bold] and C:\\path\\x1b as typed",
        "tabs\tand\nnewlines",
        "é ✓ 日本語 العربية עברית",
        "emoji with joiners 👩‍👩‍👧 and a variation selector ❤️",
        "persian zero-width non-joiner: می‌خواهم",
    ],
)
def test_ordinary_text_is_unchanged(text: str) -> None:
    assert printable(text) == text


def test_log_show_uses_the_same_function() -> None:
    from tunnel.log import cli

    assert cli.printable is printable


@given(st.text())
def test_any_text_comes_out_safe_and_a_second_pass_changes_nothing(text: str) -> None:
    shown = printable(text)
    assert dangerous(shown) == []
    assert printable(shown) == shown


@given(st.lists(st.sampled_from([*CORPUS.values(), "x", "\n", "\\", "é"]), max_size=30))
def test_mixtures_of_the_corpus_come_out_safe(parts: list[str]) -> None:
    assert dangerous(printable("".join(parts))) == []


def test_the_whole_corpus_at_once() -> None:
    assert dangerous(WIRE) != []
    assert dangerous(printable(WIRE)) == []
