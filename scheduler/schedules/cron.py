"""A cron expression: parsed and checked by cronsim, walked here on wall-clock times.

cronsim (pyproject.toml says why this library) is the authority on what an
expression means: it parses the five fields, the names (JAN, MON), ranges,
steps, `L`, `LW`, `MON#2`, `5L`, and Debian's rule that day-of-month and
day-of-week are ORed unless one of them starts with `*`; it refuses a day that
never comes ("0 0 30 2 *"). Two things it leaves to us:

* aliases: `@hourly @daily @midnight @weekly @monthly @yearly @annually`, the
  table below, as Vixie cron defines them (`@reboot` has no time: refused);
* reasons: it says "Bad minute"; `compile_cron` says "minute 61 is outside 0-59".

Walking: a new `CronSim` per question costs ~20 µs (it parses again), and the
firing loop asks for the next time of every schedule each minute. `Cron` keeps
what cronsim parsed (the minute, hour and month sets, its day test) and finds
the next match with two bisections: ~1 µs. It walks naive wall-clock times,
the time zone and its DST rules are times.py's; tests/scheduler/schedules/
test_cron.py checks the walk against cronsim's own iterator.

Only the five standard fields: cronsim's optional seconds field is refused, a
schedule that must fire every few seconds says `every`.
"""

from __future__ import annotations

import calendar
import functools
from bisect import bisect_left
from dataclasses import dataclass
from datetime import date, datetime, timedelta, tzinfo

from cronsim import CronSim, CronSimError

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
# cron's own names, not `calendar`'s (those follow the locale, and start weeks on Monday)
_NAMES: dict[str, tuple[str, ...]] = {
    "month": ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"),
    "day-of-week": ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"),
}
# calendar.monthrange and date.replace cost a microsecond each: the walk counts days itself
_DAYS_IN_MONTH = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_ONE_DAY = timedelta(days=1)
_ONE_MINUTE = timedelta(minutes=1)
# cronsim gives up after 50 years without a match ("0 0 * 2 MON#5" fires every 28);
# the walk does the same, and stops short of datetime's year 9999 either way.
_GIVE_UP_YEARS = 50
_LAST_YEAR = 9998


def expand(expr: str) -> str:
    """The five fields an expression stands for: an alias's, or its own."""
    text = expr.strip()
    return ALIASES.get(text.lower(), text) if text.startswith("@") else text


@dataclass(frozen=True, slots=True, eq=False)
class Cron:
    """One parsed expression; `next_after` is its only question."""

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    months: frozenset[int]
    # Days of the month when they alone decide (day-of-week `*`, no L/W): bisected.
    month_days: tuple[int, ...] | None
    every_day: bool
    sim: CronSim  # its `match_day` for the other day rules (OR, L, LW, #n)

    def next_after(self, after: datetime, tz: tzinfo | None = None) -> datetime | None:
        """The first wall-clock minute strictly after `after`'s that matches, or None
        when none comes within 50 years.

        Only `after`'s fields are read, never its zone; the match is built with
        `tz` (times.py labels wall times UTC: a `datetime.replace` afterwards
        would cost a third of the walk).
        """
        start = after + _ONE_MINUTE  # its seconds are ignored: the next minute's fields
        day, hour, minute = start.date(), start.hour, start.minute
        give_up = min(day.year + _GIVE_UP_YEARS, _LAST_YEAR)
        while day.year <= give_up:
            if day.month not in self.months:
                day = _next_month(day)
                hour = minute = 0
                continue
            if not self.every_day:
                matched = self._day_on_or_after(day)
                if matched is None:
                    day = _next_month(day)
                    hour = minute = 0
                    continue
                if matched != day:
                    day, hour, minute = matched, 0, 0
            at = self._time_on_or_after(hour, minute)
            if at is not None:
                return datetime(day.year, day.month, day.day, at[0], at[1], 0, 0, tz)
            day += _ONE_DAY
            hour = minute = 0
        return None

    def _day_on_or_after(self, day: date) -> date | None:
        """The first matching day of `day`'s month from `day` on, or None."""
        year, month = day.year, day.month
        last = _DAYS_IN_MONTH[month] + (month == 2 and calendar.isleap(year))
        if self.month_days is not None:
            i = bisect_left(self.month_days, day.day)
            if i < len(self.month_days) and self.month_days[i] <= last:
                return date(year, month, self.month_days[i])
            return None
        match_day = self.sim.match_day
        for d in range(day.day, last + 1):
            candidate = date(year, month, d)
            if match_day(candidate):
                return candidate
        return None

    def _time_on_or_after(self, hour: int, minute: int) -> tuple[int, int] | None:
        hours, minutes = self.hours, self.minutes
        i = bisect_left(hours, hour)
        if i < len(hours) and hours[i] == hour:
            j = bisect_left(minutes, minute)
            if j < len(minutes):
                return hour, minutes[j]
            i += 1
        if i < len(hours):
            return hours[i], minutes[0]
        return None


