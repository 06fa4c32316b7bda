"""`apollo11 bench workers` in its smallest configuration: one worker killed mid-step
is found lost by its closed socket, well inside the heartbeat timeout (the full
bench and its figures: docs/bench-history/workers.md, "Dec 1: workers")."""

from __future__ import annotations

from pathlib import Path

import pytest

from apollo11.scheduler.tools.bench import workers_bench


@pytest.mark.slow
@pytest.mark.cluster
def test_a_killed_worker_is_found_lost_and_the_target_is_reported(tmp_path: Path) -> None:
    r = workers_bench.run(True, str(tmp_path), lambda _: None, sections=("lost",), stops=0)
    kills = r["lost"]["kill_detected_s"]
    assert len(kills) == 2, r
    assert max(kills) < workers_bench.HEARTBEAT_TIMEOUT_S, r
    assert r["targets"]["kill_detected_s"]["value"] == max(kills)
    assert dict(workers_bench.summary_rows(r))  # renders
    assert not list(tmp_path.iterdir()), "a run that succeeds leaves nothing behind"


def test_targets_are_met_or_missed_by_the_measured_values() -> None:
    r = {
        "throughput": {"median_vs_embedded": {"remote_2": 0.79}},
        "dispatch": {"remote_2": {"dispatch_p99_ms": 5.0}},
        "lost": {"kill_detected_s": [0.01, 1.2]},
    }
    t = workers_bench.targets(r)
    assert {k: v["met"] for k, v in t.items()} == {
        "remote_2_workers_vs_embedded": False,
        "dispatch_p99_ms": True,
        "kill_detected_s": False,
    }
    assert t["kill_detected_s"]["value"] == 1.2


def test_cpu_time_is_read_from_proc_and_grows_with_work() -> None:
    import os
    import time

    before = workers_bench._cpu_s(os.getpid())
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:  # 0.2 s of this process's CPU
        pass
    spent = workers_bench._cpu_s(os.getpid()) - before
    assert 0.15 <= spent < 5, spent  # clock ticks: 10 ms each


def test_the_throughput_rows_show_each_sides_cpu_a_step() -> None:
    one = {
        k: {
            "tasks_per_s": 1000,
            "vs_embedded": 1.0,
            "loop_lag_p99_ms": 1,
            "scheduling_pass_p99_ms": 1,
            "node_cpu_us_per_step": cpu,
            "workers_cpu_us_per_step": w,
        }
        for k, cpu, w in (
            ("embedded", 74.5, 0.0),
            ("remote_1", 140.0, 36.8),
            ("remote_2", 98.0, 39.1),
            ("remote_4", 110.0, 49.4),
        )
    }
    r = {
        "throughput": {
            "rounds": [one],
            "slots_per_worker": 256,
            "median_vs_embedded": {"remote_1": 1.0, "remote_2": 1.0, "remote_4": 1.0},
        }
    }
    rows = dict(workers_bench.summary_rows(r))
    cpu = next(v for k, v in rows.items() if "CPU a step" in k)
    assert cpu == "74.5 (0.0) µs; 140.0 (36.8) µs; 98.0 (39.1) µs; 110.0 (49.4) µs"
