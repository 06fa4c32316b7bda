"""Give freed heap memory back to the system (glibc's malloc_trim).

After a burst of connections ends, what they allocated (TLS buffers of 256 KiB
each in asyncio's SSL layer, gRPC core's per-connection buffers) is freed, but
glibc keeps the pages: the heap is fragmented by the objects that outlived the
burst, so it cannot shrink from the top, and the node's RSS stays where the
burst left it (issue 28: 80 MB → 744 MB after 5,000 connections, none given
back). malloc_trim(0) walks every arena and returns whole free pages anywhere
in them (madvise), which brought it back within a few MB.

It costs a few milliseconds on a large heap, so it runs after a burst, at most
every MIN_INTERVAL_S, never per connection. Elsewhere than glibc (musl, macOS)
it does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import time
from collections.abc import Callable

MIN_INTERVAL_S = 10.0


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


def trim() -> bool:
    """Return free heap pages now: whether the C library can (glibc)."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True


class Trimmer:
    """Trims once after a burst: `ended()` per connection that ended; a trim is
    due after `burst` of them, then runs at most every `min_interval` seconds."""

    def __init__(self, *, burst: int = 32, min_interval: float = MIN_INTERVAL_S) -> None:
        self.burst = burst
        self.min_interval = min_interval
        self._ended = 0
        self._last = 0.0
        self._due: asyncio.TimerHandle | None = None
        self.trims = 0

    def ended(self) -> None:
        self._ended += 1
        if self._ended < self.burst or self._due is not None:
            return
        wait = max(0.0, self._last + self.min_interval - time.monotonic())
        self._due = asyncio.get_running_loop().call_later(wait, self._run)

    def _run(self) -> None:
        self._due = None
        self._ended = 0
        self._last = time.monotonic()
        if trim():
            self.trims += 1

    def cancel(self) -> None:
        if self._due is not None:
            self._due.cancel()
            self._due = None
