"""A wall-clock time in a zone, as the instants it names, by the schedule's DST rules.

Most local times name one instant. Twice a year, in zones with DST, some do not:

* in a gap (spring forward: 02:00 → 03:00 in New York; midnight → 01:00 in
  São Paulo until 2019) a local time names no instant. `Nonexistent.NEXT`
  (the default) fires at the first instant after the gap, which the clock
  shows as the gap's end (03:00; 01:00), like Vixie cron; `SKIP` does not
  fire. Several times in one gap ("*/15 2 * * *") all land on that instant:
  times.py keeps one.
* in a fold (fall back: 02:00 → 01:00 in London) a local time names two
  instants, an hour apart. `Ambiguous.FIRST` (the default) fires at the
  earlier one, once, like Vixie cron; `LAST` at the later; `BOTH` at both.

The rules look at the zone's offsets for the two readings of a time (PEP 495's
fold 0 and 1): equal, one instant; fold 0 ahead, a fold; fold 0 behind, a gap.
zoneinfo gives no transition instants, so a gap's end is found by bisecting the
seconds between the two readings, only in gaps (twice a year at most).
"""

from __future__ import annotations

import functools
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from apollo11.scheduler.schedules.spec import Ambiguous, Nonexistent

_SECOND = timedelta(seconds=1)


def instants(
    local: datetime, zone: ZoneInfo, nonexistent: Nonexistent, ambiguous: Ambiguous
) -> tuple[datetime, ...]:
    """The aware UTC instants at which the naive wall-clock time `local` fires, in order."""
    return resolve(local, zone, nonexistent, ambiguous)[1]


def resolve(
    local: datetime, zone: ZoneInfo, nonexistent: Nonexistent, ambiguous: Ambiguous
) -> tuple[datetime, tuple[datetime, ...]]:
    """`local`'s earliest instant under any rule (a gap's: its end), and its instants.

    The earliest never decreases as `local` grows: to show a later wall time for
    the first time, a clock must show every earlier one that exists. times.py
    relies on it to put the instants of a walk in order.
    """
    before, after = _offsets(local, zone)
    if before == after:
        only = (local - before).replace(tzinfo=UTC)
        return only, (only,)
    if before > after:  # a fold: fold 0 is the earlier reading, in the old (larger) offset
        first, last = (local - before).replace(tzinfo=UTC), (local - after).replace(tzinfo=UTC)
        if ambiguous is Ambiguous.FIRST:
            return first, (first,)
        if ambiguous is Ambiguous.LAST:
            return first, (last,)
        return first, (first, last)
    end = _gap_end(local, zone, before, after)
    return end, (() if nonexistent is Nonexistent.SKIP else (end,))


@functools.lru_cache(maxsize=8_192)  # a zone's days in use: a few per zone at a time
def steady_offset(zone: ZoneInfo, day: date) -> timedelta | None:
    """The zone's one offset all through the wall-clock `day`, or None when a
    transition touches it (a gap or fold anywhere in it, at its midnight too).

    The walk's shortcut: on a steady day a wall time is one instant, `wall -
    offset`, with no question of rules. Two transitions that cancel out within
    one day would pass for none: no zone of tzdata has two within two days
    since 1900 (tests/scheduler/schedules/test_zones.py reads the wheel's files).
    """
    first = datetime(day.year, day.month, day.day)
    last = datetime(day.year, day.month, day.day, 23, 59, 59)
    offsets = {
        zone.utcoffset(first),
        zone.utcoffset(first.replace(fold=1)),
        zone.utcoffset(last),
        zone.utcoffset(last.replace(fold=1)),
    }
    return offsets.pop() if len(offsets) == 1 else None


def _offsets(local: datetime, zone: ZoneInfo) -> tuple[timedelta, timedelta]:
    # ZoneInfo reads only the wall time and fold of a naive datetime: no conversion.
    first = zone.utcoffset(local)
    second = zone.utcoffset(local.replace(fold=1))
    assert first is not None and second is not None  # a ZoneInfo always has an offset
    return first, second


def _gap_end(local: datetime, zone: ZoneInfo, before: timedelta, after: timedelta) -> datetime:
    """The first instant after the gap `local` falls in: the transition itself.

    The gap, in wall time, is [T + before, T + after); so T lies in
    (local - after, local - before]: bisect it to the second.
    """
    low = (local - after).replace(tzinfo=UTC)  # still in the old offset
    high = (local - before).replace(tzinfo=UTC)  # already in the new one
    while high - low > _SECOND:
        middle = low + (high - low) // 2
        if middle.astimezone(zone).utcoffset() == after:
            high = middle
        else:
            low = middle
    return high.replace(microsecond=0)