def _next_month(day: date) -> date:
    return date(day.year + 1, 1, 1) if day.month == 12 else date(day.year, day.month + 1, 1)


@functools.lru_cache(maxsize=16_384)  # one entry per distinct expression: schedules share few
def compile_cron(expr: str) -> Cron:
    """`expr` (five fields or an alias) parsed; ValueError says what is wrong with it."""
    text = expand(expr)
    if text.startswith("@"):
        raise ValueError(f"unknown alias (known: {', '.join(ALIASES)})")
    parts = text.split()
    if len(parts) != len(_FIELDS):
        raise ValueError(
            f"needs 5 fields ({' '.join(_FIELDS)}) or an alias such as @daily, got {len(parts)}"
        )
    try:
        # The start is never used: `Cron` walks on its own. A naive one keeps cronsim
        # from its DST quirks, which times.py replaces by the spec's rules.
        sim = CronSim(text, datetime(2000, 1, 1))
    except CronSimError as e:
        raise ValueError(_reason(parts, str(e))) from None
    all_days = set(range(1, 32))
    any_weekday = set(range(7)) <= {d % 7 for d in sim.weekdays if isinstance(d, int)}
    plain_days = all(isinstance(d, int) and d > 0 for d in sim.days)
    return Cron(
        minutes=tuple(sorted(sim.minutes)),
        hours=tuple(sorted(sim.hours)),
        months=frozenset(sim.months),
        month_days=(
            tuple(sorted(sim.days)) if sim.day_and and any_weekday and plain_days else None
        ),
        every_day=sim.day_and and any_weekday and sim.days == all_days,
        sim=sim,
    )


def _reason(parts: list[str], message: str) -> str:
    """Why cronsim refused `parts`, in words that name the value ("Bad minute": which?)."""
    for index, name in enumerate(_FIELDS):
        if message == f"Bad {name}":
            return _field_reason(index, parts[index].upper())
    return message  # not a field's: say what cronsim said


def _field_reason(index: int, text: str) -> str:
    name = _FIELDS[index]
    low, high = _RANGES[index]
    names = _NAMES.get(name, ())
    for term in text.split(","):
        if not term:
            return f'{name} "{text}" has an empty item'
        base, slash, step = term.partition("/")
        if slash:
            if not step.isdigit():
                return f'{name} step "{step}" is not a number'
            if int(step) == 0:
                return f"{name} step 0 must be at least 1"
        if base == "*" or "L" in base or "#" in base:
            continue  # cronsim's specials: its own message below if one is wrong
        ends = base.split("-", 1)
        values = []
        for end in ends:
            if end in names:
                values.append(names.index(end) + (name == "month"))  # JAN is 1, SUN is 0
            elif not end.isdigit():
                kind = " or a name" if names else ""
                return f'{name} "{end}" is not a number{kind}'
            elif not low <= int(end) <= high:
                return f"{name} {int(end)} is outside {low}-{high}"
            else:
                values.append(int(end))
        if len(values) == 2 and values[0] > values[1]:
            return f"{name} range {base} runs backwards"
    if name == "day-of-month":
        return f"day-of-month {text} never comes in the months given"
    return f'{name} "{text}" is not valid'
