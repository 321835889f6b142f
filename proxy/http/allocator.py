"""glibc malloc tuning for `cachescout serve`: multi-megabyte request bodies go back to the OS.

Why (issue 22, measured): glibc serves a block of at least its mmap threshold (128 KiB at start)
with its own mmap, returned to the OS on free, but every such free raises the threshold to that
block's size (up to 32 MiB). After the first 3.5 MB body was freed, every later one came from the
heap instead, and the heap kept the holes: with 300 agents x 3.5 MB prompts 47 MB of the proxy's
RSS was free heap memory (`mallinfo2` fordblks; `malloc_trim(0)` then gave back 38 MB). Setting
the threshold explicitly turns that adjustment off (and leaves the heap's trim threshold at its
128 KiB default), so a body, its parsed prompt and its canonical text (each at least
`malloc_mmap_threshold_bytes`) are mapped and unmapped on their own; smaller objects are served
by the heap as before. The cost is a page fault per 4 KiB of a fresh mapping, for bodies of a
megabyte or more only (tens of microseconds per megabyte next to ~25 ms per megabyte of parsing).

Only glibc has `mallopt`; elsewhere (musl, macOS) nothing is changed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("cachescout.serve")

M_MMAP_THRESHOLD = -3  # glibc malloc.h
MAX_MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's HEAP_MAX_SIZE / 2 on 64-bit: larger values are refused


def set_mmap_threshold(nbytes: int) -> bool:
    """Blocks of at least ``nbytes`` get their own mapping (freed to the OS at once); 0: leave
    glibc's dynamic threshold. True when applied."""
    if nbytes <= 0:
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018 - glibc only (musl's mallopt is a stub)
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    ok = bool(mallopt(M_MMAP_THRESHOLD, min(int(nbytes), MAX_MMAP_THRESHOLD)))
    if not ok:
        log.warning("mallopt(M_MMAP_THRESHOLD, %d) refused", nbytes)
    return ok
