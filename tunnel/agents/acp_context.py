"""Files a prompt names with `@path`, given to an ACP agent with the prompt: each a file inside
the workspace, opened through `Workspace` (so never one outside it), sent as an embedded resource
when the agent takes embedded context and as a resource link otherwise (docs/agents.md, "Files in
a prompt"); and the paths that complete an `@` being typed. Pure but for the reads, which callers
run in a worker thread.
"""

from __future__ import annotations

import mimetypes
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from acp import embedded_text_resource, resource_block, resource_link_block
from anyio.lowlevel import RunVar

from .sandbox import HiddenFiles
from .workspace import OutsideWorkspace, Workspace

MAX_MENTIONS = 8
"""Files one prompt may attach; further `@` words are left as text."""

MAX_ATTACHED_BYTES = 256 * 1024
"""A larger file, or one that is not UTF-8 text, is linked rather than embedded."""

MAX_COMPLETIONS = 50
"""Paths one completion lists (`complete`)."""

MAX_SCANNED = 10_000
"""Entries of one directory a completion looks at, at most, matching or not."""

SCANS = 2
"""Completions scanning directories at once host-wide (`scan_limiter`)."""

_SCAN_LIMITER: RunVar[anyio.CapacityLimiter] = RunVar("path scans")


def scan_limiter() -> anyio.CapacityLimiter:
    """The host's limiter of completion scans: worker threads of their own, not the default
    ones the log's writes run on."""
    try:
        return _SCAN_LIMITER.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(SCANS)
        _SCAN_LIMITER.set(limiter)
        return limiter


_MENTION = re.compile(r"(?:^|(?<=\s))@([^\s@]+)")
_TRAILING = ".,;:!?)]}'\""


@dataclass(frozen=True, slots=True, kw_only=True)
class Attached:
    """One file given to the agent with a prompt."""

    block: Any
    """The ACP content block: an embedded resource or a resource link."""
    path: str
    """Where it is, relative to the workspace."""
    embedded: bool
    size: int


def mentions(text: str) -> list[str]:
    """The `@path` words of a prompt, in order, each once, at most MAX_MENTIONS; trailing
    punctuation is not part of a path."""
    found: list[str] = []
    for match in _MENTION.finditer(text):
        name = match.group(1).rstrip(_TRAILING)
        if name and name not in found:
            found.append(name)
        if len(found) == MAX_MENTIONS:
            break
    return found


def attach(
    workspace: Workspace, name: str, *, embed: bool, hidden: HiddenFiles | None = None
) -> Attached | None:
    """The file `name` (relative to the workspace, or absolute inside it) as a content block;
    None for anything but a regular file inside the workspace, and for one of the host's
    `hidden` files. Blocks on the disk."""
    try:
        relative = workspace.resolve(name)
        fd = workspace.open_file(relative)
    except (OutsideWorkspace, OSError, ValueError):
        return None
    try:
        refused = hidden is not None and hidden.hides_fd(fd)
    except OSError:
        refused = True
    if refused:
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        data = file.read(MAX_ATTACHED_BYTES + 1) if embed else b""
    uri = Path(workspace.root, relative).as_uri()
    mime, _ = mimetypes.guess_type(relative)
    text = _text(data) if embed and len(data) <= MAX_ATTACHED_BYTES else None
    if text is not None:
        resource = embedded_text_resource(uri, text, mime_type=mime or "text/plain")
        return Attached(block=resource_block(resource), path=relative, embedded=True, size=size)
    link = resource_link_block(os.path.basename(relative), uri, mime_type=mime, size=size)
    return Attached(block=link, path=relative, embedded=False, size=size)


def _text(data: bytes) -> str | None:
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def complete(workspace: Workspace, prefix: str) -> tuple[list[str], bool]:
    """The workspace paths that complete `prefix` (what follows an `@` being typed): the entries
    of its directory whose names start with its last part, a directory's with a `/` after it,
    sorted, at most MAX_COMPLETIONS; hidden ones only for a part that starts with `.`. Whether
    there were more. Nothing for an absolute path or a directory outside the workspace. Blocks on
    the disk."""
    if prefix.startswith("/"):
        return [], False  # typed paths are the workspace's own, relative to it
    folder, _, start = prefix.rpartition("/")
    try:
        fd = workspace.open_dir(folder or ".")
    except (OutsideWorkspace, OSError, ValueError):
        return [], False
    names: list[str] = []
    scanned = 0
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                # Every entry counts: a huge directory is not read through for a few matches.
                scanned += 1
                if scanned > MAX_SCANNED:
                    return _completions(folder, names, more=True)
                if not entry.name.startswith(start):
                    continue
                if entry.name.startswith(".") and not start.startswith("."):
                    continue
                directory = entry.is_dir(follow_symlinks=False)
                names.append(entry.name + ("/" if directory else ""))
    except OSError:
        return [], False
    finally:
        os.close(fd)
    return _completions(folder, names, more=False)


def _completions(folder: str, names: list[str], *, more: bool) -> tuple[list[str], bool]:
    names.sort()
    lead = f"{folder}/" if folder else ""
    more = more or len(names) > MAX_COMPLETIONS
    return [lead + name for name in names[:MAX_COMPLETIONS]], more
