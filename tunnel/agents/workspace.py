"""The workspace directory an agent may touch, and nothing outside it: every path the host opens
on an agent's behalf (`fs/read_text_file`, `fs/write_text_file`, a terminal's cwd) is resolved
here, race-free, from a directory fd of the workspace held open while the `Workspace` lives.

A name is never checked and then opened again: an agent that swaps a folder for a symlink in
between wins that race (docs/agents.md, "Files: the workspace rule"). Resolution is the kernel's
where it can be: openat2 with RESOLVE_BENEATH (Linux 5.6) refuses `..` and symlinks that leave
the workspace atomically. Where openat2 is missing or a seccomp filter refuses it, and for a
symlink naming a place inside the workspace by its absolute path (which RESOLVE_BENEATH
refuses), a walk does the same one component at a time: each directory opened with O_NOFOLLOW
from the fd of the one before, each symlink read with readlinkat and its target walked in its
place, `..` going back to a directory fd already held. Files are then opened with O_NOFOLLOW
from their directory's fd, and a write goes to a new file in that directory, renamed over the
name.

These functions block on disk: call them in a worker thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import platform
import secrets
import stat
import sys
import weakref
from collections.abc import Callable
from pathlib import Path

MAX_READ_BYTES = 10 * 1024 * 1024
"""A file larger than this is not read into memory for an agent."""

MAX_SYMLINKS = 40
"""Symlinks followed (and directories made) while resolving one path, Linux's own bound."""

RETRIES = 8
"""Times a path is resolved again when it changed under the resolution (a rename while openat2
walked `..`, a name swapped for a symlink before it was opened); then the operation fails."""

