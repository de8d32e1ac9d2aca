"""The C allocator's thresholds: freed memory stays for reuse once a command sets them, and a
user's own settings win. Each case runs in a fresh interpreter: the tunables are the process's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tunnel.process.allocator import MMAP_THRESHOLD, TRIM_THRESHOLD
from tunnel.process.exit_codes import EXIT_CONFIG

glibc_only = pytest.mark.skipif(
    sys.platform != "linux" or not os.confstr("CS_GNU_LIBC_VERSION"), reason="glibc's tunables"
)

# Frees 3 MiB of 64 KiB blocks (a send window's ciphertext and its copies, as a host streaming
# large messages frees it), then reports what glibc's mallinfo2 says: the free memory kept at the
# top of the heap, and whether a 700 KiB block got a mapping of its own.
CHILD = """
import ctypes, json, sys
from tunnel.process.allocator import keep_freed_memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
tuned = keep_freed_memory() if sys.argv[1] == "tune" else False
blocks = [bytes(64 * 1024) for _ in range(48)]
del blocks
kept = libc.mallinfo2().keepcost
mapped_before = libc.mallinfo2().hblks
large = bytearray(700 * 1024)
print(json.dumps({"tuned": tuned, "kept": kept, "mapped": libc.mallinfo2().hblks - mapped_before}))
"""


def run_child(mode: str, **env: str) -> dict[str, int]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_"))}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, mode],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, int] = json.loads(done.stdout)
    return result


@glibc_only
def test_freed_memory_is_kept_for_reuse_once_set() -> None:
    tuned = run_child("tune")
    assert tuned["tuned"]
    # The 3 MiB freed stay at the heap's top, and a block under the mmap threshold comes from
    # the heap: the next window reuses pages already faulted in.
    assert 2 * 1024 * 1024 <= tuned["kept"] <= TRIM_THRESHOLD
    assert MMAP_THRESHOLD > 700 * 1024
    assert tuned["mapped"] == 0


@glibc_only
def test_without_the_thresholds_glibc_hands_freed_memory_back() -> None:
    # What the thresholds change: by default the same frees are trimmed and the large block is
    # a mapping of its own, so each window faults its pages in again.
    plain = run_child("plain")
    assert plain["kept"] < 1024 * 1024
    assert plain["mapped"] == 1


@glibc_only
@pytest.mark.parametrize(
    "setting",
    [
        {"MALLOC_TRIM_THRESHOLD_": "131072"},
        {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"},
    ],
)
def test_a_users_own_allocator_settings_win(setting: dict[str, str]) -> None:
    kept = run_child("tune", **setting)
    assert not kept["tuned"]
    assert kept["kept"] < 1024 * 1024


@glibc_only
def test_tunables_of_other_kinds_leave_the_thresholds_to_us() -> None:
    assert run_child("tune", GLIBC_TUNABLES="glibc.cpu.hwcap_mask=0")["tuned"]


def test_tunnel_host_sets_the_thresholds_before_its_loop_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tunnel.host import serve
    from tunnel.host.settings import HostSettings

    calls: list[str] = []
    monkeypatch.setattr(serve, "keep_freed_memory", lambda: calls.append("thresholds") or True)

    def loop(*_: object) -> None:
        calls.append("loop")
        raise OSError("stopped here")

    monkeypatch.setattr(serve.anyio, "run", loop)
    settings = HostSettings(relay_url="http://127.0.0.1:9", key_file=tmp_path / "host_key")
    assert serve.run_host_command(settings, serve.serve_echo(settings)) == EXIT_CONFIG
    assert calls == ["thresholds", "loop"]
