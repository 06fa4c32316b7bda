"""Schedules, the pure part: when a schedule fires and what becomes of each time.

spec.py        ScheduleSpec (cron | every | at, zone, bounds, jitter, catch-up,
               overlap, DST rules), its JSON, `explain` for a refused one
durations.py   "90s", "1h30m", "2d": parse_duration, format_duration
cron.py        a cron expression, parsed by cronsim, with aliases and reasons
zones.py       IANA zones from the tzdata wheel alone
localtime.py   a wall-clock time as instants, by the DST rules
times.py       nominal_times, next_time: the instants a spec names
jitter.py      jitter_for: a hash of (schedule, nominal time)
occurrence.py  decide: each due time fired, missed, skipped or buffered
declared.py    Schedule: one declared in code, beside its workflow
words.py       in_words: a spec as an operator reads it; in_zone: its wall clock

Nothing here reads a clock, writes an event or imports anything that acts
(pyproject.toml's contract "The pure decisions"): the log-native part (the
events, the fold, the firing loop) calls these with the time and the log's
watermark. Import from here, not from the modules inside.
"""

from apollo11.scheduler.schedules.declared import Schedule
from apollo11.scheduler.schedules.durations import format_duration, parse_duration
from apollo11.scheduler.schedules.jitter import jitter_for
from apollo11.scheduler.schedules.occurrence import (
    MAX_DECIDED,
    MAX_FIRES,
    Decision,
    Occurrence,
    Outcome,
    decide,
)
from apollo11.scheduler.schedules.spec import (
    DEFAULT_CATCHUP_WINDOW,
    Ambiguous,
    Nonexistent,
    Overlap,
    ScheduleSpec,
    explain,
)
from apollo11.scheduler.schedules.times import EPOCH, next_time, nominal_times
from apollo11.scheduler.schedules.words import in_words, in_zone, iso

__all__ = [
    "DEFAULT_CATCHUP_WINDOW",
    "EPOCH",
    "MAX_DECIDED",
    "MAX_FIRES",
    "Ambiguous",
    "Decision",
    "Nonexistent",
    "Occurrence",
    "Outcome",
    "Overlap",
    "Schedule",
    "ScheduleSpec",
    "decide",
    "explain",
    "format_duration",
    "in_words",
    "in_zone",
    "iso",
    "jitter_for",
    "next_time",
    "nominal_times",
    "parse_duration",
]
