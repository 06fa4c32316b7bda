"""The schedules bench measures every mix, and its mixed specs are what it says."""

from __future__ import annotations

import pytest

from apollo11.scheduler.tools.bench import schedules_bench


def test_every_row_is_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(schedules_bench, "N", 20)
    results = schedules_bench.run()
    assert list(results) == ["every", "cron UTC", "cron zoned", "mixed", "decide"]
    assert all(row["warm_ms"] > 0 and row["each_us"] > 0 for row in results.values())


def test_the_mix_is_distinct_crons_over_the_zones() -> None:
    mixed = schedules_bench.mixes()["mixed"]
    assert len(mixed) == schedules_bench.N
    assert len({s.cron for s in mixed}) > schedules_bench.N // 4
    assert {s.tz for s in mixed} == set(schedules_bench.ZONES)
