"""A schedule's nominal times: the instants its occurrences are for, before jitter.

`nominal_times(spec, after, until=, count=)` lists them strictly after `after`,
within `start` and `end` (both included) and up to `until` (included), in
order, at most `count`; aware UTC datetimes, each once. Pure: the caller says
what time it is.

* `cron`: the expression matches wall-clock minutes in `tz`; each match is
  turned into instants by the DST rules (localtime.py). Matches that land on
  one instant (two in one gap) fire once. Under `Ambiguous.BOTH` the second
  reading of a fold comes an hour after the first, after the matches between
  them: a small heap puts the instants in order.
* `every`: elapsed time, blind to the zone and to DST: `start + k * every`.
  Without a `start` it counts from the Unix epoch (1970-01-01T00:00:00Z), so
  "every 15m" fires at :00, :15, :30 and :45, "every 1h" on the hour, on every
  node and after every update or restart, with nothing to store; a start says
  where else to count from.
* `at`: one instant (a naive `at` is a wall-clock time in `tz`, by the rules).

Speed: the firing loop asks each schedule for its next time when it fires;
10,000 schedules each minute must cost the primary little (issue 30's
benchmark). `next_time` costs ~1.5 µs on a cron in UTC, ~3 µs in a zone, ~1 µs
on an `every`: 10,000 in 15 to 40 ms (docs/benchmarks.md, "Schedules: next times").
"""

from __future__ import annotations

import heapq
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from apollo11.scheduler.schedules import localtime, zones
from apollo11.scheduler.schedules.cron import compile_cron
from apollo11.scheduler.schedules.spec import ScheduleSpec

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TICK = timedelta(microseconds=1)
# A later instant can show an earlier wall time only across a fall-back, which moves
# clocks back by 2 h at most: looking a day ahead for one is ample.
_FOLD_HORIZON = timedelta(days=1)


def nominal_times(
    spec: ScheduleSpec,
    after: datetime,
    until: datetime | None = None,
    count: int | None = None,
) -> list[datetime]:
    """The nominal times in (after, until], within the spec's bounds, at most `count`."""
    if until is None and count is None:
        raise ValueError("nominal_times needs until or count: a cron never ends")
    if count is not None and count <= 0:
        return []
    low = _utc(after, "after")
    if spec.start is not None and spec.start > low:
        low = spec.start - _TICK  # strictly after this: the start itself is a nominal time
    high = _utc(until, "until") if until is not None else None
    if spec.end is not None and (high is None or spec.end < high):
        high = spec.end
    if high is not None and high <= low:
        return []
    if spec.every is not None:
        return _every(spec.every, spec.start or EPOCH, low, high, count)
    if spec.at is not None:
        return _at(spec, low, high, count)
    assert spec.cron is not None  # the spec's validator: exactly one of the three
    if spec.tz == zones.UTC_KEY:
        return _cron_utc(spec.cron, low, high, count)
    return _cron_zoned(spec, low, high, count)


def next_time(spec: ScheduleSpec, after: datetime) -> datetime | None:
    """The first nominal time strictly after `after`; None when the schedule is over."""
    found = nominal_times(spec, after, count=1)
    return found[0] if found else None


def _utc(value: datetime, name: str) -> datetime:
    if value.tzinfo is UTC:
        return value
    if value.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime, got {value.isoformat()}")
    return value.astimezone(UTC)


def _every(
    step: timedelta, anchor: datetime, low: datetime, high: datetime | None, count: int | None
) -> list[datetime]:
    # `//` on timedeltas is exact (integer microseconds) and floors below the anchor too.
    moment = anchor + ((low - anchor) // step + 1) * step
    found: list[datetime] = []
    while (count is None or len(found) < count) and (high is None or moment <= high):
        found.append(moment)
        moment += step
    return found


def _at(
    spec: ScheduleSpec, low: datetime, high: datetime | None, count: int | None
) -> list[datetime]:
    assert spec.at is not None
    if spec.at.utcoffset() is not None:
        candidates: tuple[datetime, ...] = (spec.at,)
    else:
        candidates = localtime.instants(
            spec.at, zones.zone(spec.tz), spec.nonexistent, spec.ambiguous
        )
    found = [t for t in candidates if t > low and (high is None or t <= high)]
    return found if count is None else found[:count]


def _cron_utc(expr: str, low: datetime, high: datetime | None, count: int | None) -> list[datetime]:
    # UTC has no DST: wall time is the instant.
    cron = compile_cron(expr)
    found: list[datetime] = []
    wall = low
    while count is None or len(found) < count:
        match = cron.next_after(wall, UTC)
        if match is None or (high is not None and match > high):
            break
        found.append(match)
        wall = match
    return found


def _cron_zoned(
    spec: ScheduleSpec, low: datetime, high: datetime | None, count: int | None
) -> list[datetime]:
    """Walk wall time in `tz`; release an instant once no later match can come before it.

    Wall times are carried as datetimes labelled UTC (`low + offset`): their
    fields are the zone's clock, and `wall - offset` is the instant. On a day
    with no transition (localtime.steady_offset: nearly all) that is all there
    is to it. On the others the rules decide (localtime.resolve), and a match's
    earliest instant, which never decreases along the walk, says which of the
    instants waiting in `pending` are final.

    The walk starts from the wall time `low` shows, or earlier when a fall-back
    is near: a wall time shown again after `low` (a fold's second reading) is
    then not passed over.
    """
    assert spec.cron is not None
    cron = compile_cron(spec.cron)
    zone = zones.zone(spec.tz)
    offset = _offset_at(low, zone)
    wall = low + offset
    if not (
        localtime.steady_offset(zone, wall.date()) == offset
        and localtime.steady_offset(zone, (wall + _FOLD_HORIZON).date()) == offset
    ):
        offset = min(offset, _offset_at(low + _FOLD_HORIZON, zone))
        wall = low + offset
    pending: list[datetime] = []
    found: list[datetime] = []
    while True:
        match = cron.next_after(wall, UTC)
        if match is None:
            _release(pending, None, high, found, count)
            return found
        steady = localtime.steady_offset(zone, match.date())
        if steady is not None and not pending:
            moment = match - steady  # the common case: one instant, final at once
            if high is not None and moment > high:
                return found
            if moment > low and (not found or moment > found[-1]):
                found.append(moment)
                if count is not None and len(found) >= count:
                    return found
            wall = match
            continue
        if steady is not None:
            floor = match - steady
            moments: tuple[datetime, ...] = (floor,)
        else:
            naive = match.replace(tzinfo=None)
            floor, moments = localtime.resolve(naive, zone, spec.nonexistent, spec.ambiguous)
        for moment in moments:
            if moment > low:
                heapq.heappush(pending, moment)
        if _release(pending, floor, high, found, count) or (high is not None and floor > high):
            return found
        wall = match


def _release(
    pending: list[datetime],
    floor: datetime | None,
    high: datetime | None,
    found: list[datetime],
    count: int | None,
) -> bool:
    """Move the instants up to `floor` (all, if None) to `found`; True when done."""
    while pending and (floor is None or pending[0] <= floor):
        moment = heapq.heappop(pending)
        if high is not None and moment > high:
            return True
        if not found or moment > found[-1]:  # two matches on one instant (a gap) fire once
            found.append(moment)
            if count is not None and len(found) >= count:
                return True
    return False


def _offset_at(moment: datetime, zone: ZoneInfo) -> timedelta:
    offset = moment.astimezone(zone).utcoffset()
    assert offset is not None  # a ZoneInfo always has one
    return offset
