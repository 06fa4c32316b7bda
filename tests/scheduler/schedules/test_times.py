"""Nominal times: tables worked out by hand from the zones' rules, local and UTC side by side.

The DST facts the tables rest on (IANA tzdata):
* America/Sao_Paulo, 2018-11-04: clocks went from 00:00 -03 to 01:00 -02 (03:00Z);
  local midnight that night does not exist.
* Europe/London, 2018-10-28: clocks went back from 02:00 BST (+01) to 01:00 GMT
  (01:00Z); every time from 01:00 to 01:59 occurs twice.
* America/New_York, 2024-03-10: clocks went from 02:00 EST (-05) to 03:00 EDT (-04)
  (07:00Z); 02:00 to 02:59 does not exist.
* Europe/Berlin, 2025-03-30 (01:00Z): 02:00 CET -> 03:00 CEST; 2025-10-26 (01:00Z):
  03:00 CEST -> 02:00 CET.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apollo11.scheduler.schedules import ScheduleSpec, next_time, nominal_times
from apollo11.scheduler.schedules.cron import compile_cron
from apollo11.scheduler.schedules.localtime import instants


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def times(spec: ScheduleSpec, after: str, count: int = 3, **kw: Any) -> list[datetime]:
    return nominal_times(spec, utc(after), count=count, **kw)


def shown(found: list[datetime], zone: str) -> list[str]:
    """Each instant as the zone's clock shows it, with its offset."""
    return [t.astimezone(ZoneInfo(zone)).isoformat(timespec="minutes") for t in found]


def check(found: list[datetime], table: list[tuple[str, str]], zone: str) -> None:
    assert found == [utc(u) for _, u in table]
    assert shown(found, zone) == [local for local, _ in table]
    assert all(t.tzinfo is UTC for t in found)


# -- São Paulo: local midnight does not exist on 2018-11-04 ----------------------------


def test_sao_paulo_midnight_that_does_not_exist_fires_at_the_gaps_end() -> None:
    spec = ScheduleSpec(cron="0 0 * * *", tz="America/Sao_Paulo")
    table = [
        # local                    UTC
        ("2018-11-03T00:00-03:00", "2018-11-03T03:00Z"),
        ("2018-11-04T01:00-02:00", "2018-11-04T03:00Z"),  # 00:00 skipped by the clocks: 01:00
        ("2018-11-05T00:00-02:00", "2018-11-05T02:00Z"),
    ]
    check(times(spec, "2018-11-02T12:00Z"), table, "America/Sao_Paulo")


def test_sao_paulo_half_past_midnight_fires_at_the_gaps_end_not_an_hour_on() -> None:
    # "next existing time": 01:00, the first wall time after the gap, not 00:30 + 1h.
    spec = ScheduleSpec(cron="30 0 * * *", tz="America/Sao_Paulo")
    table = [
        ("2018-11-03T00:30-03:00", "2018-11-03T03:30Z"),
        ("2018-11-04T01:00-02:00", "2018-11-04T03:00Z"),
        ("2018-11-05T00:30-02:00", "2018-11-05T02:30Z"),
    ]
    check(times(spec, "2018-11-02T12:00Z"), table, "America/Sao_Paulo")


def test_sao_paulo_midnight_skipped_by_rule() -> None:
    spec = ScheduleSpec(cron="0 0 * * *", tz="America/Sao_Paulo", nonexistent="skip")
    table = [
        ("2018-11-03T00:00-03:00", "2018-11-03T03:00Z"),
        ("2018-11-05T00:00-02:00", "2018-11-05T02:00Z"),  # no fire on the 4th
        ("2018-11-06T00:00-02:00", "2018-11-06T02:00Z"),
    ]
    check(times(spec, "2018-11-02T12:00Z"), table, "America/Sao_Paulo")


# -- London fall-back: 01:30 occurs twice on 2018-10-28 ---------------------------------


def test_london_fall_back_fires_once_at_the_first_by_default() -> None:
    spec = ScheduleSpec(cron="30 1 * * *", tz="Europe/London")
    table = [
        ("2018-10-27T01:30+01:00", "2018-10-27T00:30Z"),
        ("2018-10-28T01:30+01:00", "2018-10-28T00:30Z"),  # the BST one; not again at 01:30Z
        ("2018-10-29T01:30+00:00", "2018-10-29T01:30Z"),
    ]
    check(times(spec, "2018-10-26T12:00Z"), table, "Europe/London")


