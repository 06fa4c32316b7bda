"""A rate limit's decision: GCRA, the generic cell rate algorithm (a leaky bucket kept as
one number per key value, the theoretical arrival time TAT).

With emission interval `T = per / limit` and burst tolerance `tau = (burst - 1) * T`,
a start at `now` is admitted iff `now >= tat - tau` (no TAT yet counts as `now`), and
then `tat = max(tat, now) + T`; otherwise it waits until `tat - tau`. Over any long
run that is at most `limit` starts per `per`, with up to `burst` at once after a lull;
one number per value rather than a window of timestamps, so a rate's state is as small
as its key values are many.

The primary decides and records the new TAT in the log (STEP_STARTED's "tat"); replay
stores that number and never calls this: the decision is the record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Paced:
    """`admitted`: the start may happen now, and `tat_ms` is the TAT to record. Not
    admitted: `until_ms` is the first millisecond at which it would be (a timer's
    deadline), and `tat_ms` is the TAT as it was."""

    admitted: bool
    tat_ms: float
    until_ms: int | None = None


def gcra(tat_ms: float | None, now_ms: int, interval_ms: float, burst: int) -> Paced:
    """The decision for one start at `now_ms` against a rate's TAT (None: none yet)."""
    tat = now_ms if tat_ms is None else tat_ms
    allowed_at = tat - (burst - 1) * interval_ms
    if now_ms >= allowed_at:
        return Paced(True, _tidy(max(tat, now_ms) + interval_ms))
    # ceil: woken at until_ms, the same comparison admits it (until_ms >= allowed_at)
    return Paced(False, tat, math.ceil(allowed_at))


def _tidy(ms: float) -> float:
    # A whole number of milliseconds is logged as one ("tat": 1733450000100, not
    # 1733450000100.0); a fraction is kept, or 3 per second would drift to 1 per 333 ms.
    return int(ms) if float(ms).is_integer() else ms
