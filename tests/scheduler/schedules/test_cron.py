"""Cron expressions: cronsim parses them, our walk finds the next wall-clock match.

The walk (cron.py `Cron.next_after`) re-uses what cronsim parsed but not its
iterator, for speed: here it must agree with cronsim's own iterator on any
expression, from any time.
"""

from __future__ import annotations

from datetime import datetime

import pytest
from cronsim import CronSim, CronSimError
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from apollo11.scheduler.schedules.cron import compile_cron, expand


@pytest.mark.parametrize(
    ("alias", "fields"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("@DAILY", "0 0 * * *"),
        (" @hourly ", "0 * * * *"),
    ],
)
def test_aliases_are_vixie_crons(alias: str, fields: str) -> None:
    assert expand(alias) == fields


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("61 * * * *", "minute 61 is outside 0-59"),
        ("* 24 * * *", "hour 24 is outside 0-23"),
        ("0 0 0 * *", "day-of-month 0 is outside 1-31"),
        ("0 0 * 13 *", "month 13 is outside 1-12"),
        ("0 0 * * 8", "day-of-week 8 is outside 0-7"),
        ("1,61 * * * *", "minute 61 is outside 0-59"),
        ("0-70/5 * * * *", "minute 70 is outside 0-59"),
        ("abc * * * *", 'minute "ABC" is not a number'),
        ("0 0 * FOO *", 'month "FOO" is not a number or a name'),
        ("*/0 * * * *", "minute step 0 must be at least 1"),
        ("*/x * * * *", 'minute step "X" is not a number'),
        ("30-10 * * * *", "minute range 30-10 runs backwards"),
        ("0 0 * * FRI-MON", "day-of-week range FRI-MON runs backwards"),
        ("1,,2 * * * *", 'minute "1,,2" has an empty item'),
        ("0 0 30 2 *", "day-of-month 30 never comes in the months given"),
        ("0 0 31 4,6,9,11 *", "day-of-month 31 never comes in the months given"),
        (
            "* * * *",
            "needs 5 fields (minute hour day-of-month month day-of-week) "
            "or an alias such as @daily, got 4",
        ),
        (
            "0 * * * * *",
            "needs 5 fields (minute hour day-of-month month day-of-week) "
            "or an alias such as @daily, got 6",
        ),
        (
            "",
            "needs 5 fields (minute hour day-of-month month day-of-week) "
            "or an alias such as @daily, got 0",
        ),
        (
            "@reboot",
            "unknown alias (known: @yearly, @annually, @monthly, @weekly, @daily, "
            "@midnight, @hourly)",
        ),
    ],
)
def test_a_refused_expression_says_which_value_and_why(expr: str, reason: str) -> None:
    with pytest.raises(ValueError) as refused:
        compile_cron(expr)
    assert str(refused.value) == reason


@pytest.mark.parametrize(
    "expr", ["0 0 L * *", "0 0 LW * *", "0 0 * * MON#2", "0 0 * * 5L", "0 9-17/2 * JAN-MAR MON-FRI"]
)
def test_cronsim_specials_are_accepted(expr: str) -> None:
    compile_cron(expr)


# -- the walk against cronsim's iterator -------------------------------------------------


def _field(low: int, high: int, names: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    number = st.integers(low, high).map(str)
    if names:
        number = number | st.sampled_from(names)
    pair = st.tuples(st.integers(low, high), st.integers(low, high)).map(sorted)
    span = pair.map(lambda p: f"{p[0]}-{p[1]}")
    step = st.integers(1, high - low + 1)
    stepped = st.tuples(st.sampled_from(["*", *map(str, range(low, high + 1))]), step).map(
        lambda p: f"{p[0]}/{p[1]}"
    )
    term = (
        st.just("*")
        | number
        | span
        | stepped
        | pair.flatmap(lambda p: step.map(lambda s: f"{p[0]}-{p[1]}/{s}"))
    )
    return st.lists(term, min_size=1, max_size=3).map(",".join)


DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
EXPRESSIONS = st.tuples(
    _field(0, 59),
    _field(0, 23),
    _field(1, 31) | st.sampled_from(["L", "LW", "*"]),
    _field(1, 12, MONTHS),
    _field(0, 7, DAYS) | st.sampled_from(["MON#1", "FRI#5", "5L", "0L", "*"]) | st.just("*"),
).map(" ".join)
WHEN = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2099, 12, 31))


@settings(max_examples=400, deadline=None)
@given(EXPRESSIONS, WHEN)
def test_the_walk_finds_what_cronsim_finds(expr: str, after: datetime) -> None:
    try:
        library = CronSim(expr, after)
    except CronSimError:
        assume(False)
        raise
    try:
        expected: datetime | None = next(library)
    except StopIteration:
        expected = None
    assert compile_cron(expr).next_after(after) == expected


@pytest.mark.parametrize(
    "expr", ["* * * * *", "0 3 * * *", "0 0 29 2 *", "0 0 * 2 MON#5", "0 0 1,15 * *", "0 0 * * 1"]
)
def test_the_walk_agrees_for_a_year_of_matches(expr: str) -> None:
    library = CronSim(expr, datetime(2023, 12, 31, 23, 59))
    cron = compile_cron(expr)
    moment = datetime(2023, 12, 31, 23, 59)
    for _ in range(200):
        moment_next = cron.next_after(moment)
        assert moment_next == next(library)
        assert moment_next is not None
        moment = moment_next


def test_rare_days_and_the_end_of_the_calendar() -> None:
    # Feb 29th on a Monday, with both fields required (day-of-month starts with "*"):
    # "*/29" is days 1 and 30; February has no 30th, so only the 1st on a Monday.
    cron = compile_cron("0 0 */29 2 MON")
    assert cron.next_after(datetime(2024, 1, 1)) == datetime(2027, 2, 1)
    assert compile_cron("0 0 * * *").next_after(datetime(9998, 12, 31, 23, 59)) is None
    assert compile_cron("0 0 * * *").next_after(datetime(9998, 12, 30)) == datetime(9998, 12, 31)