def test_london_fall_back_last_by_rule() -> None:
    spec = ScheduleSpec(cron="30 1 * * *", tz="Europe/London", ambiguous="last")
    table = [
        ("2018-10-27T01:30+01:00", "2018-10-27T00:30Z"),
        ("2018-10-28T01:30+00:00", "2018-10-28T01:30Z"),  # the GMT one
        ("2018-10-29T01:30+00:00", "2018-10-29T01:30Z"),
    ]
    check(times(spec, "2018-10-26T12:00Z"), table, "Europe/London")


def test_london_fall_back_both_by_rule() -> None:
    spec = ScheduleSpec(cron="30 1 * * *", tz="Europe/London", ambiguous="both")
    table = [
        ("2018-10-27T01:30+01:00", "2018-10-27T00:30Z"),
        ("2018-10-28T01:30+01:00", "2018-10-28T00:30Z"),
        ("2018-10-28T01:30+00:00", "2018-10-28T01:30Z"),
        ("2018-10-29T01:30+00:00", "2018-10-29T01:30Z"),
    ]
    check(times(spec, "2018-10-26T12:00Z", count=4), table, "Europe/London")


def test_london_both_puts_the_second_pass_after_the_first_in_utc_order() -> None:
    # Wall order is 01:00, 01:30 (each twice); instant order interleaves the two passes.
    spec = ScheduleSpec(cron="*/30 1 * * *", tz="Europe/London", ambiguous="both")
    table = [
        ("2018-10-28T01:00+01:00", "2018-10-28T00:00Z"),
        ("2018-10-28T01:30+01:00", "2018-10-28T00:30Z"),
        ("2018-10-28T01:00+00:00", "2018-10-28T01:00Z"),
        ("2018-10-28T01:30+00:00", "2018-10-28T01:30Z"),
        ("2018-10-29T01:00+00:00", "2018-10-29T01:00Z"),
    ]
    check(times(spec, "2018-10-27T12:00Z", count=5), table, "Europe/London")


def test_london_from_inside_the_fold_the_second_pass_is_still_ahead() -> None:
    # After 00:45Z (01:45 BST) the clock shows 01:00 and 01:30 again, in GMT.
    spec = ScheduleSpec(cron="*/30 1 * * *", tz="Europe/London", ambiguous="both")
    table = [
        ("2018-10-28T01:00+00:00", "2018-10-28T01:00Z"),
        ("2018-10-28T01:30+00:00", "2018-10-28T01:30Z"),
        ("2018-10-29T01:00+00:00", "2018-10-29T01:00Z"),
    ]
    check(times(spec, "2018-10-28T00:45Z"), table, "Europe/London")
    first = ScheduleSpec(cron="*/30 1 * * *", tz="Europe/London")
    assert next_time(first, utc("2018-10-28T00:45Z")) == utc("2018-10-29T01:00Z"), (
        "under first, the GMT pass does not fire"
    )
    last = ScheduleSpec(cron="*/30 1 * * *", tz="Europe/London", ambiguous="last")
    assert next_time(last, utc("2018-10-28T00:45Z")) == utc("2018-10-28T01:00Z")


# -- US spring-forward: 02:30 does not exist on 2024-03-10 ------------------------------


def test_new_york_spring_forward_fires_at_the_next_existing_time() -> None:
    spec = ScheduleSpec(cron="30 2 * * *", tz="America/New_York")
    table = [
        ("2024-03-09T02:30-05:00", "2024-03-09T07:30Z"),
        ("2024-03-10T03:00-04:00", "2024-03-10T07:00Z"),  # 02:30 does not exist: 03:00
        ("2024-03-11T02:30-04:00", "2024-03-11T06:30Z"),
    ]
    check(times(spec, "2024-03-08T12:00Z"), table, "America/New_York")


def test_new_york_spring_forward_skipped_by_rule() -> None:
    spec = ScheduleSpec(cron="30 2 * * *", tz="America/New_York", nonexistent="skip")
    table = [
        ("2024-03-09T02:30-05:00", "2024-03-09T07:30Z"),
        ("2024-03-11T02:30-04:00", "2024-03-11T06:30Z"),
        ("2024-03-12T02:30-04:00", "2024-03-12T06:30Z"),
    ]
    check(times(spec, "2024-03-08T12:00Z"), table, "America/New_York")


