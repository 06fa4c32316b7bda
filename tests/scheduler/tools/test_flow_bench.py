"""The flow bench's pure figures: percentiles, shares against weights, Jain's index,
a rate over a window of the log's clock, and which targets a result meets."""

from __future__ import annotations

import math

import pytest

from apollo11.scheduler.tools.bench import flow_bench as fb


def test_percentile_is_the_nearest_rank() -> None:
    values = list(range(1, 101))
    assert fb.percentile(values, 50) == 50
    assert fb.percentile(values, 99) == 99
    assert fb.percentile(values, 100) == 100
    assert fb.percentile([7], 99) == 7
    assert fb.percentile([], 99) is None


def test_share_errors_are_each_share_against_its_weight() -> None:
    weights = {"a": 1.0, "b": 3.0}
    assert fb.share_errors({"a": 25, "b": 75}, weights) == {"a": 0.0, "b": 0.0}
    errors = fb.share_errors({"a": 50, "b": 50}, weights)
    assert errors["a"] == pytest.approx(1.0)  # twice its share
    assert errors["b"] == pytest.approx(-1 / 3)
    # a value that never started counts, at -100 %
    assert fb.share_errors({"b": 10}, weights)["a"] == -1.0


def test_jain_is_one_when_equal_and_one_over_n_when_one_has_all() -> None:
    assert fb.jain([1.0, 1.0, 1.0, 1.0]) == 1.0
    assert fb.jain([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert fb.jain([1.1, 0.9]) == pytest.approx(4 / (2 * 2.02))


def test_rate_over_a_window_counts_intervals_not_starts() -> None:
    ts = [1_000 + 5 * i for i in range(1_000)]  # 200 a second for 5 s
    r = fb.rate_over(ts, skip_s=1, window_s=2)
    assert r["starts"] == 400
    assert r["per_s"] == pytest.approx(200.0)
    assert fb.rate_over(ts, 0, math.inf)["per_s"] == pytest.approx(200.0)
    assert fb.rate_over([], 0, 1)["per_s"] is None
    assert fb.rate_over([5], 0, 1)["per_s"] is None


def _result(p99: float, ratio: float, worst: float, jain: float, error: float) -> dict:
    return {
        "dispatch": {"limited": {"p99_ms": p99}},
        "throughput": {"ratio": ratio},
        "behind": {"fair": {"within_one_turnover": True}},
        "weighted": {"worst_error": worst, "jain": jain},
        "rate": {"error": error},
    }


def test_targets_are_met_at_their_bounds_and_missed_past_them() -> None:
    assert all(fb.targets(_result(5, 0.9, 0.05, 0.95, -0.02)).values())
    missed = fb.targets(_result(6, 0.89, 0.051, 0.95, 0.021))
    assert not any(v for k, v in missed.items() if k != "one_behind_many")
