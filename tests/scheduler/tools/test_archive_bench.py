"""The pure parts of `apollo11 bench archive` (scheduler/tools/bench/archive_bench.py)."""

from __future__ import annotations

import os
import subprocess
from types import SimpleNamespace

import pytest

from apollo11.scheduler.tools.bench import archive_bench as ab


def test_pct_is_by_rank_and_none_without_samples() -> None:
    xs = [float(i) for i in range(1, 101)]
    assert ab.pct(xs, 0.5) == 51.0
    assert ab.pct(xs, 0.99) == 100.0
    assert ab.pct([], 0.99) is None


def test_extrapolate_is_linear_to_ten_million() -> None:
    assert ab.extrapolate(2.0, 1_000_000) == 20.0
    assert ab.extrapolate(1.0, 0, to=10) == 10.0


def test_ratio_of_medians_and_none_without_a_baseline() -> None:
    assert ab.ratio([2.0, 3.0, 100.0], [1.0, 2.0, 3.0]) == 1.5
    assert ab.ratio([1.0], []) is None
    assert ab.ratio([1.0], [0.0]) is None


def _result(ratio: float | None, all_10m: float) -> dict:  # type: ignore[type-arg]
    return {"append": {"p99_ratio": ratio}, "restore": {"all_segments_10m_s": all_10m}}


def test_targets_and_what_failed_says() -> None:
    r = _result(1.05, 120.0)
    r["targets"] = ab.targets(r)
    assert r["targets"] == {"append_p99_ratio": True, "restore_10m": True}
    assert ab.failed(r) == ""
    r = _result(None, 301.0)
    r["targets"] = ab.targets(r)
    assert ab.failed(r) == "missed: append_p99_ratio, restore_10m"


def test_flatness_reads_start_peak_end_and_the_steady_level() -> None:
    from apollo11.scheduler.tools.bench import archive_soak as soak

    level = [0, 50, 90, 100, 110, 95, 105, 100, 98, 102]
    r = soak.flatness(level)
    assert (r["start_bytes"], r["max_bytes"], r["end_bytes"]) == (0, 110, 102)
    assert r["steady_bytes"] == 100 and r["flat"] is True
    growing = [10 * i for i in range(1, 21)]
    assert soak.flatness(growing)["flat"] is False
    assert soak.flatness([1, 2, 3]) == {"samples": 3, "flat": False}


def test_the_soak_is_a_target_only_when_it_ran() -> None:
    r = _result(1.05, 120.0)
    r["soak"] = {"flat": False}
    assert ab.targets(r)["disk_flat"] is False
    assert "disk_flat" not in ab.targets(_result(1.05, 120.0))


def test_the_bucket_is_a_target_beside_the_disk_when_the_soak_archived() -> None:
    r = _result(1.05, 120.0)
    r["soak"] = {"flat": True}
    assert "bucket_flat" not in ab.targets(r)
    r["soak"]["bucket"] = {"flat": False}
    assert ab.targets(r)["bucket_flat"] is False


def test_the_bucket_is_flat_when_it_drops_and_does_not_climb() -> None:
    from apollo11.scheduler.tools.bench import archive_soak as soak

    # retention's steps: down to well below the level at the end is flat
    saw = [0, 100, 300, 500, 300, 600, 400, 550, 300, 600, 500, 250]
    r = soak.bucket_flatness(saw, expired=12)
    assert r["end_over_steady"] < 0.75 and r["flat"] is True
    assert soak.flatness(saw)["flat"] is False, "the disk's two-sided test would fail it"
    # nothing dropped: a bucket that grows slowly is not flat, whatever its shape
    slow = [0, 400, 800, 1000, 1200, 1300, 1400, 1500, 1550, 1600, 1650, 1700]
    assert soak.flatness(slow)["flat"] is True
    assert soak.bucket_flatness(slow, expired=0)["flat"] is False
    growing = [10 * i for i in range(1, 21)]
    assert soak.bucket_flatness(growing, expired=5)["flat"] is False
    assert soak.bucket_flatness([1, 2], expired=1) == {"samples": 2, "flat": False}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: nothing to pin apart")
def test_pinned_the_bucket_and_the_bench_share_no_cpu() -> None:
    cpus = os.sched_getaffinity(0)
    bucket = subprocess.Popen(["sleep", "30"])
    try:
        said = ab._pin_apart(SimpleNamespace(proc=bucket), cpus)  # type: ignore[arg-type]
        assert os.sched_getaffinity(bucket.pid) == {max(cpus)} == set(said["bucket"])
        assert os.sched_getaffinity(0) == cpus - {max(cpus)} == set(said["bench"])
    finally:
        os.sched_setaffinity(0, cpus)
        bucket.kill()
        bucket.wait()


def test_with_one_cpu_nothing_is_moved() -> None:
    said = ab._pin_apart(SimpleNamespace(proc=None), {0})  # type: ignore[arg-type]
    assert said == {"bucket": [0], "bench": [0]}
