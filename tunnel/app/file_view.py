"""A file of the workspace as a teammate reads it (`read_file`, answered by `file`): the bounds of
one answer and its message, encoded at the host and parsed at a teammate (docs/application.md,
"Reading a file"). The page takes the bounds from here through wire.js.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tunnel.app.errors import BadRequest

MAX_FILE_PATH_LENGTH = 4096
"""Longest path a `read_file` may name (Linux's PATH_MAX)."""
MAX_FILE_FIND_LENGTH = 4096
"""Longest text a `read_file` may ask the window to be found around."""
FILE_WINDOW_LINES = 200
"""Lines one `file` answer holds at most: a window around the line asked for."""
FILE_WINDOW_BEFORE = 60
"""Lines the window shows before the line asked for, when the file has them."""
MAX_FILE_LINE_LENGTH = 2000
"""Characters of one line sent; a longer line is cut (the answer's `cut` says so)."""
MAX_FILE_VIEW_BYTES = 4 * 1024 * 1024
"""A larger file is not read for a teammate: the answer refuses it."""
FILE_READ_BURST = 20
"""`read_file` requests a channel may make at once; then `FILE_READ_RATE` a second."""
FILE_READ_RATE = 2.0
"""`read_file` requests a second a channel's budget refills by."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FileWindow:
    """The answer to `read_file`: lines `first` .. `first + len(lines) - 1` of the file, or why
    it is refused (`refused`, and no lines)."""

    path: str
    """The path as asked (so a client matches the answer to its request)."""
    line: int | None
    """The line asked for, as asked."""
    found: int | None = None
    """With `find`: the 1-based line where the text was found (the window is around it); None
    when it was not found, or not asked for."""
    shown: str = ""
    """Where the file is, relative to the workspace, once resolved; empty when refused."""
    first: int = 1
    """The 1-based number of `lines[0]`."""
    lines: Sequence[str] = ()
    total: int = 0
    """Lines in the whole file."""
    cut: bool = False
    """Whether some line was longer than `MAX_FILE_LINE_LENGTH` and was cut."""
    refused: str | None = None
    """Why nothing is shown, in words for the teammate (never the file's content)."""


def encode_file(window: FileWindow) -> dict[str, Any]:
    """The `file` message's map (`host_messages.pack` makes its plaintext)."""
    wire: dict[str, Any] = {"op": "file", "path": window.path, "line": window.line}
    if window.found is not None:
        wire["found"] = window.found
    if window.refused is not None:
        wire["refused"] = window.refused
        return wire
    wire.update(
        shown=window.shown,
        first=window.first,
        lines=list(window.lines),
        total=window.total,
        cut=window.cut,
    )
    return wire


def parse_file(message: Mapping[str, Any]) -> FileWindow:
    """A `file` message's map as a `FileWindow`; `BadRequest` (only) when it is not one."""
    path = message.get("path")
    line = message.get("line")
    if type(path) is not str or not (line is None or type(line) is int):
        raise BadRequest("a file message needs a path and a line")
    refused = message.get("refused")
    if refused is not None:
        if type(refused) is not str:
            raise BadRequest("field 'refused' must be str")
        return FileWindow(path=path, line=line, refused=refused)
    shown, first, lines, total = (message.get(k) for k in ("shown", "first", "lines", "total"))
    if (
        type(shown) is not str
        or type(first) is not int
        or type(total) is not int
        or not isinstance(lines, list)
        or not all(type(text) is str for text in lines)
    ):
        raise BadRequest("a file message's fields have the wrong types")
    found = message.get("found")
    return FileWindow(
        path=path,
        line=line,
        found=found if type(found) is int else None,
        shown=shown,
        first=first,
        lines=lines,
        total=total,
        cut=message.get("cut") is True,
    )
