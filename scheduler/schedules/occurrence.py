"""What becomes of each nominal time that has come: the catch-up decision.

`decide(spec, schedule_id=, watermark=, now=, running=, buffered=, paused=)`
takes the schedule's rules, the last nominal time already decided (the
watermark, from the log), the time, and what the previous occurrence is doing,
and says, for each nominal time in (watermark, now] whose start (nominal time
+ jitter) has come, in order, one outcome with its reason:

* missed: started later than `catchup_window` after its start time ("2h5m late,
  past the catch-up window of 1h"): after an outage or a long failover;
* skipped: the schedule is paused (even when late: a pause is no miss); or
  overlap `skip` (the previous one runs), `buffer-one` with one already
  waiting, `cancel-other` when a later occurrence of the same decision
  supersedes it;
* buffered: overlap `buffer-one` / `buffer-all` while the previous one runs or
  others wait: it starts when they are done (the caller's, on their end);
* fired: it starts now; under `cancel-other`, with the running one cancelled.

Within one decision an occurrence that fired is the one running for the next.
Occurrences keep their order: one whose jitter puts its start after `now`
waits, and so do those after it, though their own starts may have come.

The caps, so that a long outage or a cluster restart neither floods the
workers nor writes one giant batch:

* `max_fires` (MAX_FIRES, 10): at most so many fire in one decision; the rest
  stay after the watermark, undecided, `more` says so, and the caller asks
  again on its next tick (the firing loop's tick is a second: 10 catch-up
  fires a second per schedule, at most). Only `allow-all` fires more than one
  at a time; `skip`, the default, fires one and skips the others.
* `max_decided` (MAX_DECIDED, 1,000): at most so many outcomes a decision; a
  week of a once-a-second schedule missed is decided a thousand at a time.

Nothing is dropped without a record: every nominal time up to the new
watermark has an outcome, and every one after it is still to be decided.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from apollo11.scheduler.schedules.durations import format_duration
from apollo11.scheduler.schedules.jitter import jitter_for
from apollo11.scheduler.schedules.spec import Overlap, ScheduleSpec
from apollo11.scheduler.schedules.times import next_time, nominal_times

MAX_FIRES = 10
MAX_DECIDED = 1_000


class Outcome(StrEnum):
    FIRED = "fired"
    MISSED = "missed"
    SKIPPED = "skipped"
    BUFFERED = "buffered"


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One nominal time's outcome, as the log will record it."""

    nominal_time: datetime
    outcome: Outcome
    reason: str
    start_at: datetime  # the nominal time plus its jitter
    cancel_running: bool = False  # fired under cancel-other while the previous one ran


@dataclass(frozen=True, slots=True)
class Decision:
    occurrences: tuple[Occurrence, ...]
    watermark: datetime  # the last nominal time decided: the input's when none was
    # When the first undecided occurrence may start; None: the schedule is over.
    next_start: datetime | None
    more: bool  # that start has come already (a cap stopped the decision): ask again

    @property
    def sentence(self) -> str:
        """What was decided, for the log line: "fired 1, skipped 3; next at …"."""
        counts = Counter(o.outcome for o in self.occurrences)
        done = ", ".join(
            f"{outcome.value} {counts[outcome]}" for outcome in Outcome if counts[outcome]
        )
        if self.more:
            then = "more are due"
        elif self.next_start is None:
            then = "no more times"
        else:
            then = f"next at {self.next_start.isoformat()}"
        return f"{done or 'nothing due'}; {then}"


def decide(
    spec: ScheduleSpec,
    *,
    schedule_id: str,
    watermark: datetime,
    now: datetime,
    running: bool,
    buffered: int = 0,
    paused: bool = False,
    max_fires: int = MAX_FIRES,
    max_decided: int = MAX_DECIDED,
) -> Decision:
    """The outcome of each occurrence due in (watermark, now]: see the module's docstring.

    `running`: the previous occurrence's task has not ended; `buffered`: how
    many occurrences wait for it (overlap buffer-one / buffer-all); `paused`:
    the schedule was paused all through (watermark, now] (a caller that saw an
    unpause decides up to it, paused, first).
    """
    due: list[tuple[datetime, datetime]] = []
    for nominal in nominal_times(spec, watermark, until=now, count=max_decided):
        start_at = nominal + jitter_for(schedule_id, nominal, spec.jitter)
        if start_at > now:
            break  # not yet, and those after it wait behind it
        due.append((nominal, start_at))
    # cancel-other: of the occurrences that would fire in this decision, the last wins.
    latest = _last_fireable(spec, due, now, paused)
    busy, waiting = running, buffered
    occurrences: list[Occurrence] = []
    fires = 0
    for nominal, start_at in due:
        late = now - start_at
        if paused:  # before lateness: a pause is the operator's choice, not a miss to alert on
            outcome, reason = Outcome.SKIPPED, "paused"
        elif late > spec.catchup_window:
            window = _span(spec.catchup_window)
            outcome, reason = (
                Outcome.MISSED,
                f"{_span(late)} late, past the catch-up window of {window}",
            )
        else:
            outcome, reason = _overlap(spec.overlap, busy, waiting, nominal, latest)
        if outcome is Outcome.FIRED and fires >= max_fires:
            break  # the cap: this one and those after it are the next decision's
        cancel = outcome is Outcome.FIRED and spec.overlap is Overlap.CANCEL_OTHER and busy
        if cancel:
            reason = "overlap cancel-other: the running occurrence is cancelled"
        occurrences.append(Occurrence(nominal, outcome, reason, start_at, cancel))
        if outcome is Outcome.FIRED:
            fires += 1
            busy = True
        elif outcome is Outcome.BUFFERED:
            waiting += 1
    mark = occurrences[-1].nominal_time if occurrences else watermark
    following = next_time(spec, mark)
    next_start = (
        None if following is None else following + jitter_for(schedule_id, following, spec.jitter)
    )
    more = next_start is not None and next_start <= now
    return Decision(tuple(occurrences), mark, next_start, more)


def _overlap(
    policy: Overlap, busy: bool, waiting: int, nominal: datetime, latest: datetime | None
) -> tuple[Outcome, str]:
    """An on-time occurrence's outcome under `policy`, the previous one `busy` or not."""
    if policy is Overlap.ALLOW_ALL:
        return Outcome.FIRED, ""
    if policy is Overlap.CANCEL_OTHER:
        if latest is not None and nominal < latest:
            return Outcome.SKIPPED, f"overlap cancel-other: superseded by {latest.isoformat()}"
        return Outcome.FIRED, ""
    if policy is Overlap.SKIP:
        if busy:
            return Outcome.SKIPPED, "overlap skip: the previous occurrence is still running"
        return Outcome.FIRED, ""
    # buffer-one, buffer-all: those already waiting go first, so they count as busy.
    if not busy and not waiting:
        return Outcome.FIRED, ""
    if policy is Overlap.BUFFER_ONE and waiting >= 1:
        return Outcome.SKIPPED, "overlap buffer-one: an occurrence already waits"
    return Outcome.BUFFERED, f"overlap {policy.value}: waits for the occurrences before it"


def _last_fireable(
    spec: ScheduleSpec, due: list[tuple[datetime, datetime]], now: datetime, paused: bool
) -> datetime | None:
    if spec.overlap is not Overlap.CANCEL_OTHER or paused:
        return None
    inside = [nominal for nominal, start_at in due if now - start_at <= spec.catchup_window]
    return inside[-1] if inside else None


def _span(value: timedelta) -> str:
    return format_duration(timedelta(seconds=int(value.total_seconds())))
