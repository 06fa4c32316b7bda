"""etcd itself goes away: the primary must step down within the TTL, and the cluster
elects again once etcd is back, with nothing acknowledged lost."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from apollo11.lease.local_etcd import LocalEtcd
from apollo11.scheduler.client import SyncClient, UnavailableError
from apollo11.scheduler.errors import FailedPreconditionError
from apollo11.scheduler.log import EventLog, EventType
from tests.cluster import TTL, Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.etcd, pytest.mark.slow]


def test_primary_steps_down_without_etcd_and_the_cluster_recovers(tmp_path: Path) -> None:
    etcd = LocalEtcd(tmp_path / "etcd" / "member").start()
    c = Cluster.create(tmp_path / "nodes", etcd.url, "outage")
    (tmp_path / "nodes").mkdir()
    c.start()
    c.wait_formed()  # the takeover's log holds every event from the first
    try:
        primary = c.primary()
        with SyncClient(c.endpoints) as client:
            before = [client.submit("etl", {"step_seconds": 0}).task_id for _ in range(5)]
            for t in before:
                client.wait(t)
        etcd.kill()
        t0 = time.monotonic()
        while True:
            s = c.status(primary)
            if s is not None and s["role"] != "primary":
                break
            assert time.monotonic() - t0 < TTL + 3, "the primary kept acting without its lease"
            time.sleep(0.05)
        stepped_down = time.monotonic() - t0
        assert stepped_down <= TTL, f"stepped down after {stepped_down:.2f}s, TTL {TTL}s"
        with (
            SyncClient(c.endpoints, retries=0, timeout_s=2) as client,
            pytest.raises((UnavailableError, FailedPreconditionError)),
        ):
            client.submit("etl", {"step_seconds": 0})
        etcd.start()
        new = c.primary(timeout=TTL * 5 + 10)
        with SyncClient(c.endpoints) as client:
            after = client.submit("etl", {"step_seconds": 0}).task_id
            assert client.wait(after).state == "SUCCEEDED"
        c.wait_converged()
        log = EventLog.open(new.data_dir, read_only=True)
        submitted = {e.task_id for e in log.read() if e.event_type is EventType.TASK_SUBMITTED}
        log.close_sync()
        assert set(before) | {after} <= submitted
    finally:
        c.stop()
        etcd.stop()
