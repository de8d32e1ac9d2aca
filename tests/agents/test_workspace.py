"""The workspace rule (tunnel/agents/workspace.py), for both resolvers: the kernel's openat2 where
this machine has it, and the walk by directory fds that stands in for it elsewhere (forced with
`use_openat2=False`). The race against a real ACP agent is in test_workspace_agent.py."""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tunnel.agents import workspace
from tunnel.agents.workspace import MAX_READ_BYTES, RETRIES, OutsideWorkspace, Workspace

SECRET = "-----BEGIN OPENSSH PRIVATE KEY-----\nnot really\n"
RACE_TRIES = 1000
"""Reads and writes tried while another thread swaps a folder for a symlink."""


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest) -> bool:
    """Whether the Workspace may use openat2 (the walk alone when not)."""
    return bool(request.param == "openat2")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """ws/ with sub/a.txt and symlinks that stay inside or leave; outside/ with a secret."""
    root = tmp_path / "ws"
    (root / "sub" / "deep").mkdir(parents=True)
    (root / "sub" / "a.txt").write_text("a\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret").write_text(SECRET)
    (root / "in").symlink_to("sub")  # relative, inside
    (root / "in-abs").symlink_to(root / "sub")  # absolute, inside
    (root / "sub" / "deep" / "up").symlink_to("../a.txt")  # `..` that stays inside
    (root / "out").symlink_to("../outside")  # relative, leaves
    (root / "out-abs").symlink_to(tmp_path / "outside")  # absolute, leaves
    (root / "sub" / "hop").symlink_to("../out")  # inside, to a symlink that leaves
    (root / "loop").symlink_to("loop")
    return root


def test_the_kernel_resolves_where_the_machine_has_openat2(tree: Path) -> None:
    """Not an assertion about this machine: `use_openat2=False` always walks."""
    assert Workspace(tree, use_openat2=False)._openat2 is False
    assert Workspace(tree)._openat2 in (True, False)


