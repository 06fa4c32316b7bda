"""A thread of the node's own that yields its core to the event loop's.

Linux keeps a nice value per thread, so a background thread can ask the kernel
for a smaller share than the loop's when both want a core, and still get all it
wants when the loop does not. Ten lower, CFS weighs it about a tenth of a thread
at the node's own value. Elsewhere (or under a seccomp profile refusing it) the
thread stays as it was.
"""

from __future__ import annotations

import contextlib
import os
import threading


def lower_this_thread(by: int) -> None:
    """The calling thread `by` above its nice value now (19 at most)."""
    tid = threading.get_native_id()
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: no setpriority
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + by))
