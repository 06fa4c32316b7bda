"""Retention on real nodes (issue 34, docs/retention.md): the primary's sweep purges a
finished task past its retention, a held one survives; the purge is in the log, so a
standby drops the same task, and after a restart of every node (snapshot plus replay)
the purged task is still gone, the held one still there, still held."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from apollo11.lease.local_etcd import LocalEtcd
from apollo11.scheduler.client import NotFoundError, SyncClient
from tests.cluster import Cluster, Member

pytestmark = [pytest.mark.cluster, pytest.mark.etcd, pytest.mark.slow]

RETENTION = "SUCCEEDED=4s"


@pytest.fixture
def cluster(tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str) -> Iterator[Cluster]:
    c = Cluster.create(
        tmp_path,
        etcd_server.url,
        cluster_name,
        2,
        "--retention",
        RETENTION,
        "--retention-sweep-interval",
        "1",
        "--snapshot-interval",
        "20",
    )
    c.start()
    c.wait_formed()
    yield c
    c.stop()


def _purged_on(m: Member, task_id: str) -> str | None:
    """The NOT_FOUND message `m` answers for the task; None while it has the task."""
    with SyncClient(m.address, timeout_s=10) as c:
        try:
            c.task(task_id)
        except NotFoundError as e:
            return str(e)
    return None


def _until_purged(m: Member, task_id: str, cluster: Cluster, timeout: float = 90) -> str:
    deadline = time.monotonic() + timeout
    while (why := _purged_on(m, task_id)) is None:
        assert time.monotonic() < deadline, f"{task_id} not purged on {m.node_id}\n" + (
            cluster.tail_logs()
        )
        time.sleep(0.2)
    return why


def test_a_held_task_survives_a_purged_one_is_gone_everywhere_and_after_restart(
    cluster: Cluster,
) -> None:
    primary = cluster.primary()
    standby = next(m for m in cluster.members if m.node_id != primary.node_id)
    with SyncClient(cluster.endpoints, timeout_s=10) as c:
        kept = c.submit("etl", {"step_seconds": 0}).task_id
        c.hold(kept, reason="litigation hold 42")  # at once: before its retention ends
        gone = c.submit("etl", {"step_seconds": 0}).task_id
        assert c.wait(gone, timeout=60).state == "SUCCEEDED"
        assert c.wait(kept, timeout=60).state == "SUCCEEDED"
        # some more history, so that snapshots are taken before and after the purge
        for _ in range(5):
            c.wait(c.submit("etl", {"step_seconds": 0}).task_id, timeout=60)

    why = _until_purged(primary, gone, cluster)
    assert "purged by retention" in why, why
    last = cluster.wait_converged()
    cluster.wait_applied(standby, last)
    assert "purged by retention" in (_purged_on(standby, gone) or ""), "the standby dropped it"
    assert _purged_on(standby, kept) is None
    with SyncClient(standby.address, timeout_s=10) as c:
        assert [t.task_id for t in c.tasks(held=True).tasks] == [kept]
        hold = c.task(kept).held
        assert hold is not None and hold["reason"] == "litigation hold 42" and hold["by"], hold
        assert c.task(kept).held == hold, "the principal the primary recorded, on every node"

    cluster.stop()
    cluster.start()
    cluster.wait_formed()
    for m in cluster.members:
        assert _purged_on(m, gone) is not None, f"{gone} is back on {m.node_id}"
        assert _purged_on(m, kept) is None, f"the held task is gone on {m.node_id}"
    with SyncClient(cluster.endpoints, timeout_s=10) as c:
        assert [t.task_id for t in c.tasks(held=True).tasks] == [kept]
        c.release(kept)
    _until_purged(cluster.primary(), kept, cluster)