class RefusingSyscall:
    """libc as a seccomp filter leaves it: every syscall() fails with `code`."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.calls = 0

    def syscall(self, *args: object) -> int:
        self.calls += 1
        ctypes.set_errno(self.code)
        return -1


@pytest.mark.parametrize("code", [errno.ENOSYS, errno.EPERM])
def test_where_a_seccomp_filter_refuses_openat2_the_walk_serves_instead(
    tree: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    libc = RefusingSyscall(code)
    monkeypatch.setattr(workspace, "_libc", lambda: libc)
    ws = Workspace(tree)
    assert ws._openat2 is False
    assert ws.read_text("in/a.txt") == "a\n"
    with pytest.raises(OutsideWorkspace):
        ws.read_text("out/secret")
    assert libc.calls <= 1  # probed once, then never asked again


def test_while_openat2_keeps_asking_to_retry_the_walk_serves_instead(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = Workspace(tree)
    libc = RefusingSyscall(errno.EAGAIN)  # a rename raced every `..`
    monkeypatch.setattr(workspace, "_libc", lambda: libc)
    assert ws.read_text("sub/deep/up") == "a\n"
    with pytest.raises(OutsideWorkspace):
        ws.read_text("sub/hop/secret")
    # Each directory resolved was asked of openat2 RETRIES times, then walked.
    assert libc.calls % RETRIES == 0
    assert (libc.calls > 0) == ws._openat2


def test_paths_and_symlinks_that_stay_inside_are_served(tree: Path, resolver: bool) -> None:
    ws = Workspace(tree, use_openat2=resolver)
    real = os.path.realpath(tree)
    for path in (
        "sub/a.txt",
        "./sub//a.txt",
        "in/a.txt",
        "in-abs/a.txt",
        "sub/deep/up",
        "sub/deep/../a.txt",
        f"{real}/sub/a.txt",
        f"{tree}/in/../sub/a.txt",
    ):
        assert ws.read_text(path) == "a\n", path
    ws.write_text("in/b.txt", "b\n")
    ws.write_text("in-abs/c.txt", "c\n")
    assert (tree / "sub" / "b.txt").read_text() == "b\n"
    assert (tree / "sub" / "c.txt").read_text() == "c\n"
    # A write through a symlink that stays inside changes its target and keeps the link.
    ws.write_text("sub/deep/up", "changed\n")
    assert (tree / "sub" / "a.txt").read_text() == "changed\n"
    assert (tree / "sub" / "deep" / "up").is_symlink()


@pytest.mark.parametrize(
    "path",
    [
        "..",
        "../outside/secret",
        "sub/../../outside/secret",
        "out/secret",
        "out-abs/secret",
        "sub/hop/secret",
        "in/../../outside/secret",
        "/etc/passwd",
        "OUTSIDE/secret",
        "WS-sibling/x",
        "a\0b",
    ],
)
def test_paths_that_leave_are_refused_for_reads_writes_and_terminals(
    tree: Path, resolver: bool, path: str
) -> None:
    path = path.replace("OUTSIDE", str(tree.parent / "outside")).replace("WS", str(tree))
    ws = Workspace(tree, use_openat2=resolver)
    with pytest.raises(OutsideWorkspace):
        ws.read_text(path)
    with pytest.raises(OutsideWorkspace):
        ws.write_text(path, "pwned\n")
    with pytest.raises(OutsideWorkspace):
        os.close(ws.open_dir(os.path.dirname(path) or path))
    assert os.listdir(tree.parent / "outside") == ["secret"]
    assert (tree.parent / "outside" / "secret").read_text() == SECRET


def test_a_symlink_that_leaves_at_the_last_component_is_refused(tree: Path, resolver: bool) -> None:
    (tree / "key").symlink_to(tree.parent / "outside" / "secret")
    (tree / "rel-key").symlink_to("../outside/secret")
    ws = Workspace(tree, use_openat2=resolver)
    for name in ("key", "rel-key"):
        with pytest.raises(OutsideWorkspace):
            ws.read_text(name)
        with pytest.raises(OutsideWorkspace):
            ws.write_text(name, "pwned\n")
    assert (tree.parent / "outside" / "secret").read_text() == SECRET


def test_a_symlink_loop_is_an_error_not_a_hang(tree: Path, resolver: bool) -> None:
    ws = Workspace(tree, use_openat2=resolver)
    for path in ("loop", "loop/x"):
        with pytest.raises(OSError, match="symbolic links") as caught:
            ws.read_text(path)
        assert caught.value.errno == errno.ELOOP


def test_directories_missing_files_and_files_as_folders(tree: Path, resolver: bool) -> None:
    ws = Workspace(tree, use_openat2=resolver)
    with pytest.raises(IsADirectoryError):
        ws.read_text("sub")
    with pytest.raises(IsADirectoryError):
        ws.write_text("sub", "x")
    with pytest.raises(IsADirectoryError):
        ws.write_text(".", "x")
    with pytest.raises(FileNotFoundError):
        ws.read_text("missing/x.txt")
    with pytest.raises(NotADirectoryError):
        ws.read_text("sub/a.txt/x")
    with pytest.raises(NotADirectoryError):
        os.close(ws.open_dir("sub/a.txt"))
    assert ws.relative(str(tree / "sub")) == "sub"
    assert ws.relative(str(tree)) == "."


def test_reads_honour_line_ranges_and_writes_make_parents(tmp_path: Path, resolver: bool) -> None:
    ws = Workspace(tmp_path, use_openat2=resolver)
    (tmp_path / "f.txt").write_text("1\n2\n3\n4\n")
    assert ws.read_text("f.txt") == "1\n2\n3\n4\n"
    assert ws.read_text("f.txt", line=2, limit=2) == "2\n3\n"
    assert ws.read_text("f.txt", line=4) == "4\n"
    assert ws.read_text("f.txt", limit=1) == "1\n"
    ws.write_text("deep/er/new.txt", "caf\u00e9\r\n")
    assert (tmp_path / "deep" / "er" / "new.txt").read_bytes() == "caf\u00e9\r\n".encode()
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["deep", "er", "f.txt", "new.txt"]


def test_a_replaced_file_keeps_its_mode_and_a_hard_link_elsewhere_is_not_written_through(
    tree: Path, resolver: bool
) -> None:
    ws = Workspace(tree, use_openat2=resolver)
    script = tree / "run.sh"
    script.write_text("old\n")
    script.chmod(0o750)
    ws.write_text("run.sh", "new\n")
    assert stat.S_IMODE(script.stat().st_mode) == 0o750
    outside = tree.parent / "outside" / "secret"
    os.link(outside, tree / "linked")
    ws.write_text("linked", "pwned\n")
    assert outside.read_text() == SECRET
    assert (tree / "linked").read_text() == "pwned\n"


def test_only_regular_files_are_read_and_a_fifo_does_not_block(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(ValueError, match="not a regular file"):
        ws.read_text("pipe")
    with (tmp_path / "big").open("wb") as file:
        file.truncate(MAX_READ_BYTES + 1)
    with pytest.raises(ValueError, match="larger than"):
        ws.read_text("big")


def test_the_workspace_moved_away_is_still_the_one_served(tmp_path: Path, resolver: bool) -> None:
    """The root is a directory fd held open, not a name resolved again."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "f.txt").write_text("mine\n")
    ws = Workspace(root, use_openat2=resolver)
    root.rename(tmp_path / "moved")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "f.txt").write_text(SECRET)
    root.symlink_to(tmp_path / "outside")
    assert ws.read_text("f.txt") == "mine\n"
    ws.write_text("g.txt", "x\n")
    assert (tmp_path / "moved" / "g.txt").exists()
    assert not (tmp_path / "outside" / "g.txt").exists()


