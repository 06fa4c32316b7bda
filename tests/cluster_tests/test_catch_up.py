"""Standbys catching up: from nothing, across rotations and snapshots, past retention."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lease.local_etcd import LocalEtcd
from scheduler.client import SyncClient
from tests.cluster import Cluster, segment_digest, segment_files

pytestmark = [pytest.mark.cluster, pytest.mark.etcd, pytest.mark.slow]

SMALL = {
    "APOLLO11_SNAPSHOT_INTERVAL": "50",
    "APOLLO11_SNAPSHOT_MIN_INTERVAL": "0",
    "APOLLO11_SEGMENT_MAX_BYTES": "4096",
}


def _submit(c: Cluster, n: int) -> list[str]:
    with SyncClient(c.endpoints) as client:
        ids = [client.submit("etl", {"step_seconds": 0}).task_id for _ in range(n)]
        for t in ids:
            assert client.wait(t).state == "SUCCEEDED"
    return ids


@pytest.fixture
def small(
    tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str, request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    env = dict(SMALL)
    env.update(getattr(request, "param", {}))
    c = Cluster.create(tmp_path, etcd_server.url, cluster_name, env=env)
    c.start()
    yield c
    c.stop()


def test_a_standby_stopped_through_rotations_catches_up_byte_identical(small: Cluster) -> None:
    primary = small.primary()
    small.wait_converged()
    standby = next(m for m in small.members if m.node_id != primary.node_id)
    assert standby.stop() == 0
    _submit(small, 30)  # ~330 events: many segments, several snapshots
    standby.start()
    last = small.wait_converged()
    assert len(list((primary.data_dir / "log").glob("*.seg"))) > 5
    assert segment_files(standby.data_dir) == segment_files(primary.data_dir)
    assert segment_digest(standby.data_dir, last) == segment_digest(primary.data_dir, last)


def test_an_empty_standby_catches_up_by_snapshot_and_tail(small: Cluster) -> None:
    ids = _submit(small, 20)
    primary = small.primary()
    small.wait_converged()
    standby = next(m for m in small.members if m.node_id != primary.node_id)
    assert standby.stop() == 0
    shutil.rmtree(standby.data_dir)
    standby.start()
    small.wait_converged()
    assert "installed snapshot" in standby.log_text()
    logs = sorted((standby.data_dir / "log").glob("*.seg"))
    assert int(logs[0].name[:20]) > 1, "its log starts after the snapshot, not at event 1"
    time.sleep(0.3)
    with SyncClient(standby.address) as c:  # reads on a standby come from its live state
        for t in ids:
            assert c.task(t).state == "SUCCEEDED"
    more = _submit(small, 5)
    small.wait_converged()
    with SyncClient(standby.address) as c:
        assert all(c.task(t).state == "SUCCEEDED" for t in more)


@pytest.mark.parametrize("small", [{"APOLLO11_LOG_RETENTION": "snapshots"}], indirect=True)
def test_a_standby_behind_the_retained_log_gets_a_snapshot(small: Cluster) -> None:
    primary = small.primary()
    small.wait_converged()
    standby = next(m for m in small.members if m.node_id != primary.node_id)
    assert standby.stop() == 0
    _submit(small, 40)
    first_kept = int(sorted((primary.data_dir / "log").glob("*.seg"))[0].name[:20])
    assert first_kept > 10, "the primary dropped the segments its snapshots cover"
    standby.start()
    small.wait_converged()
    assert "installed snapshot" in standby.log_text()
