"""Durations as people write them for schedules: "90s", "15m", "1h30m", "2d".

A tiny strict grammar rather than a library: whole days, hours, minutes and
seconds, in that order, each at most once, no spaces, no signs, no fractions.
The nearest libraries answer other questions: isodate and pydantic read
ISO-8601's "PT1H30M"; pytimeparse (last released 2018) and its fork take
"1.2 mins", "4:13" and "5 hrs, 3 secs" alike and return a float; none of them
says why "1h30" is wrong. A schedule needs no finer unit than
a second: its cron fires on minutes and its log keeps milliseconds.

`format_duration` writes the one canonical spelling (largest units first, zero
parts left out, "0s" for nothing), so a spec stored in the log reads back to
the same text: `format_duration(parse_duration(s))` is `s` once canonical, and
`parse_duration(format_duration(d)) == d` for every whole-second `d`.
"""

from __future__ import annotations

import re
from datetime import timedelta

_UNITS = (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1))
_GRAMMAR = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
# Python's timedelta stops at 999,999,999 days; a schedule has no use for more than a
# century, and a bound keeps "99999999999d" an error with a reason, not an OverflowError.
MAX = timedelta(days=36_525)
EXAMPLES = "like 90s, 15m, 1h30m or 2d"


def parse_duration(text: str) -> timedelta:
    """`text` as a duration; ValueError says why not (the caller names the field)."""
    match = _GRAMMAR.fullmatch(text)
    if not text or match is None:
        raise ValueError(f"not a duration ({EXAMPLES})")
    seconds = sum(
        int(part) * size for part, (_, size) in zip(match.groups(), _UNITS, strict=True) if part
    )
    if seconds > MAX.total_seconds():
        raise ValueError(f"longer than {format_duration(MAX)}")
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """The canonical spelling of a whole-second, non-negative duration."""
    if value < timedelta(0) or value.microseconds:
        raise ValueError(f"{value!r} is not a whole number of seconds >= 0")
    left = value.days * 86_400 + value.seconds
    parts = []
    for unit, size in _UNITS:
        count, left = divmod(left, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"
