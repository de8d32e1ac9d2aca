"""Text from the wire made safe to print on a terminal: `printable()`, the one place where every
control and invisible formatting character becomes a visible escape (docs/security.md, "What a
terminal prints").

Names, prompts, agent output, tool content and error messages are chosen by others; printed raw,
an escape sequence in them would drive the reader's terminal (change its title, clear the screen,
write the clipboard with OSC 52, hide text) and a bidi override would show text in another order
than it is. Every surface that prints such text (the host console, `tunnel attach`,
`tunnel log show`) passes it through `printable()` first, then, where rich prints markup, through
rich's `escape()`. The one exception is a `pty:` agent's own screen in `tunnel attach --raw`.
"""

from __future__ import annotations

import re

__all__ = ["printable"]

_ESCAPED = re.compile(
    "\r\n|["
    # C0 controls but \t and \n (ESC, BEL, backspace, a lone \r that overwrites a line), then
    # DEL and the C1 controls (0x9b is a one-byte CSI, 0x9d an OSC, 0x90 a DCS).
    "\x00-\x08\x0b-\x1f\x7f-\x9f"
    # Unicode format characters (category Cf): bidi embeddings, overrides, isolates and marks
    # (U+202A..U+202E, U+2066..U+2069, U+200E, U+200F, U+061C), zero-width space and word
    # joiner, the byte order mark, the tag characters (U+E0000 block) that can carry invisible
    # ASCII, and the rest of the category, so nothing printed is hidden or reordered. Zero-width
    # non-joiner and joiner (U+200C, U+200D) are kept: Persian and Indic scripts and emoji need
    # them, and they hide no text.
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b\u200e\u200f"
    "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f"
    # The line and paragraph separators, which terminals do not show as line breaks.
    "\u2028\u2029"
    # Lone surrogates: a UTF-8 terminal stream cannot even encode them.
    "\ud800-\udfff"
    "]"
)


def _visible(match: re.Match[str]) -> str:
    found = match.group()
    if found == "\r\n":
        # Line ends from Windows and from terminals are line ends, not an overwrite.
        return "\n"
    code = ord(found)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(text: str) -> str:
    """`text` with nothing a terminal would act on or not show: safe to print.

    Every C0 control but tab and newline, DEL, every C1 control, every Unicode format character
    but the zero-width (non-)joiner, the line and paragraph separators and lone surrogates
    become Python-style escapes: ESC is `\\x1b`, a right-to-left override `\\u202e`, a tag
    character `\\U000e0041`. A `\\r\\n` line end becomes `\\n`. Everything else, backslashes
    included, is kept, so the result is readable and the same text always prints the same way;
    a literal `\\x1b` typed by someone looks like an escaped ESC, but neither does anything.
    Idempotent. Rich markup is not escaped here: where rich prints markup, escape the result
    with `rich.markup.escape`.
    """
    return _ESCAPED.sub(_visible, text)
