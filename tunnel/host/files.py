"""`FileReader`: what the host lets a teammate read of the workspace, for `read_file` (docs/
application.md, "Reading a file"). The file is opened race-free through the agent's own
`Workspace` rule (no `..` out, no symlink leading out, no absolute path elsewhere), then refused
if it is one of the host's hidden files (its key, its secrets, the log: what a sandbox hides),
larger than `MAX_FILE_VIEW_BYTES`, or not UTF-8 text. Each channel's reads are rate-bounded
(`ReadLimit`), and the host's at most `READERS` at once.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import anyio

from tunnel.agents.sandbox import HiddenFiles
from tunnel.agents.workspace import OutsideWorkspace, Workspace
from tunnel.app.file_view import (
    FILE_READ_BURST,
    FILE_READ_RATE,
    FILE_WINDOW_BEFORE,
    FILE_WINDOW_LINES,
    MAX_FILE_LINE_LENGTH,
    MAX_FILE_VIEW_BYTES,
    FileWindow,
)

READERS = 2
"""Files read at once host-wide, whatever the number of channels asking."""


class ReadLimit:
    """One channel's `read_file` budget: a token bucket of requests. The caller passes the
    time; nothing here sleeps."""

    def __init__(
        self, *, now: float, burst: int = FILE_READ_BURST, rate: float = FILE_READ_RATE
    ) -> None:
        self._burst = burst
        self._rate = rate
        self._tokens = float(burst)
        self._at = now

    def take(self, now: float) -> bool:
        """Spend one read at `now`; False (nothing spent) when the budget is empty."""
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True


class FileReader:
    """Reads windows of workspace files for teammates; one per host."""

    def __init__(self, workspace: Workspace, *, hidden: Iterable[Path | str] = ()) -> None:
        """`hidden`: host paths never shown, files or directories (`host_private_paths`, a
        sandbox's `hide`); the system's secrets (`SYSTEM_SECRETS`) are added."""
        self._workspace = workspace
        self.hidden = HiddenFiles(hidden)
        """What it refuses to show: the agent session refuses the same (`@path`, reads)."""
        self._limiter = anyio.CapacityLimiter(READERS)

    async def read(self, path: str, line: int | None, find: str | None = None) -> FileWindow:
        """The window of `path` around `line` (or where `find` begins), or a refusal; never
        raises for the path."""
        async with self._limiter:
            return await anyio.to_thread.run_sync(self.read_now, path, line, find)

    def read_now(self, path: str, line: int | None, find: str | None = None) -> FileWindow:
        """`read`, blocking on disk: call it in a worker thread."""
        try:
            shown, data = self._open(path)
        except OutsideWorkspace:
            return _refused(path, line, "it is outside the workspace")
        except FileNotFoundError:
            return _refused(path, line, "there is no such file in the workspace")
        except IsADirectoryError:
            return _refused(path, line, "it is a directory")
        except _Refused as exc:
            return _refused(path, line, str(exc))
        except ValueError:
            return _refused(path, line, "it is not a regular file")
        except OSError as exc:
            return _refused(path, line, f"it cannot be read ({os.strerror(exc.errno or 0)})")
        if b"\0" in data:
            return _refused(path, line, "it is a binary file")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return _refused(path, line, "it is not UTF-8 text")
        found = None
        if find:
            at = text.find(find)
            if at >= 0:
                found = text.count("\n", 0, at) + 1
        return _window(path, line, shown, text.splitlines(), found)

    def _open(self, path: str) -> tuple[str, bytes]:
        """Where the file really is (relative to the workspace) and its bytes."""
        fd = self._workspace.open_file(path)
        try:
            info = os.fstat(fd)
            # The file as opened, not its name: what a rename since cannot change.
            real = os.readlink(f"/proc/self/fd/{fd}")
            if self.hidden.hides(real, info):
                raise _Refused("the host keeps it private")
            if info.st_size > MAX_FILE_VIEW_BYTES:
                raise _Refused(f"it is larger than {MAX_FILE_VIEW_BYTES // 1024 // 1024} MiB")
            with os.fdopen(os.dup(fd), "rb") as file:
                data = file.read(MAX_FILE_VIEW_BYTES + 1)  # it may grow after fstat
        finally:
            os.close(fd)
        if len(data) > MAX_FILE_VIEW_BYTES:
            raise _Refused(f"it is larger than {MAX_FILE_VIEW_BYTES // 1024 // 1024} MiB")
        return os.path.relpath(real, self._workspace.root), data


class _Refused(Exception):
    """A file the host will not show; the message says why, for the teammate."""


def _refused(path: str, line: int | None, why: str) -> FileWindow:
    return FileWindow(path=path, line=line, refused=f"{path} cannot be shown: {why}")


def _window(
    path: str, line: int | None, shown: str, lines: list[str], found: int | None
) -> FileWindow:
    """At most `FILE_WINDOW_LINES` lines, `FILE_WINDOW_BEFORE` of them before the line found,
    else before `line`."""
    total = len(lines)
    target = min(found or line or 1, max(total, 1))
    start = max(1, min(target - FILE_WINDOW_BEFORE, total - FILE_WINDOW_LINES + 1))
    chosen = lines[start - 1 : start - 1 + FILE_WINDOW_LINES]
    cut = any(len(text) > MAX_FILE_LINE_LENGTH for text in chosen)
    return FileWindow(
        path=path,
        line=line,
        found=found,
        shown=shown,
        first=start,
        lines=[text[:MAX_FILE_LINE_LENGTH] for text in chosen],
        total=total,
        cut=cut,
    )