def test_new_york_times_that_share_a_gap_fire_once() -> None:
    # 02:00, 02:15, 02:30, 02:45 all become 03:00 EDT: one occurrence, then 03:00 itself
    # is that same instant, and 03:15 follows.
    spec = ScheduleSpec(cron="*/15 2,3 * * *", tz="America/New_York")
    table = [
        ("2024-03-10T03:00-04:00", "2024-03-10T07:00Z"),
        ("2024-03-10T03:15-04:00", "2024-03-10T07:15Z"),
        ("2024-03-10T03:30-04:00", "2024-03-10T07:30Z"),
    ]
    check(times(spec, "2024-03-10T06:00Z"), table, "America/New_York")


# -- leap day, bounds, aliases ---------------------------------------------------------


def test_a_leap_day_fires_in_leap_years_only() -> None:
    spec = ScheduleSpec(cron="0 0 29 2 *")
    assert times(spec, "2023-01-01T00:00Z") == [
        utc("2024-02-29T00:00Z"),
        utc("2028-02-29T00:00Z"),
        utc("2032-02-29T00:00Z"),
    ]
    # 2100 is divisible by 100 and not by 400: no February 29th.
    assert next_time(spec, utc("2096-03-01T00:00Z")) == utc("2104-02-29T00:00Z")


def test_a_leap_day_in_a_zone_is_its_local_midnight() -> None:
    spec = ScheduleSpec(cron="0 0 29 2 *", tz="Asia/Tokyo")  # +09, no DST
    assert next_time(spec, utc("2023-01-01T00:00Z")) == utc("2024-02-28T15:00Z")


def test_start_and_end_are_both_included() -> None:
    spec = ScheduleSpec(cron="0 * * * *", start="2025-01-01T03:00Z", end="2025-01-01T06:00Z")
    everything = [utc(f"2025-01-01T0{h}:00Z") for h in (3, 4, 5, 6)]
    assert times(spec, "2024-12-31T00:00Z", count=10) == everything
    assert times(spec, "2025-01-01T04:00Z", count=10) == everything[2:], "strictly after"
    assert times(spec, "2025-01-01T06:00Z", count=10) == [], "over at its end"
    until = utc("2025-01-01T05:00Z")
    assert nominal_times(spec, utc("2024-12-31T00:00Z"), until=until) == everything[:3]


def test_a_start_between_matches_waits_for_the_next_match() -> None:
    spec = ScheduleSpec(cron="0 * * * *", start="2025-01-01T03:30Z")
    assert next_time(spec, utc("2025-01-01T00:00Z")) == utc("2025-01-01T04:00Z")


def test_bounds_are_instants_whatever_the_zone() -> None:
    # start 2025-06-01T00:00Z is 02:00 in Berlin (CEST): the 01:00 local match is before it.
    spec = ScheduleSpec(cron="0 1,3 * * *", tz="Europe/Berlin", start="2025-06-01T00:00Z")
    table = [
        ("2025-06-01T03:00+02:00", "2025-06-01T01:00Z"),
        ("2025-06-02T01:00+02:00", "2025-06-01T23:00Z"),
    ]
    check(times(spec, "2025-05-01T00:00Z", count=2), table, "Europe/Berlin")


@pytest.mark.parametrize(
    ("alias", "expected"),
    [
        # after Wednesday 2025-01-15 10:20Z
        ("@hourly", "2025-01-15T11:00Z"),
        ("@daily", "2025-01-16T00:00Z"),
        ("@midnight", "2025-01-16T00:00Z"),
        ("@weekly", "2025-01-19T00:00Z"),  # Sunday
        ("@monthly", "2025-02-01T00:00Z"),
        ("@yearly", "2026-01-01T00:00Z"),
        ("@annually", "2026-01-01T00:00Z"),
    ],
)
def test_aliases(alias: str, expected: str) -> None:
    assert next_time(ScheduleSpec(cron=alias), utc("2025-01-15T10:20Z")) == utc(expected)


def test_an_alias_is_read_in_the_zone() -> None:
    spec = ScheduleSpec(cron="@daily", tz="Europe/Berlin")  # midnight CET is 23:00Z
    assert next_time(spec, utc("2025-01-15T10:20Z")) == utc("2025-01-15T23:00Z")


# -- every: elapsed time ---------------------------------------------------------------


def test_every_counts_elapsed_time_across_a_fall_back() -> None:
    # The zone plays no part: one hour apart in UTC, though London's clock shows 01:00 twice.
    spec = ScheduleSpec(every="1h", tz="Europe/London")
    table = [
        ("2018-10-28T01:00+01:00", "2018-10-28T00:00Z"),
        ("2018-10-28T01:00+00:00", "2018-10-28T01:00Z"),
        ("2018-10-28T02:00+00:00", "2018-10-28T02:00Z"),
    ]
    check(times(spec, "2018-10-27T23:30Z"), table, "Europe/London")


