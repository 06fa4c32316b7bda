"""An idle cluster leaves etcd alone (issue 19, item 4): member records are written
when they change (and kept alive by their lease), the role loops wait on a watch
instead of reading ten times a second; a failover is seen as fast as before."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from apollo11.lease import EtcdLease
from apollo11.lease.local_etcd import LocalEtcd
from apollo11.scheduler.client import SyncClient
from tests.cluster import TTL, Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.etcd, pytest.mark.slow]

IDLE_S = 10.0


@pytest.fixture
def cluster(tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str) -> Iterator[Cluster]:
    c = Cluster.create(tmp_path, etcd_server.url, cluster_name)
    c.start()
    yield c
    c.stop()


def _revision(etcd: LocalEtcd, cluster: str) -> int:
    async def go() -> int:
        lease = EtcdLease([etcd.url], cluster=cluster, ttl_s=TTL)
        try:
            return (await lease.world()).revision
        finally:
            await lease.close()

    return asyncio.run(go())


def test_an_idle_cluster_writes_at_most_once_a_second_to_etcd(
    cluster: Cluster, etcd_server: LocalEtcd, cluster_name: str
) -> None:
    old = cluster.primary()
    cluster.wait_converged()
    with SyncClient(cluster.endpoints) as c:
        c.wait(c.submit("etl", {"step_seconds": 0}).task_id, timeout=60)
    cluster.wait_converged()
    time.sleep(2)  # the last records of the run settle
    before = _revision(etcd_server, cluster_name)
    time.sleep(IDLE_S)
    writes = _revision(etcd_server, cluster_name) - before
    print(f"etcd revisions in {IDLE_S:g} idle seconds, 3 nodes: {writes}")
    assert writes <= IDLE_S, f"{writes} etcd writes in {IDLE_S:g} idle seconds"
    # and a failover is still seen at once: the standbys wake on the leader key's end
    killed = time.monotonic()
    old.signal(signal.SIGKILL)
    new = cluster.primary(exclude=old.node_id, timeout=30)
    took = time.monotonic() - killed
    print(f"new primary {new.node_id} after {took:.2f} s (TTL {TTL:g} s)")
    assert took < TTL + 5
