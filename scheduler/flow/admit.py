"""Whether a start may happen now: every limit that applies, decided at once.

The engine gathers what one start needs (`Need`: the concurrency limits with their
occupancy, the rates with their TATs, the debounce's start time) and asks `admit`,
which answers `Admit` (with the TATs to record on the STARTED) or `NotYet` with the
operator's sentence. The checks go from the one that waits longest to the one that
spends something: a debounce first (nothing else matters before its time), then the
concurrency limits (a full one waits for a holder to end: no timer), then the rates,
whose TATs are spent only when everything admits, so a start held by a full slot
does not use up its tenant's rate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from apollo11.scheduler.flow.gcra import gcra
from apollo11.scheduler.flow.limits import format_ms, limit_name


@dataclass(frozen=True, slots=True)
class SlotNeed:
    """A concurrency limit that applies to this start, and how many hold it now."""

    limit_id: str
    value: str
    max: int
    occupancy: int


@dataclass(frozen=True, slots=True)
class RateNeed:
    """A rate that applies to this start (a task's first), with its TAT (None: none yet).
    `limit` and `per_ms` rather than the interval alone: the sentence says "10 per 1s"."""

    rate_id: str
    value: str
    limit: int
    per_ms: int
    burst: int
    tat_ms: float | None

    @property
    def interval_ms(self) -> float:
        return self.per_ms / self.limit


@dataclass(frozen=True, slots=True)
class Need:
    concurrency: tuple[SlotNeed, ...] = ()
    rates: tuple[RateNeed, ...] = ()
    not_before_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Admit:
    """Start now; record these TATs (rate id -> ms) on the STARTED."""

    tats: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NotYet:
    """Do not start yet. `until_ms`: when to look again (a rate's or a debounce's time);
    None: when a holder of `limit_id`'s `value` ends. `reason` is the operator's
    sentence ("host=db1 is full (2/2)"); the engine adds the queue position."""

    reason: str
    limit_id: str
    value: str
    until_ms: int | None


def admit(need: Need, now_ms: int) -> Admit | NotYet:
    if need.not_before_ms is not None and now_ms < need.not_before_ms:
        return NotYet(
            f"debouncing until {clock(need.not_before_ms, now_ms)}", "", "", need.not_before_ms
        )
    for slot in need.concurrency:
        if slot.occupancy >= slot.max:
            return NotYet(
                f"{limit_name(slot.limit_id)}={slot.value} is full ({slot.occupancy}/{slot.max})",
                slot.limit_id,
                slot.value,
                None,
            )
    tats: dict[str, float] = {}
    held: tuple[RateNeed, int] | None = None
    for rate in need.rates:
        pace = gcra(rate.tat_ms, now_ms, rate.interval_ms, rate.burst)
        if pace.admitted:
            tats[rate.rate_id] = pace.tat_ms
        elif pace.until_ms is not None and (held is None or pace.until_ms > held[1]):
            # the latest: woken earlier, the start would only be held again by this one
            held = (rate, pace.until_ms)
    if held is not None:
        rate, until_ms = held
        burst = f", burst {rate.burst}" if rate.burst > 1 else ""
        return NotYet(
            f"{limit_name(rate.rate_id)}={rate.value} is rate limited "
            f"({rate.limit} per {format_ms(rate.per_ms)}{burst}) until {clock(until_ms, now_ms)}",
            rate.rate_id,
            rate.value,
            until_ms,
        )
    return Admit(tats)


def clock(ms: int, now_ms: int) -> str:
    """A log time as the operator reads it in a sentence: "12:00:01.250" (UTC, the
    milliseconds when there are some), with the date when it is not today's."""
    at = datetime.fromtimestamp(ms / 1000, UTC)
    text = at.strftime("%H:%M:%S") + (f".{ms % 1000:03d}" if ms % 1000 else "")
    if at.date() != datetime.fromtimestamp(now_ms / 1000, UTC).date():
        text = f"{at:%Y-%m-%d} {text}"
    return text