def test_every_day_across_a_spring_forward_keeps_24_hours() -> None:
    spec = ScheduleSpec(every="1d", tz="America/New_York", start="2024-03-09T07:00Z")
    table = [
        ("2024-03-09T02:00-05:00", "2024-03-09T07:00Z"),  # the start itself
        ("2024-03-10T03:00-04:00", "2024-03-10T07:00Z"),  # 24 h on: the clock says 03:00
        ("2024-03-11T03:00-04:00", "2024-03-11T07:00Z"),
    ]
    check(times(spec, "2024-03-01T00:00Z"), table, "America/New_York")


def test_every_without_a_start_counts_from_the_epoch() -> None:
    assert times(ScheduleSpec(every="15m"), "2025-01-01T10:07:13Z", count=2) == [
        utc("2025-01-01T10:15Z"),
        utc("2025-01-01T10:30Z"),
    ]
    # 2025-01-01T00:00Z is 1,735,689,600 s after the epoch = 4,132,594 * 420 + 120:
    # seven-minute ticks fell at 23:58:00 and fall next at 00:05:00.
    assert times(ScheduleSpec(every="7m"), "2025-01-01T00:00Z", count=2) == [
        utc("2025-01-01T00:05Z"),
        utc("2025-01-01T00:12Z"),
    ]


def test_every_counts_from_its_start() -> None:
    spec = ScheduleSpec(every="1m", start="2025-01-01T00:00:30Z")
    assert times(spec, "2024-12-31T00:00Z", count=2) == [
        utc("2025-01-01T00:00:30Z"),
        utc("2025-01-01T00:01:30Z"),
    ]
    assert times(spec, "2025-01-01T00:01:30Z", count=1) == [utc("2025-01-01T00:02:30Z")]


def test_every_stops_at_its_end() -> None:
    spec = ScheduleSpec(every="1h", start="2025-01-01T00:00Z", end="2025-01-01T02:30Z")
    assert times(spec, "2024-12-31T00:00Z", count=10) == [
        utc("2025-01-01T00:00Z"),
        utc("2025-01-01T01:00Z"),
        utc("2025-01-01T02:00Z"),
    ]


# -- at: once --------------------------------------------------------------------------


def test_at_fires_once() -> None:
    spec = ScheduleSpec(at="2025-06-01T03:00:00Z")
    assert times(spec, "2025-01-01T00:00Z", count=5) == [utc("2025-06-01T03:00Z")]
    assert times(spec, "2025-06-01T03:00Z", count=5) == [], "not again after it"
    assert next_time(spec, utc("2025-06-01T03:00Z")) is None


def test_at_without_an_offset_is_a_wall_clock_time_in_the_zone() -> None:
    spec = ScheduleSpec(at="2025-06-01T03:00", tz="Europe/Berlin")  # CEST, +02
    assert times(spec, "2025-01-01T00:00Z") == [utc("2025-06-01T01:00Z")]


@pytest.mark.parametrize(
    ("at", "rules", "expected"),
    [
        # 02:30 on 2025-03-30 does not exist in Berlin: 03:00 CEST, 01:00Z
        ("2025-03-30T02:30", {}, ["2025-03-30T01:00Z"]),
        ("2025-03-30T02:30", {"nonexistent": "skip"}, []),
        # 02:30 on 2025-10-26 occurs at 00:30Z (CEST) and 01:30Z (CET)
        ("2025-10-26T02:30", {}, ["2025-10-26T00:30Z"]),
        ("2025-10-26T02:30", {"ambiguous": "last"}, ["2025-10-26T01:30Z"]),
    ],
)
def test_at_follows_the_dst_rules(at: str, rules: dict[str, str], expected: list[str]) -> None:
    spec = ScheduleSpec(at=at, tz="Europe/Berlin", **rules)
    assert times(spec, "2025-01-01T00:00Z") == [utc(u) for u in expected]


# -- the call itself -------------------------------------------------------------------


def test_until_is_included_and_count_caps() -> None:
    spec = ScheduleSpec(cron="*/10 * * * *")
    after, until = utc("2025-01-01T00:00Z"), utc("2025-01-01T00:30Z")
    assert nominal_times(spec, after, until=until) == [
        utc("2025-01-01T00:10Z"),
        utc("2025-01-01T00:20Z"),
        utc("2025-01-01T00:30Z"),
    ]
    assert nominal_times(spec, after, until=until, count=2) == nominal_times(spec, after, count=2)
    assert nominal_times(spec, after, count=0) == []


