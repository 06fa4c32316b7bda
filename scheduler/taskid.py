"""Task ids: sortable by submission time, unique without coordination.

`<ms since the epoch, 12 hex digits>-<40 random bits, 10 hex digits>`. Made by the
primary for a submission, and by a worker for a child its durable main spawns
(the primary checks the id before it records the child). Imports nothing of the
server: a worker makes them too.
"""

from __future__ import annotations

import random
import re
import time

_ids = random.Random()  # seeded from os.urandom: nodes, workers and restarts differ
_FORM = re.compile(r"[0-9a-f]{12}-[0-9a-f]{10}")


def new_task_id() -> str:
    """A new id (not a system call per task, which os.urandom was)."""
    return f"{time.time_ns() // 1_000_000:012x}-{_ids.getrandbits(40):010x}"


def is_task_id(value: str) -> bool:
    """Is `value` of the form new_task_id makes?"""
    return _FORM.fullmatch(value) is not None
