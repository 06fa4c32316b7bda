"""Jitter: a hash of (schedule, nominal time), the same on every node and process."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apollo11.scheduler.schedules import jitter_for

NOMINAL = datetime(2025, 1, 1, 3, tzinfo=UTC)  # 1,735,700,400 s after the epoch
FIVE_MINUTES = timedelta(minutes=5)


def test_the_same_value_as_computed_once_outside_this_code() -> None:
    # Worked out once with hashlib alone: blake2b(b"nightly-etl\0" + b"1735700400000000",
    # digest_size=8), big-endian, modulo 300,000 ms = 20,262 ms; the next day's
    # (…786800000000) 54,647 ms; another schedule at the same time 232,634 ms.
    assert jitter_for("nightly-etl", NOMINAL, FIVE_MINUTES) == timedelta(milliseconds=20_262)
    next_day = NOMINAL + timedelta(days=1)
    assert jitter_for("nightly-etl", next_day, FIVE_MINUTES) == timedelta(milliseconds=54_647)
    assert jitter_for("reports", NOMINAL, FIVE_MINUTES) == timedelta(milliseconds=232_634)


def test_the_zone_an_instant_is_written_in_does_not_matter() -> None:
    in_tokyo = NOMINAL.astimezone(ZoneInfo("Asia/Tokyo"))
    assert jitter_for("nightly-etl", in_tokyo, FIVE_MINUTES) == jitter_for(
        "nightly-etl", NOMINAL, FIVE_MINUTES
    )


@pytest.mark.parametrize("seed", ["0", "12345"])
def test_the_same_in_another_process_whatever_its_hash_seed(seed: str) -> None:
    code = (
        "from datetime import datetime, timedelta, UTC\n"
        "from apollo11.scheduler.schedules import jitter_for\n"
        "print(jitter_for('nightly-etl', datetime(2025, 1, 1, 3, tzinfo=UTC),"
        " timedelta(minutes=5)) // timedelta(milliseconds=1))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": seed}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=True)
    assert run.stdout.decode().strip() == "20262"


def test_no_jitter_is_none_and_a_millisecond_of_it_is_zero() -> None:
    assert jitter_for("s", NOMINAL, timedelta(0)) == timedelta(0)
    assert jitter_for("s", NOMINAL, timedelta(milliseconds=1)) == timedelta(0)


@given(
    st.text(max_size=40),
    st.datetimes(
        min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
    ),
    st.integers(min_value=1, max_value=86_400).map(lambda s: timedelta(seconds=s)),
)
def test_in_range_whole_milliseconds(
    schedule_id: str, nominal: datetime, jitter: timedelta
) -> None:
    value = jitter_for(schedule_id, nominal, jitter)
    assert timedelta(0) <= value < jitter
    assert value % timedelta(milliseconds=1) == timedelta(0)


def test_schedules_sharing_a_minute_spread_over_the_window() -> None:
    values = [jitter_for(f"s{i}", NOMINAL, timedelta(seconds=60)) for i in range(1000)]
    per_10s = [
        sum(1 for v in values if timedelta(seconds=b * 10) <= v < timedelta(seconds=b * 10 + 10))
        for b in range(6)
    ]
    # a uniform spread puts ~167 in each tenth of the window; a stuck hash puts all in one
    assert all(120 <= n <= 215 for n in per_10s), per_10s


def test_a_naive_nominal_time_is_refused() -> None:
    with pytest.raises(ValueError, match="must be aware"):
        jitter_for("s", datetime(2025, 1, 1), FIVE_MINUTES)
