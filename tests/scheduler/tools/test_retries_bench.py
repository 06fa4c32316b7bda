"""The retries bench's pure figures: the worst one-second window, the failing hash,
the jitter's spread, Retry-After's lateness, and which targets a result meets."""

from __future__ import annotations

import pytest

from apollo11.scheduler.tools.bench import retries_bench as rb
from apollo11.scheduler.workflow import Retry


def test_the_worst_second_slides_so_no_bucket_can_hold_more() -> None:
    assert rb.worst_second([]) == 0
    # 500 ms apart: 2 in any second, whichever whole seconds the buckets begin on
    assert rb.worst_second([0, 500, 1000, 1500, 2000]) == 2
    # two bursts straddling a whole second: buckets see 3 and 3, a window sees all 6
    assert rb.worst_second([700, 800, 900, 1100, 1200, 1300]) == 6
    assert rb.worst_second([0, 999, 1000]) == 2  # [t, t + 1000 ms)


def test_a_tenth_of_the_steps_fail_once_and_always_the_same() -> None:
    pairs = [(f"t{i}", f"s{j}") for i in range(2_000) for j in range(1, 6)]
    failing = [p for p in pairs if rb.fails_once(*p)]
    assert len(failing) / len(pairs) == pytest.approx(0.10, abs=0.01)
    assert failing == [p for p in pairs if rb.fails_once(*p)]


def test_the_default_jitter_spreads_a_herd_evenly_but_over_0_4_s_only() -> None:
    seeds = [f"task-{i}:s1" for i in range(1_000)]
    units = rb.jitter_units(Retry(), seeds)
    assert min(units) >= 0 and max(units) <= 1
    assert rb.worst_tenth(units) < 0.13  # even: a tenth of the range holds about a tenth
    table = {(r["backoff_s"], r["jitter"]): r["worst_second"] for r in rb.herd_table(seeds)}
    assert table[(1.0, 0.2)] == 1.0  # 0.8-1.2 s: the whole herd within one second
    assert table[(60.0, 0.2)] > rb.HERD_SHARE_TARGET  # even the cap's 48-72 s misses
    assert table[(rb.PROPOSED.backoff_s, rb.PROPOSED.jitter)] <= rb.HERD_SHARE_TARGET


def test_retry_after_lateness_is_the_start_minus_the_failure_minus_the_ask() -> None:
    e = rb.errors_ms([(1_000, 1_500, 0.5), (1_000, 2_040, 1.0), (0, 2_990, 3.0)])
    assert (e["steps"], e["min_ms"], e["p50_ms"], e["max_ms"]) == (3, -10, 0, 40)
    assert rb.errors_ms([])["max_ms"] is None


def test_a_failures_cost_is_against_a_successful_attempts() -> None:
    # 5,000 attempts, 500 failures: CPU x1.1 is a failure costing one attempt
    assert rb.failure_cost(1.1, 5_000, 500) == pytest.approx(1.0)
    assert rb.failure_cost(1.21, 5_000, 500) == pytest.approx(2.1)
    assert rb.failure_cost(1.0, 5_000, 0) == 0.0
    assert rb.same_cost_ratio(5_000, 500) == pytest.approx(1 / 1.1)
    assert rb.same_cost_ratio(5_000, 0) == 1.0


def _result(share: float, lo: float, hi: float, off: int, ratio: float) -> dict:
    return {
        "herd": {"worst_second_share": share},
        "retry_after": {"steps": 10, "min_ms": lo, "max_ms": hi, "verdicts_not_retry_after": off},
        "throughput": {"ratio": ratio},
    }


def test_targets_are_met_at_their_bounds_and_missed_past_them() -> None:
    ok = _result(0.05, -100, 100, 0, 0.9)
    assert all(rb.targets(ok).values())
    assert rb.failed({"targets": rb.targets(ok)}) is None
    missed = rb.targets(_result(0.051, -101, 0, 0, 0.89))
    assert missed == {"herd": False, "retry_after": False, "throughput": False}
    assert rb.failed({"targets": missed}) == "missed: herd, retry_after, throughput"
    assert not rb.targets(_result(0.05, 0, 0, 1, 0.9))["retry_after"]  # a verdict off