def test_the_root_fd_is_not_inherited_by_programs(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    assert not os.get_inheritable(ws._fd)
    fd = ws.open_dir(".")
    try:
        assert not os.get_inheritable(fd)
    finally:
        os.close(fd)


# ---- the race, in process ------------------------------------------------------------------------


SWAPPER = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
other, folder = map(os.fsencode, sys.argv[1:3])
print("swapping", flush=True)
for _ in range(10_000_000):  # bounded; killed long before
    if libc.renameat2(-100, other, -100, folder, 2) != 0:  # RENAME_EXCHANGE
        sys.exit(f"renameat2: {os.strerror(ctypes.get_errno())}")
"""
"""Exchanges a directory and a symlink, atomically, as fast as it can: in a process of its own,
so it runs alongside the resolution, not in turns with it under one interpreter lock."""


@pytest.fixture
def swapping(tree: Path) -> Iterator[subprocess.Popen[str]]:
    """tree/d flipping between a directory holding `secret` and a symlink to the outside
    directory until the test ends."""
    (tree / "d").mkdir()
    (tree / "d" / "secret").write_text("inside\n")
    (tree / "d.other").symlink_to(tree.parent / "outside")
    argv = [sys.executable, "-c", SWAPPER, str(tree / "d.other"), str(tree / "d")]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            assert process.stdout.readline() == "swapping\n"
            yield process
        finally:
            process.kill()


def test_a_folder_swapped_for_a_symlink_never_leads_outside(
    tree: Path, resolver: bool, swapping: subprocess.Popen[str]
) -> None:
    ws = Workspace(tree, use_openat2=resolver)
    outside = tree.parent / "outside"
    before = (outside / "secret").stat()
    outcomes = set()
    for n in range(RACE_TRIES):
        try:
            text = ws.read_text("d/secret")
        except OutsideWorkspace:
            outcomes.add("refused")
        else:
            assert text == "inside\n" or text.startswith("write "), text
            outcomes.add("read")
        try:
            ws.write_text("d/secret", f"write {n}\n")
        except OutsideWorkspace:
            outcomes.add("refused")
    assert swapping.poll() is None  # still swapping: it never failed
    assert os.listdir(outside) == ["secret"]
    after = (outside / "secret").stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert (outside / "secret").read_text() == SECRET
    # The folder flipped while the paths were resolved. (Reads served in between: how many
    # depends on how the kernel interleaves; the agent's race in test_workspace_agent.py counts
    # them.)
    assert "refused" in outcomes


def test_resolve_follows_symlinks_inside_and_refuses_leaving(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "secrets").mkdir()
    (root / "secrets" / "key").write_text("k")
    (root / "src" / "innocent").symlink_to("../secrets/key")
    (root / "out").symlink_to(tmp_path)
    workspace = Workspace(root)
    assert workspace.resolve(".") == "."
    assert workspace.resolve("src/..") == "."
    assert workspace.resolve(str(root / "src")) == "src"
    assert workspace.resolve("src/innocent") == "secrets/key"
    assert workspace.resolve("src/new.py") == "src/new.py"
    with pytest.raises(OutsideWorkspace):
        workspace.resolve("out/anything")
    with pytest.raises(OutsideWorkspace):
        workspace.resolve("/etc/passwd")
