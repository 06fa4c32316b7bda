"""`apollo11 bench workers` in its smallest configuration: one worker killed mid-step
is found lost by its closed socket, well inside the heartbeat timeout (the full
bench and its figures: docs/benchmarks.md, "Dec 1: workers")."""

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
