"""The workspace directory an agent may touch, and nothing outside it.

Every path an agent names is resolved with `os.path.realpath` (following symlinks and `..`) and
must land inside the realpath of the workspace. So `../x`, an absolute path elsewhere and a
symlink pointing out are all refused. These functions block on disk: call them in a worker thread.
"""

from __future__ import annotations

import os
from pathlib import Path

MAX_READ_BYTES = 10 * 1024 * 1024
"""A file larger than this is not read into memory for an agent."""


class OutsideWorkspace(Exception):
    """The agent named a path outside the workspace (the agent's fault)."""


class Workspace:
    """A directory on the host; paths are resolved against its realpath."""

    def __init__(self, path: Path) -> None:
        self.root = os.path.realpath(path)

    def resolve(self, path: str) -> str:
        """The real path of `path` (absolute, or relative to the workspace) if it is inside."""
        if "\0" in path:
            raise OutsideWorkspace("the path contains a NUL byte")
        candidate = path if os.path.isabs(path) else os.path.join(self.root, path)
        real = os.path.realpath(candidate)
        if real != self.root and os.path.commonpath([self.root, real]) != self.root:
            raise OutsideWorkspace(f"{path} is outside the workspace")
        return real

    def relative(self, real: str) -> str:
        """How a resolved path is shown to humans."""
        return os.path.relpath(real, self.root)

    def read_text(self, path: str, *, line: int | None = None, limit: int | None = None) -> str:
        """The text of a file, optionally from 1-based `line` and at most `limit` lines."""
        real = self.resolve(path)
        size = os.path.getsize(real)
        if size > MAX_READ_BYTES:
            raise ValueError(f"{path} is larger than {MAX_READ_BYTES} bytes")
        with open(real, encoding="utf-8", errors="replace", newline="") as file:
            text = file.read()
        if line is None and limit is None:
            return text
        lines = text.splitlines(keepends=True)
        start = max((line or 1) - 1, 0)
        end = None if limit is None else start + max(limit, 0)
        return "".join(lines[start:end])

    def write_text(self, path: str, content: str) -> None:
        """Create or replace a file inside the workspace (missing parent directories too)."""
        real = self.resolve(path)
        if real == self.root:
            raise IsADirectoryError(path)
        os.makedirs(os.path.dirname(real), exist_ok=True)
        # O_NOFOLLOW: a symlink planted after resolve() is not followed out of the workspace.
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(real, flags, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as file:
            file.write(content)
