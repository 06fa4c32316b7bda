"""Durations as schedules write them: "90s", "1h30m", "2d", and one spelling back."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apollo11.scheduler.schedules import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("15m", 15 * 60),
        ("1h30m", 3600 + 30 * 60),
        ("2d", 2 * 86_400),
        ("1d2h3m4s", 86_400 + 2 * 3600 + 3 * 60 + 4),
        ("0s", 0),
        ("120m", 7200),  # not canonical, but plain
    ],
)
def test_parses_days_hours_minutes_seconds(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    "text",
    ["", "1h30", "30", "1.5h", "1w", "PT1H", "-5m", " 5m", "5m ", "1m1h", "1h1h", "5M", "5 m"],
)
def test_refuses_anything_else(text: str) -> None:
    with pytest.raises(ValueError, match=r"not a duration \(like 90s, 15m, 1h30m or 2d\)"):
        parse_duration(text)


def test_refuses_more_than_a_century_with_a_reason() -> None:
    with pytest.raises(ValueError, match="longer than 36525d"):
        parse_duration("99999999999d")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (90, "1m30s"), (5400, "1h30m"), (86_400, "1d"), (90_061, "1d1h1m1s")],
)
def test_formats_one_canonical_spelling(seconds: int, text: str) -> None:
    assert format_duration(timedelta(seconds=seconds)) == text


def test_format_refuses_what_the_grammar_cannot_say() -> None:
    with pytest.raises(ValueError, match="whole number of seconds"):
        format_duration(timedelta(milliseconds=1500))
    with pytest.raises(ValueError, match="whole number of seconds"):
        format_duration(timedelta(seconds=-1))


@given(st.integers(min_value=0, max_value=36_525 * 86_400))
def test_a_formatted_duration_reads_back_to_itself(seconds: int) -> None:
    value = timedelta(seconds=seconds)
    text = format_duration(value)
    assert parse_duration(text) == value
    assert format_duration(parse_duration(text)) == text
