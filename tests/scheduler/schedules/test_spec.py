"""ScheduleSpec: every refusal names the field, the value and why; JSON reads back the same."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from apollo11.scheduler.schedules import (
    DEFAULT_CATCHUP_WINDOW,
    Ambiguous,
    Nonexistent,
    Overlap,
    ScheduleSpec,
    explain,
)


def refusal(**fields: Any) -> str:
    with pytest.raises(ValidationError) as refused:
        ScheduleSpec(**fields)
    return explain(refused.value)


@pytest.mark.parametrize(
    ("fields", "sentence"),
    [
        ({"cron": "61 * * * *"}, 'cron "61 * * * *": minute 61 is outside 0-59'),
        (
            {"cron": "0 0 30 2 *"},
            'cron "0 0 30 2 *": day-of-month 30 never comes in the months given',
        ),
        (
            {"cron": "@reboot"},
            'cron "@reboot": unknown alias (known: @yearly, @annually, '
            "@monthly, @weekly, @daily, @midnight, @hourly)",
        ),
        (
            {"cron": "* * * *"},
            'cron "* * * *": needs 5 fields (minute hour day-of-month month '
            "day-of-week) or an alias such as @daily, got 4",
        ),
        ({"cron": 5}, 'cron 5: must be a string such as "0 3 * * *"'),
        ({"cron": "{x} * * * *"}, 'cron "{x} * * * *": minute "{X}" is not a number'),
        ({"cron": "@daily", "tz": "Mars/Base"}, 'tz "Mars/Base": unknown time zone'),
        ({"cron": "@daily", "tz": "utc"}, 'tz "utc": unknown time zone'),
        ({"cron": "@daily", "tz": "../../etc/passwd"}, 'tz "../../etc/passwd": unknown time zone'),
        (
            {"cron": "@daily", "tz": None},
            'tz None: must be an IANA zone name such as "Europe/Berlin"',
        ),
        ({"every": "0s"}, 'every "0s": must be at least 1s'),
        ({"every": timedelta(0)}, 'every "0s": must be at least 1s'),
        ({"every": "1h30"}, 'every "1h30": not a duration (like 90s, 15m, 1h30m or 2d)'),
        ({"every": 60}, 'every 60: must be a duration such as "15m"'),
        (
            {"every": timedelta(milliseconds=1500)},
            "every 0:00:01.500000: must be a whole number of seconds, at least 0s",
        ),
        (
            {"every": "1m", "jitter": "5x"},
            'jitter "5x": not a duration (like 90s, 15m, 1h30m or 2d)',
        ),
        ({"every": "1m", "catchup_window": "0s"}, 'catchup_window "0s": must be at least 1s'),
        ({"at": "tomorrow"}, 'at "tomorrow": not an ISO-8601 time (like 2025-06-01T03:00:00Z)'),
        (
            {"every": "1m", "start": "2025-01-01T00:00:00"},
            'start "2025-01-01T00:00:00": needs a UTC offset (like Z or +02:00)',
        ),
        (
            {"every": "1m", "end": datetime(2025, 1, 1)},
            'end "2025-01-01T00:00:00": needs a UTC offset (like Z or +02:00)',
        ),
        (
            {"every": "1m", "start": "2025-01-01T00:00:00Z", "end": "2024-01-01T00:00:00+01:00"},
            "end before start (end 2023-12-31T23:00:00Z, start 2025-01-01T00:00:00Z)",
        ),
        ({}, "exactly one of cron, every or at is needed (got none)"),
        (
            {"cron": "@daily", "every": "1m"},
            "exactly one of cron, every or at is needed (got cron and every)",
        ),
        (
            {"cron": "@daily", "every": "1m", "at": "2025-01-01T00:00Z"},
            "exactly one of cron, every or at is needed (got cron and every and at)",
        ),
        (
            {"every": "1m", "overlap": "sometimes"},
            'overlap "sometimes": must be one of skip, '
            "buffer-one, buffer-all, cancel-other, allow-all",
        ),
        ({"every": "1m", "nonexistent": "later"}, 'nonexistent "later": must be one of next, skip'),
        ({"every": "1m", "ambiguous": 2}, "ambiguous 2: must be one of first, last, both"),
        (
            {"at": "2025-10-26T02:30", "ambiguous": "both"},
            'ambiguous "both": an at time fires once (say first or last)',
        ),
        ({"every": "1m", "crn": "x"}, 'unknown field "crn"'),
        (
            {"cron": "61 * * * *", "tz": "Mars/Base"},
            'cron "61 * * * *": minute 61 is outside 0-59; tz "Mars/Base": unknown time zone',
        ),
    ],
)
def test_every_refusal_is_one_sentence_naming_the_field(
    fields: dict[str, Any], sentence: str
) -> None:
    assert refusal(**fields) == sentence


def test_pydantics_own_errors_still_name_where() -> None:
    with pytest.raises(ValidationError) as refused:
        ScheduleSpec.model_validate("not a spec")
    assert explain(refused.value).startswith("spec: input should be")


def test_defaults() -> None:
    spec = ScheduleSpec(cron="0 3 * * *")
    assert (spec.tz, spec.start, spec.end, spec.jitter) == ("UTC", None, None, timedelta(0))
    assert spec.catchup_window == DEFAULT_CATCHUP_WINDOW == timedelta(days=1)
    assert spec.overlap is Overlap.SKIP
    assert spec.nonexistent is Nonexistent.NEXT and spec.ambiguous is Ambiguous.FIRST


def test_bounds_are_kept_in_utc_and_durations_as_timedeltas() -> None:
    spec = ScheduleSpec(every="1h30m", start="2025-01-01T01:00:00+01:00", jitter="90s")
    assert spec.start == datetime(2025, 1, 1, tzinfo=UTC) and spec.start.tzinfo is UTC
    assert spec.every == timedelta(hours=1, minutes=30) and spec.jitter == timedelta(seconds=90)


def test_frozen() -> None:
    spec = ScheduleSpec(cron="0 3 * * *")
    with pytest.raises(ValidationError, match="frozen"):
        spec.cron = "0 4 * * *"


# -- JSON, as the log will store it ----------------------------------------------------

FULL = ScheduleSpec(
    cron="0 3 * * *",
    tz="Europe/Berlin",
    start=datetime(2025, 1, 1, 1, tzinfo=UTC),
    end="2026-01-01T00:00:00+01:00",
    jitter=timedelta(seconds=90),
    catchup_window="120m",
    overlap="buffer-one",
    nonexistent="skip",
    ambiguous="last",
)
# Written by hand: field order as declared, instants in UTC with Z, durations canonical
# ("90s" -> "1m30s", "120m" -> "2h"), cron/every/at that are unset left out.
FULL_JSON = (
    '{"cron":"0 3 * * *","tz":"Europe/Berlin","start":"2025-01-01T01:00:00Z",'
    '"end":"2025-12-31T23:00:00Z","jitter":"1m30s","catchup_window":"2h",'
    '"overlap":"buffer-one","nonexistent":"skip","ambiguous":"last"}'
)


def test_json_is_one_spelling_with_every_field_written() -> None:
    assert FULL.to_json() == FULL_JSON
    assert ScheduleSpec(every="1d").to_json() == (
        '{"every":"1d","tz":"UTC","jitter":"0s","catchup_window":"1d",'
        '"overlap":"skip","nonexistent":"next","ambiguous":"first"}'
    ), "defaults are written: a later default does not change a stored schedule"


@pytest.mark.parametrize(
    "spec",
    [
        FULL,
        ScheduleSpec(every="1h30m", start="2025-01-01T00:00:30Z"),
        ScheduleSpec(at="2025-06-01T03:00:00.250000+02:00"),
        ScheduleSpec(at="2025-10-26T02:30", tz="Europe/Berlin", ambiguous="last"),
    ],
)
def test_json_reads_back_to_the_same_spec_and_the_same_text(spec: ScheduleSpec) -> None:
    text = spec.to_json()
    back = ScheduleSpec.from_json(text)
    assert back == spec
    assert back.to_json() == text
    assert ScheduleSpec.from_json(text.encode()) == spec


def test_a_naive_at_stays_a_wall_clock_time_through_json() -> None:
    spec = ScheduleSpec(at="2025-10-26T02:30", tz="Europe/Berlin")
    assert '"at":"2025-10-26T02:30:00"' in spec.to_json()
    back = ScheduleSpec.from_json(spec.to_json())
    assert back.at is not None and back.at.tzinfo is None


def test_json_from_older_writers_takes_the_defaults() -> None:
    spec = ScheduleSpec.from_json('{"cron":"@daily"}')
    assert spec == ScheduleSpec(cron="@daily")


def test_bad_json_is_refused_with_the_same_sentences() -> None:
    with pytest.raises(ValidationError) as refused:
        ScheduleSpec.from_json('{"every":"0s"}')
    assert explain(refused.value) == 'every "0s": must be at least 1s'
