"""Threads of the node's own that yield their core to the event loop's.

Linux keeps a nice value per thread, so a background thread can ask the kernel
for a smaller share than the loop's when both want a core, and still get all it
wants when the loop does not. Ten lower, CFS weighs it about a tenth of a thread
at the node's own value. Elsewhere (or under a seccomp profile refusing it) the
threads stay as they were. Used for the HTTP port's thread (web/server.py), gRPC
core's pool (api/connshed.py) and the archive's uploads (bucket/shipper.py).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable


def lower(tids: Iterable[int], by: int) -> None:
    """Threads `tids` of this process at `by` above the node's own nice value (its main
    thread's), 19 at most: a thread lowered again is not lowered further. A thread
    gone meanwhile, or a system refusing it, is left as it is."""
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: no setpriority
        nice = min(19, os.getpriority(os.PRIO_PROCESS, os.getpid()) + by)
        for tid in tids:
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, tid, nice)


def lower_this_thread(by: int) -> None:
    """The calling thread `by` above the node's own nice value."""
    lower((threading.get_native_id(),), by)
