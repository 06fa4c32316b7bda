"""Give freed heap memory back to the system (glibc's malloc_trim) after a burst.

When a burst of connections ends, what they allocated (TLS buffers in asyncio's
SSL layer, gRPC core's per-connection buffers) is freed, but glibc keeps the
pages: the heap is fragmented by the objects that outlived the burst, so it
cannot shrink from the top, and the node's RSS stays where the burst left it
(issue 28: the gRPC port at 76 MB before 4,000 idle connections, 121 MB after
they were gone). malloc_trim(0) walks every arena and returns whole free pages
anywhere in them (madvise).

It is not free: about 50 ms on a fragmented heap of 1.3 GB, with each arena's
lock held while it is walked, whether or not it finds anything. So it runs in a
thread (ctypes lets go of the GIL), only when the RSS has grown well past the
lowest of the last minutes (`due`), and at most every MIN_TRIM_INTERVAL_S: a
node whose state grows for good trims at most that often until its floor
catches up (0.25 % of a core on a heap of 1.3 GB). Elsewhere than glibc (musl,
macOS) it does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
from collections import deque
from collections.abc import Callable

CHECK_EVERY_S = 10.0
GROWTH = 1.15  # trim when the RSS is 15 % above the lowest of the last 5 minutes...
MIN_GROWTH_BYTES = 8 * 1024 * 1024  # ...and at least this much
FLOOR_WINDOW_S = 300.0
MIN_TRIM_INTERVAL_S = 20.0


def _load() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        fn = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None  # not glibc
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


_MALLOC_TRIM = _load()
_PAGE = os.sysconf("SC_PAGE_SIZE")


def trim() -> bool:
    """Return free heap pages now: whether the C library can (glibc)."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True


def rss_bytes() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * _PAGE


def due(rss: int, floor: int) -> bool:
    """Whether the RSS has grown enough past `floor` (the lowest of late)."""
    return rss >= floor * GROWTH and rss - floor >= MIN_GROWTH_BYTES


async def keep_trimmed(period_s: float = CHECK_EVERY_S) -> None:
    """Until cancelled: every `period_s`, a trim when one is `due` against the lowest
    RSS of the last FLOOR_WINDOW_S, at most every MIN_TRIM_INTERVAL_S. (Against what
    the last trim left, a trim in the middle of a flood would set the bar where the
    flood had taken the RSS, and the memory it freed when it ended stayed.)"""
    if _MALLOC_TRIM is None:
        return
    loop = asyncio.get_running_loop()
    seen: deque[tuple[float, int]] = deque([(loop.time(), rss_bytes())])
    last_trim = -MIN_TRIM_INTERVAL_S
    while True:
        await asyncio.sleep(period_s)
        now, rss = loop.time(), rss_bytes()
        seen.append((now, rss))
        while seen[0][0] < now - FLOOR_WINDOW_S:
            seen.popleft()
        floor = min(r for _, r in seen)
        if due(rss, floor) and now - last_trim >= MIN_TRIM_INTERVAL_S:
            last_trim = now
            await asyncio.to_thread(trim)
