"""The C heap of a batch command that builds output in chunks: keep freed memory.

`rerender` holds a chunk's records (about a megabyte of 25 KB replies), writes them
and frees them, over and over. glibc's defaults hand the freed top of the heap back to
the kernel as soon as it exceeds 128 KiB (`M_TRIM_THRESHOLD`) and serve allocations of
128 KiB and more from fresh mappings (`M_MMAP_THRESHOLD`), so every chunk grew the
heap again, page by page: on 10,000 typical jobs 233,000 page faults and 10,000 `brk`
calls, a third of the run (docs/PERFORMANCE.md, "Batch re-rendering"). With the
thresholds raised, the memory a chunk freed is reused by the next one. The peak does
not grow: memory is kept, not taken.

Only glibc has `mallopt`; elsewhere this does nothing.
"""

import ctypes

# glibc's malloc.h
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

# Kept freed at the top of the heap before any is returned.
TRIM_THRESHOLD = 256 << 20
# Allocations this large and more get a mapping of their own (glibc's cap: 32 MiB on
# 64-bit systems).
MMAP_THRESHOLD = 32 << 20


def keep_freed_memory() -> bool:
    """Raise this process's trim and mapping thresholds (inherited by forked children);
    False where the C library has no `mallopt` or refused a value."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and bool(
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    )
