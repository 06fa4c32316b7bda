"""A retry budget: how fast a step's retries may start, and the pacing of one retry.

Envoy's retry budgets and gRPC's retry throttling, as a pacer: retries are free while
they are a modest share of a step's traffic, and paced once failures dominate. Per
(workflow, step) the primary's engine keeps, over a sliding window of the log's time,
the step's successes and failures (engine/retrypacer.py keeps them; this module
decides). Retries of that step may start at up to

    R = max(min_per_s, share x successes a second)

and a GCRA (scheduler/flow/gcra.py, the rates' own) at rate R, with a burst of
max(min_burst, R x burst_s), admits each failure into the retry pipeline, and each
success gives back `share` of a slot (`credited`, gRPC's tokens): a failure admitted
now is not paced; one that comes while failures outrun R waits for the key's
next free slot, and its backoff counts from that slot (`paced_s` on top of the rule's
delay). Added, not
the larger of the two: with `max(backoff, slot)` the herd's first second of slots lies
inside its backoff, and those retries land together with the jittered ones (~7 % of
1,000 in one second against the 5 % target, docs/bench-history/retries.md). The GCRA
runs on the failures' own times, not the retries': a 60 s backoff does not reserve a
slot a minute out and hold back a 1 s one behind it.

The verdict records the pacing (`retry_in_s` includes it; `paced_s` and `failing` say
how much was the budget's), so a standby and a replay read it and never compute it:
only the primary's judgement uses the window, which starts empty after a failover
(conservative: R is `min_per_s` until successes are seen again).

Pure: times are passed in (the log's milliseconds); nothing here reads a clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from apollo11.scheduler import defaults, flow

# defaults, measured by `apollo11 bench retries` (docs/benchmarks.md "Retries"): a herd
# of 1,000 failing together retries at 30 a second after a burst of 10, ~4 % in its
# fullest second against a 5 % target; 0.2 of successes (and the burst) leaves a
# closed loop with 10 % of its steps failing once nearly unpaced, its start included
MIN_PER_S = defaults.RETRY_BUDGET_MIN_PER_S  # 30.0
SHARE = defaults.RETRY_BUDGET_SHARE  # 0.2
WINDOW_S = 10.0
BURST_S = 0.1  # a tenth of a second's worth may start at once...
MIN_BURST = 10  # ...and at least this many: a handful failing together is no herd
MAX_PACED_S = 300.0  # the most the budget adds to one retry: a herd of 9,000 at the floor
# the rate's denominator is the time seen, at least this: a window just started (a new
# primary, a step's first traffic) counts its first successes over the time it has
# seen them, not over the whole window
MIN_SPAN_S = 0.05


@dataclass(frozen=True, slots=True)
class RetryBudget:
    """How a step's retries are paced (a node's `retry_budget*` settings).

    `min_per_s`: retries a second that are always free (R's floor); `share`: of the
    step's successes a second, the retries that are; `window_s`: the log's time the
    counts cover; `burst_s`: R x this may start at once."""

    min_per_s: float = MIN_PER_S
    share: float = SHARE
    window_s: float = WINDOW_S
    burst_s: float = BURST_S
    min_burst: int = MIN_BURST
    max_paced_s: float = MAX_PACED_S

    def __post_init__(self) -> None:
        if not (math.isfinite(self.min_per_s) and self.min_per_s > 0):
            raise ValueError(f"min_per_s must be > 0, got {self.min_per_s!r}")
        if not (math.isfinite(self.share) and self.share >= 0):
            raise ValueError(f"share must be >= 0, got {self.share!r}")
        if not (math.isfinite(self.window_s) and self.window_s >= 1):
            raise ValueError(f"window_s must be >= 1, got {self.window_s!r}")
        if not (math.isfinite(self.burst_s) and self.burst_s >= 0):
            raise ValueError(f"burst_s must be >= 0, got {self.burst_s!r}")
        if self.min_burst < 1:
            raise ValueError(f"min_burst must be >= 1, got {self.min_burst!r}")
        if not (math.isfinite(self.max_paced_s) and self.max_paced_s > 0):
            raise ValueError(f"max_paced_s must be > 0, got {self.max_paced_s!r}")


class Slot(NamedTuple):
    """A retry's place in its step's budget: what `judge` adds to the rule's delay.

    `paced_s`: seconds the budget adds (0: free); `failing`: the step's failures in the
    window, this one included (what the verdict line shows)."""

    paced_s: float
    failing: int


FREE = Slot(0.0, 0)


def rate_per_s(budget: RetryBudget, successes: int, span_s: float) -> float:
    """R: the retries a second a step may start, having seen `successes` over `span_s`
    seconds of the log's time (at most the window)."""
    span = min(budget.window_s, max(MIN_SPAN_S, span_s))
    return max(budget.min_per_s, budget.share * successes / span)


class Paced(NamedTuple):
    """One failure's pacing: its slot, and the key's TAT to keep."""

    slot: Slot
    tat_ms: float


def rescaled(tat_ms: float | None, now_ms: int, was: float, rate: float) -> float | None:
    """The TAT kept at rate `was`, at rate `rate` now. The retries queued ahead of now
    are a count, `(tat - now) x was`: at a new rate they take `count / rate`. Without it
    a backlog paced at the floor while a step's first successes came in would keep its
    length after the budget grew."""
    if tat_ms is None or tat_ms <= now_ms or was == rate:
        return tat_ms
    return now_ms + (tat_ms - now_ms) * was / rate


def credited(tat_ms: float | None, rate: float, share: float) -> float | None:
    """The TAT after a success: `share` of a slot given back (gRPC's retry throttle: a
    success adds a fraction of a token, a failure takes one). So a step whose failures
    stay within `share` of its successes is not paced, even while its traffic grows
    faster than the window's average follows; a slot given back past now is lost (the
    GCRA counts a TAT behind now as now), so credit never banks past the burst."""
    if tat_ms is None or rate <= 0:
        return tat_ms
    return tat_ms - share * 1000.0 / rate


def pace(
    budget: RetryBudget, tat_ms: float | None, now_ms: int, rate: float, failing: int
) -> Paced:
    """Admit a failure at `now_ms` (the log's) into its step's retries at `rate` a
    second, against the key's TAT (None: none yet): free when the GCRA admits it now,
    else paced until the first millisecond it would."""
    interval = 1000.0 / rate
    burst = max(budget.min_burst, int(rate * budget.burst_s))
    # A queue that never drains (an hour of failures and no success) would put each
    # new retry further out without end, and keep it there after the step recovers:
    # the queue ahead is held to max_paced_s, past it a retry waits that long.
    cap_ms = now_ms + budget.max_paced_s * 1000.0
    if tat_ms is not None and tat_ms > cap_ms:
        tat_ms = cap_ms
    first = flow.gcra(tat_ms, now_ms, interval, burst)
    if first.admitted:
        return Paced(Slot(0.0, failing), first.tat_ms)
    at = first.until_ms
    assert at is not None
    then = flow.gcra(tat_ms, at, interval, burst)  # admitted at until_ms, by its definition
    return Paced(Slot((at - now_ms) / 1000, failing), then.tat_ms)
