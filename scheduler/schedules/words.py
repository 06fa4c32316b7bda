"""A schedule as an operator reads it: its spec in words, an instant in its zone.

`in_words(spec)` is one line for a list: "daily at 03:00 in Europe/Berlin (cron
"0 3 * * *"); overlap skip, catch-up 1d". The common cron shapes (a time each
day, each hour, each week, each month, every N minutes; the aliases) are said in
words, and the expression always follows in quotes: words are a reading aid,
the expression is what fires. Any other shape is given as its expression alone,
rather than a sentence that could say it wrong (cronsim, cron.py, is the
authority on what it means).

`in_zone(instant, spec)` is the wall-clock time an instant shows in the
schedule's zone, read from the tzdata wheel as the firing is (zones.py), so the
page shows the local time the schedule fires at, not the host's idea of it.
"""

from __future__ import annotations

from datetime import UTC, datetime

from apollo11.scheduler.schedules import zones
from apollo11.scheduler.schedules.cron import expand
from apollo11.scheduler.schedules.durations import format_duration
from apollo11.scheduler.schedules.spec import ScheduleSpec

_DAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_DAY_NAMES = {d[:3].upper(): i for i, d in enumerate(_DAYS)}


def in_words(spec: ScheduleSpec) -> str:
    """The spec in one line: when it fires, then what it does when late or overlapping."""
    if spec.cron is not None:
        said = _said(expand(spec.cron).split())
        zone = f" in {spec.tz}" if spec.tz != zones.UTC_KEY else ""
        expr = f'cron "{spec.cron.strip()}"'
        when = f"{said}{zone} ({expr})" if said else f"{expr}{zone}"
    elif spec.every is not None:
        # counted from the start, or the epoch: "every 15m" lands on :00, :15, ...
        when = f"every {format_duration(spec.every)}"
        if spec.start is not None:
            when += f", counted from {iso(spec.start)}"
    else:
        assert spec.at is not None  # the spec's validator: exactly one of the three
        if spec.at.utcoffset() is None:
            when = f"once at {spec.at.isoformat(sep=' ')} in {spec.tz}"
        else:
            when = f"once at {iso(spec.at)}"
    parts = [when]
    if spec.start is not None and spec.every is None:
        parts.append(f"from {iso(spec.start)}")
    if spec.end is not None:
        parts.append(f"until {iso(spec.end)}")
    if spec.jitter:
        parts.append(f"jitter up to {format_duration(spec.jitter)}")
    # the rules for a late or an overlapping time, defaults too: they decide what fires
    rules = f"overlap {spec.overlap.value}, catch-up {format_duration(spec.catchup_window)}"
    return f"{', '.join(parts)}; {rules}"


def in_zone(instant: datetime, spec: ScheduleSpec) -> datetime:
    """`instant` (aware) as the wall clock of the spec's zone shows it."""
    return instant.astimezone(zones.zone(spec.tz))


def iso(instant: datetime) -> str:
    """An aware instant in UTC, ISO-8601 with "Z", to the second."""
    return instant.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _said(fields: list[str]) -> str | None:
    """The five fields in words, for the shapes people write most; None for the rest."""
    if len(fields) != 5:
        return None
    minute, hour, dom, month, dow = fields
    if not minute.isdigit():
        n = int(minute[2:]) if minute.startswith("*/") and minute[2:].isdigit() else 0
        # "*/7" is :00, :07 ... :56, then :00 again four minutes on: not "every 7 minutes"
        if n and 60 % n == 0 and fields[1:] == ["*"] * 4:
            return "every minute" if n == 1 else f"every {n} minutes"
        if minute == "*" and fields[1:] == ["*"] * 4:
            return "every minute"
        return None
    if hour == "*":
        return f"hourly at :{int(minute):02d}" if [dom, month, dow] == ["*"] * 3 else None
    if not hour.isdigit():
        return None
    at = f"{int(hour):02d}:{int(minute):02d}"
    if [dom, month, dow] == ["*"] * 3:
        return f"daily at {at}"
    if month != "*":
        if dom.isdigit() and dow == "*" and month.isdigit() and 1 <= int(month) <= 12:
            return f"yearly on {int(dom)} {_MONTHS[int(month) - 1]} at {at}"
        return None
    if dom == "*":
        day = _day(dow)
        return f"{day}s at {at}" if day else None
    if dow == "*" and dom.isdigit():
        return f"monthly on day {int(dom)} at {at}"
    return None


def _day(field: str) -> str | None:
    if field.isdigit() and int(field) <= 7:
        return _DAYS[int(field) % 7]  # 0 and 7 are both Sunday
    i = _DAY_NAMES.get(field.upper())
    return None if i is None else _DAYS[i]
