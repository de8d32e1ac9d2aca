"""The C allocator's tunables for a host streaming large messages: `keep_freed_memory`.

glibc's malloc hands the free memory at the top of its heap back to the kernel once more than
its trim threshold (128 KiB at first) is free there, and serves allocations over its mmap
threshold with a mapping of their own, unmapped when freed. A host streaming 64 KiB messages
allocates and frees a window's worth of ciphertext, masked copies and socket buffers over and
over, so every batch faulted its pages in afresh: a fifth to a quarter of the host's CPU went to
page faults and `brk` (docs/performance.md, "Freed memory kept for reuse"). Fixed thresholds keep
that memory for the next batch; they also turn off glibc's sliding thresholds, which follow the
largest block freed so far and so depend on what the process did before. The cost is bounded:
at most TRIM_THRESHOLD of free memory kept at the heap's top.

Set once, at the start of `tunnel host`, never by a library call: the tunables are the whole
process's. Not for the relay, whose memory per idle teammate is a goal of its own and whose
forwarding showed no clear gain, nor for a teammate, whose receiving did not gain either (the
same section). A user's own thresholds win (MALLOC_TRIM_THRESHOLD_, MALLOC_MMAP_THRESHOLD_, or
either in GLIBC_TUNABLES); elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import os
import sys

MMAP_THRESHOLD = 1024 * 1024
"""Allocations below this come from the heap (mallopt's M_MMAP_THRESHOLD): every message up to
the largest a link carries (`Limits.max_message_size`, 1 MiB) and its copies."""

TRIM_THRESHOLD = 8 * 1024 * 1024
"""Free memory kept at the heap's top before any goes back to the kernel (M_TRIM_THRESHOLD). A
sender that fills a channel's 1 MiB send window holds its ciphertext, the masked copies and the
socket's buffer at once: of 1, 4 and 16 MiB, 4 was enough to stop the churn sending 64 KiB
messages and 1 changed nothing; 8, not measured apart, leaves room for a second channel's
window. A relay's larger `--window` lets a host hold more at once than this covers."""

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
"""mallopt(3)'s parameter numbers, from glibc's malloc.h."""

_USER_VARIABLES = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")
_USER_TUNABLES = ("glibc.malloc.trim_threshold", "glibc.malloc.mmap_threshold")


def keep_freed_memory() -> bool:
    """Set glibc's trim and mmap thresholds (module docstring); True if they were set."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if (
        sys.platform != "linux"
        or any(name in os.environ for name in _USER_VARIABLES)
        or any(name in tunables for name in _USER_TUNABLES)
    ):
        return False
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return False
    except (ValueError, OSError):  # not glibc: musl, for one, has no such name
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success, 0 on error.
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
