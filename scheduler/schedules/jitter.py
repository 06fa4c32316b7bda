"""How long after its nominal time an occurrence starts: a hash, not a draw.

`jitter_for(schedule_id, nominal_time, jitter)` is in [0, jitter), in whole
milliseconds (the log's unit), from blake2b over the schedule id and the
nominal time in integer microseconds since the epoch. The same on every node,
in every process and after every restart (Python's `hash()` of a str is salted
per process), so a primary that takes over mid-minute starts an occurrence at
the instant the old one would have; and two schedules that share a cron spread
over the window rather than starting in one burst.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_MILLISECOND = timedelta(milliseconds=1)


def jitter_for(schedule_id: str, nominal_time: datetime, jitter: timedelta) -> timedelta:
    """The delay of `schedule_id`'s occurrence at `nominal_time` (aware), in [0, jitter)."""
    span = jitter // _MILLISECOND
    if span <= 0:
        return timedelta(0)
    if nominal_time.utcoffset() is None:
        raise ValueError(f"nominal_time must be aware, got {nominal_time.isoformat()}")
    micros = (nominal_time - _EPOCH) // _MICROSECOND
    digest = hashlib.blake2b(f"{schedule_id}\0{micros}".encode(), digest_size=8).digest()
    # 64 bits over at most 3e12 ms (a century): the modulo's bias is below one in a million.
    return timedelta(milliseconds=int.from_bytes(digest, "big") % span)
