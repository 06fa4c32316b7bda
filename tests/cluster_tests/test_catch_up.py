"""Standbys catching up: from nothing, across rotations and snapshots, past retention."""

from __future__ import annotations

import shutil
import signal
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from apollo11.lease.local_etcd import LocalEtcd
from apollo11.replicator.sender import MAX_IN_FLIGHT
from apollo11.scheduler.client import SyncClient
from tests.cluster import SMALL, Cluster, Member, segment_digest, segment_files, submit_and_wait

pytestmark = [pytest.mark.cluster, pytest.mark.etcd, pytest.mark.slow]


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
    submit_and_wait(small, 30)  # ~330 events: many segments, several snapshots
    standby.start()
    last = small.wait_converged()
    assert len(list((primary.data_dir / "log").glob("*.seg"))) > 5
    assert segment_files(standby.data_dir) == segment_files(primary.data_dir)
    assert segment_digest(standby.data_dir, last) == segment_digest(primary.data_dir, last)


def test_an_empty_standby_catches_up_by_snapshot_and_tail(small: Cluster) -> None:
    ids = submit_and_wait(small, 20)
    primary = small.primary()
    small.wait_converged()
    standby = next(m for m in small.members if m.node_id != primary.node_id)
    assert standby.stop() == 0
    shutil.rmtree(standby.data_dir)
    standby.start()
    last = small.wait_converged()
    assert "installed snapshot" in standby.log_text()
    logs = sorted((standby.data_dir / "log").glob("*.seg"))
    assert int(logs[0].name[:20]) > 1, "its log starts after the snapshot, not at event 1"
    small.wait_applied(standby, last)  # reads on a standby come from its live state
    with SyncClient(standby.address) as c:
        for t in ids:
            assert c.task(t).state == "SUCCEEDED"
    more = submit_and_wait(small, 5)
    small.wait_applied(standby, small.wait_converged())
    with SyncClient(standby.address) as c:
        assert all(c.task(t).state == "SUCCEEDED" for t in more)


@pytest.mark.parametrize("small", [{"APOLLO11_LOG_RETENTION": "snapshots"}], indirect=True)
def test_a_standby_behind_the_retained_log_gets_a_snapshot(small: Cluster) -> None:
    primary = small.primary()
    small.wait_converged()
    standby = next(m for m in small.members if m.node_id != primary.node_id)
    assert standby.stop() == 0
    submit_and_wait(small, 40)
    first_kept = int(sorted((primary.data_dir / "log").glob("*.seg"))[0].name[:20])
    assert first_kept > 10, "the primary dropped the segments its snapshots cover"
    standby.start()
    small.wait_converged()
    assert "installed snapshot" in standby.log_text()


def _shipped(primary: Member, standby: str) -> tuple[float, float]:
    """(batches, events) the primary has shipped to `standby`, from its /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{primary.http_port}/metrics") as r:
        text = r.read().decode()
    got = {"count": 0.0, "sum": 0.0}
    for family in text_string_to_metric_families(text):
        if family.name == "apollo11_replication_batch_events":
            for s in family.samples:
                if s.labels.get("standby") == standby and s.name.endswith(("_count", "_sum")):
                    got[s.name.rsplit("_", 1)[1]] = s.value
    return got["count"], got["sum"]


def test_a_stopped_standby_gets_a_few_batches_in_flight_then_all_at_once(
    web_cluster: Cluster,
) -> None:
    c = web_cluster
    primary = c.primary()
    c.wait_converged()
    slow = next(m for m in c.members if m.node_id != primary.node_id)
    before = _shipped(primary, slow.node_id)
    slow.signal(signal.SIGSTOP)
    try:
        submit_and_wait(c, 20)  # acknowledged through the other standby meanwhile
        during = _shipped(primary, slow.node_id)
    finally:
        slow.signal(signal.SIGCONT)
    last = c.wait_converged()
    after = _shipped(primary, slow.node_id)
    assert during[0] - before[0] <= MAX_IN_FLIGHT, "no queue behind a standby not acking"
    assert after[0] - during[0] <= 3, "what it missed comes in one batch, not one per write"
    assert after[1] - before[1] >= 20 * 11, "every event of the 20 tasks was shipped to it"
    assert segment_digest(slow.data_dir, last) == segment_digest(primary.data_dir, last)
