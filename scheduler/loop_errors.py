"""The node's asyncio exception handler: what the loop cannot hand to anyone is
logged, each distinct message at most once a second. And the same for threads:
one that ends on an exception says so in the log (`thread_died`), timestamped
like every other line, not only as a bare traceback on stderr.

A listening socket out of file descriptors makes asyncio report EMFILE from
accept() up to `backlog` times per wake-up: the red team saw 30 MB of log in
10 s, which filled the disk the log needs. The same message (its text and its
exception's) is logged again only a second after its last line, which says how
many like it were left out in between.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("apollo11.scheduler.node")

INTERVAL_S = 1.0
MAX_KEYS = 256  # distinct messages remembered; past it, the stale ones are forgotten


class LoopErrorLog:
    """Callable as `loop.set_exception_handler(LoopErrorLog())`."""

    def __init__(
        self, *, interval_s: float = INTERVAL_S, now: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval_s = interval_s
        self.now = now
        # key -> (when last logged, how many left out since)
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}

    def __call__(self, loop: asyncio.AbstractEventLoop | None, context: dict[str, Any]) -> None:
        message = str(context.get("message", "error"))
        err = context.get("exception")
        key = (message, "" if err is None else f"{type(err).__name__}: {err}")
        t = self.now()
        last = self._seen.get(key)
        if last is not None and t - last[0] < self.interval_s:
            self._seen[key] = (last[0], last[1] + 1)
            return
        left_out = 0 if last is None else last[1]
        if last is None and len(self._seen) >= MAX_KEYS:
            self._forget(t)
        self._seen[key] = (t, 0)
        log.error(
            "unhandled in the event loop: %s%s",
            message,
            f" ({left_out} more like it in the last {t - last[0]:.1f} s not logged)"
            if last is not None and left_out
            else "",
            exc_info=(type(err), err, err.__traceback__) if err is not None else None,
        )

    def _forget(self, t: float) -> None:
        stale = [k for k, (when, _) in self._seen.items() if t - when >= self.interval_s]
        for k in stale or list(self._seen)[: MAX_KEYS // 2]:
            del self._seen[k]


def thread_died(args: threading.ExceptHookArgs) -> None:
    """For `threading.excepthook`: a thread that ended on an exception, logged as an
    error with its traceback (SystemExit ends a thread quietly, as by default)."""
    if args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else "a thread"
    exc = args.exc_value if args.exc_value is not None else args.exc_type()
    log.error(
        "thread %s ended on an error", name, exc_info=(args.exc_type, exc, args.exc_traceback)
    )
