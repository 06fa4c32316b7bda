"""The node's HTTP side: Prometheus metrics with the names operators alert on."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

from apollo11.lease.local_etcd import free_port
from apollo11.scheduler.client import SyncClient
from tests.nodes import start_node

REQUIRED = [
    "apollo11_log_appends_total",
    "apollo11_log_fsync_batch_events_bucket",
    "apollo11_log_fsync_seconds_bucket",
    "apollo11_scheduler_loop_seconds_bucket",
    "apollo11_step_outcomes_total",
    "apollo11_step_duration_seconds_bucket",
    "apollo11_step_retries_total",
    "apollo11_compensation_backlog",
    "apollo11_promotion_seconds_bucket",
    "apollo11_recovery_seconds",
    "apollo11_role_primary",
    "apollo11_term",
    "apollo11_leader_changes_total",
    "apollo11_active_tasks",
]


def test_metrics_endpoint(tmp_path: Path) -> None:
    http = free_port()
    node = start_node(tmp_path / "d", "--http", f"127.0.0.1:{http}")
    try:
        with SyncClient(node.address) as c:
            sub = c.submit("etl", {"step_seconds": 0, "fail_step": "clean", "fail_times": 1})
            assert c.wait(sub.task_id).state == "SUCCEEDED"
        body = urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=5).read().decode()
        for name in REQUIRED:
            assert name in body, name
        assert "apollo11_role_primary 1.0" in body
        # standalone: no standby is waited for, so "writes blocked" cannot fire
        assert "apollo11_replication_standbys_required 0.0" in body
        assert "apollo11_replication_standbys_connected 0.0" in body
        assert (
            'apollo11_step_outcomes_total{outcome="failed",step="clean",workflow="etl"} 1.0' in body
        )
        assert 'apollo11_step_retries_total{step="clean",workflow="etl"} 1.0' in body
        # the cyclic collections are timed: with the young threshold raised
        # (gctune.py) one small task may not start one, so work until one ran
        young = 0.0
        with SyncClient(node.address) as c:
            for _ in range(40):
                m = re.search(
                    r'^apollo11_gc_pause_seconds_count\{generation="0"\} (\S+)', body, re.M
                )
                assert m is not None, "the GC pause histogram is exported"
                young = float(m.group(1))
                if young > 0:
                    break
                subs = c.submit_many([{"workflow": "etl", "input": {"step_seconds": 0}}] * 100)
                c.wait(subs[-1].task_id)
                body = urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=5).read()
                body = body.decode()
        assert young > 0, "gen-0 collections are timed"
        health = urllib.request.urlopen(f"http://127.0.0.1:{http}/healthz", timeout=5).read()
        assert b'"role":"primary"' in health
    finally:
        assert node.stop() == 0
