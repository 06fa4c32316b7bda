"""Zones come from the tzdata wheel alone, and the walk's shortcut holds for all of them."""

from __future__ import annotations

import itertools
import struct
from datetime import UTC, date, datetime, timedelta
from importlib import resources

import pytest

from apollo11.scheduler.schedules import zones
from apollo11.scheduler.schedules.localtime import steady_offset


def test_known_zones_are_the_wheels_list() -> None:
    known = zones.known_zones()
    assert {"UTC", "Europe/London", "America/Sao_Paulo", "Pacific/Chatham"} <= known
    assert len(known) > 400


@pytest.mark.parametrize("key", ["Mars/Base", "utc", "../../etc/passwd", "Europe", "", "zones"])
def test_anything_else_is_unknown(key: str) -> None:
    with pytest.raises(LookupError):
        zones.zone(key)


def test_a_zone_is_read_from_the_wheel_and_kept() -> None:
    berlin = zones.zone("Europe/Berlin")
    assert berlin is zones.zone("Europe/Berlin")
    assert berlin.key == "Europe/Berlin"
    assert datetime(2025, 7, 1, tzinfo=berlin).utcoffset() == timedelta(hours=2)


def _offset_changes(key: str) -> list[tuple[int, int]]:
    """(instant, offset after it) of each explicit transition in the zone's TZif file (v2+
    data; the POSIX rule at its end adds two a year, months apart)."""
    data = resources.files("tzdata.zoneinfo").joinpath(*key.split("/")).read_bytes()
    assert data[:4] == b"TZif"
    isut, isstd, leap, count, types, chars = struct.unpack(">6l", data[20:44])
    second = 44 + count * 5 + types * 6 + chars + leap * 8 + isstd + isut
    isut, isstd, leap, count, types, chars = struct.unpack(">6l", data[second + 20 : second + 44])
    at = second + 44
    instants = struct.unpack(f">{count}q", data[at : at + 8 * count])
    indexes = data[at + 8 * count : at + 9 * count]
    table = at + 9 * count
    offsets = [struct.unpack(">l", data[table + 6 * i : table + 6 * i + 4])[0] for i in indexes]
    changes, previous = [], None
    for instant, offset in zip(instants, offsets, strict=True):
        if offset != previous:  # a new name or isdst alone is no change of the clock
            changes.append((instant, offset))
        previous = offset
    return changes


def test_no_zone_moves_its_clock_twice_within_two_days() -> None:
    # steady_offset looks at a day's two ends only: two changes in one day that cancel
    # out would pass for none. None exist since 1900 in this wheel; a tzdata upgrade
    # that brings one fails here, not in a schedule.
    since_1900 = int(datetime(1900, 1, 1, tzinfo=UTC).timestamp())
    close = []
    for key in sorted(zones.known_zones()):
        changes = [c for c in _offset_changes(key) if c[0] >= since_1900]
        close += [
            (key, a, b) for (a, _), (b, _) in itertools.pairwise(changes) if b - a < 2 * 86_400
        ]
    assert close == []


def test_the_files_read_here_are_the_zones_rules() -> None:
    # The reader above, checked against what zoneinfo makes of the same file.
    changes = dict(_offset_changes("America/Sao_Paulo"))
    instant = int(datetime(2018, 11, 4, 3, tzinfo=UTC).timestamp())  # 00:00 -03 -> 01:00 -02
    assert changes[instant] == -2 * 3600
    assert changes[int(datetime(2019, 2, 17, 2, tzinfo=UTC).timestamp())] == -3 * 3600, (
        "and back at midnight -02 on 2019-02-17, its last"
    )


@pytest.mark.parametrize(
    ("key", "day", "offset"),
    [
        ("Europe/London", date(2018, 10, 27), timedelta(hours=1)),
        ("Europe/London", date(2018, 10, 28), None),  # the fall-back
        ("Europe/London", date(2018, 10, 29), timedelta(0)),
        ("America/Sao_Paulo", date(2018, 11, 3), timedelta(hours=-3)),
        ("America/Sao_Paulo", date(2018, 11, 4), None),  # the gap is its midnight
        ("America/New_York", date(2024, 3, 10), None),
        ("Asia/Kolkata", date(2024, 3, 10), timedelta(hours=5, minutes=30)),
    ],
)
def test_a_steady_day_has_one_offset(key: str, day: date, offset: timedelta | None) -> None:
    assert steady_offset(zones.zone(key), day) == offset
