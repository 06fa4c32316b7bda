"""An idle cluster leaves etcd alone (issue 19, item 4): member records are written
when they change (and kept alive by their lease), the role loops wait on a watch
instead of reading ten times a second; a failover is seen as fast as before."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from apollo11.lease.local_etcd import LocalEtcd
from apollo11.scheduler.client import SyncClient
from tests.cluster import TTL, Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.etcd, pytest.mark.slow]

# 10 s in the suite; docs/benchmarks.md's figure is a minute (APOLLO11_TEST_IDLE_S=60)
IDLE_S = float(os.environ.get("APOLLO11_TEST_IDLE_S", "10"))


@pytest.fixture
def cluster(tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str) -> Iterator[Cluster]:
    c = Cluster.create(tmp_path, etcd_server.url, cluster_name)
    c.start()
    yield c
    c.stop()


def _writes(etcd: LocalEtcd, cluster: str, seconds: float) -> int:
    """The writes under this cluster's keys in `seconds` (a watch: etcd's revision is
    the whole store's, which other tests' clusters on the shared etcd move too)."""
    import aetcd

    async def go() -> int:
        host, port = etcd.url.removeprefix("http://").split(":")
        prefix = f"/apollo11/{cluster}/".encode()
        n = 0
        async with aetcd.Client(host=host, port=int(port)) as client:
            watch = await client.watch(prefix, range_end=prefix[:-1] + b"0")

            async def count() -> None:
                nonlocal n
                async for _ in watch:
                    n += 1

            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(count(), seconds)
        return n

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
    writes = _writes(etcd_server, cluster_name, IDLE_S)
    print(f"etcd revisions in {IDLE_S:g} idle seconds, 3 nodes: {writes}")
    assert writes <= IDLE_S, f"{writes} etcd writes in {IDLE_S:g} idle seconds"
    # and a failover is still seen at once: the standbys wake on the leader key's end
    killed = time.monotonic()
    old.signal(signal.SIGKILL)
    new = cluster.primary(exclude=old.node_id, timeout=30)
    took = time.monotonic() - killed
    print(f"new primary {new.node_id} after {took:.2f} s (TTL {TTL:g} s)")
    assert took < TTL + 5