NEW_FILE_MODE = 0o644
"""The mode of a file an agent creates (less the umask); a replaced file keeps its own."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_CLOEXEC everywhere: a directory fd of the host's inherited by a sandboxed program would reach
# the host's view of the file system through `..`.


class OutsideWorkspace(Exception):
    """The agent named a path outside the workspace (the agent's fault)."""


class Workspace:
    """A directory on the host, and the only way the host opens paths in it for an agent.

    `use_openat2=False` resolves with the walk alone, as on a system without openat2."""

    def __init__(self, path: Path | str, *, use_openat2: bool = True) -> None:
        self.root = os.path.realpath(path)
        """The workspace's real path: what the agent is told and how paths are shown."""
        self._fd = os.open(self.root, _DIR_FLAGS)
        # Closed when the Workspace is collected, never while a worker thread still uses it:
        # a closed number reused by another open would move the root somewhere else.
        weakref.finalize(self, os.close, self._fd)
        # An absolute path may name the workspace by its real path or as the host was given it.
        self._prefixes = [_components(self.root)]
        given = _components(os.path.abspath(path))
        if given != self._prefixes[0]:
            self._prefixes.append(given)
        self._openat2 = use_openat2 and _openat2_works(self._fd)

    def relative(self, path: str) -> str:
        """How a path an agent gave (absolute, or relative to the workspace) is shown: relative
        to the workspace, `.` for the workspace itself. Says nothing of symlinks in it."""
        return "/".join(self._parts(path)) or "."

    def resolve(self, path: str) -> str:
        """Where `path` really is, relative to the workspace (`.` for the workspace itself):
        its symlinks followed as opening it would, a missing last component kept as named.
        Raises OutsideWorkspace, or OSError (a missing parent directory is FileNotFoundError)."""
        try:
            dir_fd, name = self._locate(path, create=False)
        except IsADirectoryError:  # the workspace itself, or a path ending in `..`
            dir_fd, name = self.open_dir(path), ""
        try:
            folder = os.readlink(f"/proc/self/fd/{dir_fd}")
        finally:
            os.close(dir_fd)
        relative = os.path.normpath(os.path.relpath(os.path.join(folder, name), self.root))
        if relative == ".." or relative.startswith("../"):
            raise OutsideWorkspace(f"{path} is outside the workspace")
        return relative

    def open_dir(self, path: str) -> int:
        """A directory fd (close it) for `path`, absolute or relative to the workspace, following
        only symlinks that stay inside. Raises OutsideWorkspace, or OSError (NotADirectoryError,
        FileNotFoundError, ...)."""
        return self._open_dir(self._parts(path))

    def open_file(self, path: str) -> int:
        """A read-only fd (close it) of the regular file `path`, inside the workspace.

        Raises OutsideWorkspace, IsADirectoryError, ValueError for anything but a regular file
        (a FIFO would block the reader), or another OSError."""
        for _ in range(RETRIES):
            dir_fd, name = self._locate(path, create=False)
            try:
                # O_NONBLOCK: opening a FIFO the agent made does not wait for a writer.
                flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
                fd = os.open(name, flags, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    continue  # became a symlink since it was looked at: resolve it again
                raise
            finally:
                os.close(dir_fd)
            mode = os.fstat(fd).st_mode
            if stat.S_ISREG(mode):
                return fd
            os.close(fd)
            if stat.S_ISDIR(mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
            raise ValueError(f"{path} is not a regular file")
        raise OSError(errno.ELOOP, "the path kept changing while it was opened", path)

    def read_text(
        self,
        path: str,
        *,
        line: int | None = None,
        limit: int | None = None,
        refuse: Callable[[int], bool] | None = None,
    ) -> str:
        """The text of a file, optionally from 1-based `line` and at most `limit` lines;
        PermissionError for a file `refuse` (given its fd) holds back."""
        with os.fdopen(self.open_file(path), "rb") as file:
            if refuse is not None and refuse(file.fileno()):
                raise PermissionError(errno.EACCES, "the host keeps it private", path)
            if os.fstat(file.fileno()).st_size > MAX_READ_BYTES:
                raise ValueError(f"{path} is larger than {MAX_READ_BYTES} bytes")
            data = file.read(MAX_READ_BYTES + 1)  # it may grow after fstat
        if len(data) > MAX_READ_BYTES:
            raise ValueError(f"{path} is larger than {MAX_READ_BYTES} bytes")
        text = data.decode("utf-8", errors="replace")
        if line is None and limit is None:
            return text
        lines = text.splitlines(keepends=True)
        start = max((line or 1) - 1, 0)
        end = None if limit is None else start + max(limit, 0)
        return "".join(lines[start:end])

    def write_text(self, path: str, content: str) -> None:
        """Create or replace a file inside the workspace (missing parent directories too).

        The text goes to a new file in the same directory, flushed to disk, then renamed over
        the name: whatever is at the name then (a symlink planted since, a hard link to a file
        elsewhere) is replaced, never written through, and a reader never sees half a file."""
        data = content.encode("utf-8")  # a lone surrogate fails here, before the disk is touched
        dir_fd, name = self._locate(path, create=True)
        try:
            mode: int | None = None
            with contextlib.suppress(FileNotFoundError):
                old = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                if stat.S_ISDIR(old.st_mode):
                    raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
                if stat.S_ISREG(old.st_mode):
                    mode = stat.S_IMODE(old.st_mode) & 0o777  # no setuid bit kept
            temp = f".{name[:32]}.{secrets.token_hex(8)}.tmp"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(temp, flags, NEW_FILE_MODE, dir_fd=dir_fd)
            try:
                with os.fdopen(fd, "wb") as file:
                    if mode is not None:
                        os.fchmod(file.fileno(), mode)
                    file.write(data)
                    file.flush()
                    os.fsync(file.fileno())
                os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temp, dir_fd=dir_fd)
                raise
        finally:
            os.close(dir_fd)

    # -- resolution ----------------------------------------------------------------------------

    def _parts(self, path: str) -> list[str]:
        """The components of an agent's path relative to the workspace (`..` kept: resolution
        decides what it means). An absolute path must start with the workspace's."""
        if "\0" in path:
            raise OutsideWorkspace("the path contains a NUL byte")
        if not path.startswith("/"):
            return _components(path)
        parts = _components(path)
        for prefix in self._prefixes:
            if parts[: len(prefix)] == prefix:
                return parts[len(prefix) :]
        raise OutsideWorkspace(f"{path} is outside the workspace")

    def _locate(self, path: str, *, create: bool) -> tuple[int, str]:
        """The fd of the directory `path` is in (close it) and its last component, following
        symlinks until that component is none (or does not exist); `create` makes missing
        directories on the way."""
        parts = self._parts(path)
        for _ in range(MAX_SYMLINKS + 1):
            if not parts or parts[-1] == "..":
                os.close(self._open_dir(parts))  # refused first if it leaves the workspace
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
            dir_fd = self._open_dir(parts[:-1], create=create)
            try:
                target = os.readlink(parts[-1], dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno in (errno.EINVAL, errno.ENOENT):  # not a symlink; not there yet
                    return dir_fd, parts[-1]
                os.close(dir_fd)
                raise
            os.close(dir_fd)
            parts = self._target(parts[:-1], target)
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)

    def _target(self, folder: list[str], target: str) -> list[str]:
        """Where a symlink in `folder` leads, relative to the workspace: an absolute target
        must name a place inside; a relative one is walked from `folder`."""
        if target.startswith("/"):
            return self._parts(target)
        return [*folder, *_components(target)]

    def _open_dir(self, parts: list[str], *, create: bool = False) -> int:
        if self._openat2:
            for _ in range(RETRIES):
                try:
                    return _openat2(self._fd, "/".join(parts) or ".")
                except OSError as exc:
                    if exc.errno == errno.EAGAIN:
                        continue  # a rename raced a `..`: the kernel asks to try again
                    if exc.errno == errno.EXDEV:
                        break  # leaves, or an absolute symlink: the walk tells which
                    if exc.errno == errno.ENOENT and create:
                        break  # the walk makes what is missing
                    raise
        return self._walk(parts, create=create)

    def _walk(self, parts: list[str], *, create: bool) -> int:
        """openat2's RESOLVE_BENEATH done by hand: one directory fd per component, each opened
        with O_NOFOLLOW from the one before; `held` is the path from the root, so `..` is the
        fd before, never the kernel's idea of a parent the agent may have moved."""
        todo = list(reversed(parts))
        held: list[int] = []
        budget = MAX_SYMLINKS
        try:
            while todo:
                part = todo.pop()
                if part == "..":
                    if not held:
                        raise OutsideWorkspace("the path leaves the workspace")
                    os.close(held.pop())
                    continue
                here = held[-1] if held else self._fd
                try:
                    held.append(os.open(part, _DIR_FLAGS, dir_fd=here))
                    continue
                except OSError as exc:
                    if exc.errno == errno.ENOENT and create and budget > 0:
                        budget -= 1
                        with contextlib.suppress(FileExistsError):
                            os.mkdir(part, 0o777, dir_fd=here)
                        todo.append(part)  # opened like any other: it may be a symlink by now
                        continue
                    # O_NOFOLLOW met a symlink (ENOTDIR on Linux, ELOOP elsewhere), or a file.
                    if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                        raise
                if budget == 0:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), part)
                budget -= 1
                try:
                    target = os.readlink(part, dir_fd=here)
                except OSError as exc:
                    if exc.errno != errno.EINVAL:
                        raise
                    # Not a symlink (now): a file, or it changed again (then look again).
                    mode = os.stat(part, dir_fd=here, follow_symlinks=False).st_mode
                    if not (stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                        raise NotADirectoryError(
                            errno.ENOTDIR, os.strerror(errno.ENOTDIR), part
                        ) from None
                    todo.append(part)
                    continue
                if target.startswith("/"):
                    rest = self._parts(target)
                    while held:
                        os.close(held.pop())
                    todo.extend(reversed(rest))
                else:
                    todo.extend(reversed(_components(target)))
            return held.pop() if held else os.dup(self._fd)
        finally:
            for fd in held:
                os.close(fd)


def _components(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


# -- openat2 -------------------------------------------------------------------------------------

_SYS_OPENAT2 = 437
"""openat2's number on every architecture in `_MACHINES` (the tables were unified before 5.6)."""
_MACHINES = frozenset(
    ("x86_64", "i686", "aarch64", "armv7l", "armv8l", "riscv64", "ppc64le", "ppc64", "s390x")
)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_BENEATH = 0x08


class _OpenHow(ctypes.Structure):
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


def _openat2(dir_fd: int, path: str) -> int:
    """openat2(dir_fd, path, O_DIRECTORY, RESOLVE_BENEATH): a directory fd, or OSError."""
    how = _OpenHow(
        flags=os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC,
        resolve=_RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS,
    )
    fd = int(_libc().syscall(_SYS_OPENAT2, dir_fd, os.fsencode(path), ctypes.byref(how), 24))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)
    return fd


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _openat2_works(root_fd: int) -> bool:
    """Whether openat2 can be used here: Linux 5.6 or later, on a machine whose syscall number
    is known, and no seccomp filter refusing it (containers answer ENOSYS or EPERM)."""
    if not sys.platform.startswith("linux") or platform.machine() not in _MACHINES:
        return False
    try:
        os.close(_openat2(root_fd, "."))
    except OSError:
        return False
    return True