def test_times_strictly_after_a_time_between_minutes() -> None:
    spec = ScheduleSpec(cron="* * * * *", tz="Europe/Paris")
    assert next_time(spec, utc("2025-01-01T00:00:00.5Z")) == utc("2025-01-01T00:01Z")
    assert next_time(spec, utc("2025-01-01T00:01Z")) == utc("2025-01-01T00:02Z")


def test_the_call_refuses_an_endless_or_naive_question() -> None:
    spec = ScheduleSpec(cron="* * * * *")
    with pytest.raises(ValueError, match="needs until or count"):
        nominal_times(spec, utc("2025-01-01T00:00Z"))
    with pytest.raises(ValueError, match="after must be an aware datetime"):
        nominal_times(spec, datetime(2025, 1, 1), count=1)
    assert next_time(spec, datetime(2025, 1, 1, 1, tzinfo=ZoneInfo("Europe/Paris"))) == utc(
        "2025-01-01T00:01Z"
    ), "an aware after in any zone is that instant"


def test_a_walk_over_a_year_in_a_zone_is_in_order_and_has_each_day() -> None:
    spec = ScheduleSpec(cron="30 1 * * *", tz="Europe/London", ambiguous="both")
    found = times(spec, "2018-01-01T00:00Z", count=366)
    assert found == sorted(set(found)), "strictly increasing"
    days = [t.astimezone(ZoneInfo("Europe/London")).date() for t in found]
    # 365 days of 2018 and one extra fire on 2018-10-28, the fold
    assert len(set(days)) == 365 and found[-1] < utc("2019-01-01T00:00Z")
    assert found[-1] - found[0] < timedelta(days=365)


# -- the walk against every wall time resolved one by one ------------------------------

WALK_ZONES = (
    "Europe/London",
    "America/New_York",
    "America/Sao_Paulo",
    "Australia/Lord_Howe",  # DST of 30 minutes
    "Pacific/Chatham",  # +12:45 / +13:45
    "Asia/Kolkata",  # no DST
)


def _transitions(zone: str) -> list[datetime]:
    """Every hour in 2018 and 2024 whose offset differs from the hour before: found with
    datetime.astimezone alone, not with the code under test."""
    tz = ZoneInfo(zone)
    found = []
    for year in (2018, 2024):
        t = datetime(year, 1, 1, tzinfo=UTC)
        previous = t.astimezone(tz).utcoffset()
        while t.year == year:
            t += timedelta(hours=1)
            offset = t.astimezone(tz).utcoffset()
            if offset != previous:
                found.append(t)
            previous = offset
    return found or [datetime(2024, 6, 1, tzinfo=UTC)]


NEAR = {zone: _transitions(zone) for zone in WALK_ZONES}


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(WALK_ZONES).flatmap(
        lambda zone: st.tuples(
            st.just(zone),
            st.sampled_from(NEAR[zone]),
            # minutes from the transition: often within its hours, where the folds are
            st.integers(-180, 60) | st.integers(-48 * 60, 48 * 60),
        )
    ),
    st.sampled_from(["*/15 * * * *", "30 1 * * *", "0,30 0-3 * * *", "45 * * * *", "@daily"]),
    st.sampled_from(["next", "skip"]),
    st.sampled_from(["first", "last", "both"]),
    st.integers(0, 59),
)
def test_the_walk_is_every_wall_time_resolved_in_order(
    where: tuple[str, datetime, int], expr: str, nonexistent: str, ambiguous: str, second: int
) -> None:
    zone, transition, minutes = where
    after = transition + timedelta(minutes=minutes, seconds=second)
    until = after + timedelta(days=2)
    spec = ScheduleSpec(cron=expr, tz=zone, nonexistent=nonexistent, ambiguous=ambiguous)
    # The reference: every wall-clock match over a wide window, each resolved on its own.
    cron, tz = compile_cron(expr), ZoneInfo(zone)
    wall = (after - timedelta(days=1)).astimezone(tz).replace(tzinfo=None)
    expected: set[datetime] = set()
    while wall < (until + timedelta(days=1)).astimezone(tz).replace(tzinfo=None):
        match = cron.next_after(wall)
        assert match is not None
        rules = (spec.nonexistent, spec.ambiguous)
        expected.update(t for t in instants(match, tz, *rules) if after < t <= until)
        wall = match
    assert nominal_times(spec, after, until=until) == sorted(expected)
