"""A spec as the Schedules page says it, and an instant on the schedule's wall clock."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from apollo11.scheduler.schedules import ScheduleSpec, in_words, in_zone, iso

DEFAULTS = "; overlap skip, catch-up 1d"


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        (
            {"cron": "0 3 * * *", "tz": "Europe/Berlin"},
            'daily at 03:00 in Europe/Berlin (cron "0 3 * * *")',
        ),
        ({"cron": "@hourly"}, 'hourly at :00 (cron "@hourly")'),
        ({"cron": "@daily"}, 'daily at 00:00 (cron "@daily")'),
        ({"cron": "@weekly"}, 'Sundays at 00:00 (cron "@weekly")'),
        ({"cron": "@monthly"}, 'monthly on day 1 at 00:00 (cron "@monthly")'),
        ({"cron": "@yearly"}, 'yearly on 1 Jan at 00:00 (cron "@yearly")'),
        ({"cron": "30 2 * * 1"}, 'Mondays at 02:30 (cron "30 2 * * 1")'),
        ({"cron": "0 6 * * 7"}, 'Sundays at 06:00 (cron "0 6 * * 7")'),
        ({"cron": "0 6 * * fri"}, 'Fridays at 06:00 (cron "0 6 * * fri")'),
        ({"cron": "5 4 1 2 *"}, 'yearly on 1 Feb at 04:05 (cron "5 4 1 2 *")'),
        ({"cron": "*/15 * * * *"}, 'every 15 minutes (cron "*/15 * * * *")'),
        ({"cron": "* * * * *"}, 'every minute (cron "* * * * *")'),
        # the shapes it cannot say for sure are given as they are, never guessed at
        ({"cron": "*/7 * * * *"}, 'cron "*/7 * * * *"'),  # :56, then :00: not every 7
        (
            {"cron": "0 9 * * MON-FRI", "tz": "America/New_York"},
            'cron "0 9 * * MON-FRI" in America/New_York',
        ),
        ({"cron": "0 0 L * *"}, 'cron "0 0 L * *"'),
        ({"cron": "0 0 13 * 5"}, 'cron "0 0 13 * 5"'),  # day 13 or any Friday (ORed)
        ({"every": "15m"}, "every 15m"),
        (
            {"at": "2026-03-29T02:30:00", "tz": "Europe/London"},
            "once at 2026-03-29 02:30:00 in Europe/London",
        ),
        ({"at": "2026-03-29T02:30:00+02:00"}, "once at 2026-03-29T00:30:00Z"),
    ],
)
def test_a_spec_in_words_keeps_its_expression(spec: dict[str, Any], said: str) -> None:
    assert in_words(ScheduleSpec(**spec)) == said + DEFAULTS


def test_bounds_jitter_and_the_rules_for_late_and_overlapping_times() -> None:
    spec = ScheduleSpec(
        every="1h",
        start="2026-01-01T00:00:00Z",
        end="2026-12-31T00:00:00Z",
        jitter="30s",
        overlap="buffer-one",
        catchup_window="10m",
    )
    assert in_words(spec) == (
        "every 1h, counted from 2026-01-01T00:00:00Z, until 2026-12-31T00:00:00Z, "
        "jitter up to 30s; overlap buffer-one, catch-up 10m"
    )
    cron = ScheduleSpec(cron="@daily", start="2026-01-01T00:00:00+01:00")
    assert in_words(cron) == 'daily at 00:00 (cron "@daily"), from 2025-12-31T23:00:00Z' + DEFAULTS


def test_an_instant_on_the_zones_wall_clock_across_dst() -> None:
    spec = ScheduleSpec(cron="0 3 * * *", tz="Europe/Berlin")
    summer = datetime(2026, 7, 1, 1, 0, tzinfo=UTC)
    winter = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)
    assert in_zone(summer, spec).strftime("%H:%M %Z") == "03:00 CEST"
    assert in_zone(winter, spec).strftime("%H:%M %Z") == "03:00 CET"
    assert iso(datetime(2026, 7, 1, 3, 0, 0, 999_999, tzinfo=in_zone(summer, spec).tzinfo)) == (
        "2026-07-01T01:00:00Z"
    )
