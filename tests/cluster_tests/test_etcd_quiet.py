"""An idle cluster leaves etcd alone (issue 19, item 4): member records are written
when they change (and kept alive by their lease), the role loops wait on a watch
instead of reading ten times a second; a failover is seen as fast as before."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import aetcd
import orjson
import pytest

from apollo11.lease.local_etcd import LocalEtcd
from apollo11.scheduler.client import SyncClient
from tests.cluster import TTL, Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.etcd, pytest.mark.slow]

# Twice the TTL in the suite: long enough that a node which stopped keeping its record
# alive loses it within the window (a delete the watch sees), and a record rewritten
# every cycle (issue 19: 20 writes a second) shows many times over.
# docs/benchmarks.md's figure is a minute (APOLLO11_TEST_IDLE_S=60).
IDLE_S = float(os.environ.get("APOLLO11_TEST_IDLE_S", 2 * TTL))


@pytest.fixture
def cluster(tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str) -> Iterator[Cluster]:
    c = Cluster.create(tmp_path, etcd_server.url, cluster_name)
    c.start()
    yield c
    c.stop()


def _client(etcd: LocalEtcd) -> aetcd.Client:
    host, port = etcd.url.removeprefix("http://").split(":")
    return aetcd.Client(host=host, port=int(port))


def _writes(etcd: LocalEtcd, cluster: str, seconds: float) -> Counter[str]:
    """The writes under this cluster's keys in `seconds`, by kind (PUT, DELETE): a
    watch, since etcd's revision is the whole store's, which other tests' clusters on
    the shared etcd move too."""

    async def go() -> Counter[str]:
        prefix = f"/apollo11/{cluster}/".encode()
        kinds: Counter[str] = Counter()
        async with _client(etcd) as client:
            watch = await client.watch(prefix, range_end=prefix[:-1] + b"0")

            async def count() -> None:
                async for event in watch:
                    kinds[event.kind] += 1

            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(count(), seconds)
        return kinds

    return asyncio.run(go())


def _recorded(etcd: LocalEtcd, cluster: str) -> dict[str, int]:
    """Each member record's last event id, as etcd holds it."""

    async def go() -> dict[str, int]:
        async with _client(etcd) as client:
            got = await client.get_prefix(f"/apollo11/{cluster}/members/".encode())
        records = [orjson.loads(kv.value) for kv in got]
        return {r["node_id"]: r["last_event_id"] for r in records}

    return asyncio.run(go())


def _settle(etcd: LocalEtcd, cluster: str, nodes: int, last: int, timeout: float = 10) -> None:
    """Until every member's record shows the run's end: nothing is left to write."""
    deadline = time.monotonic() + timeout
    while True:
        recorded = _recorded(etcd, cluster)
        if len(recorded) == nodes and set(recorded.values()) == {last}:
            return
        assert time.monotonic() < deadline, f"records {recorded}, the logs end at {last}"
        time.sleep(0.1)


def test_an_idle_cluster_writes_at_most_once_a_second_to_etcd(
    cluster: Cluster, etcd_server: LocalEtcd, cluster_name: str
) -> None:
    old = cluster.primary()
    cluster.wait_converged()
    with SyncClient(cluster.endpoints) as c:
        c.wait(c.submit("etl", {"step_seconds": 0}).task_id, timeout=60)
    _settle(etcd_server, cluster_name, len(cluster.members), cluster.wait_converged())
    kinds = _writes(etcd_server, cluster_name, IDLE_S)
    writes = sum(kinds.values())
    print(f"etcd revisions in {IDLE_S:g} idle seconds, 3 nodes: {writes} {dict(kinds)}")
    assert writes <= IDLE_S, f"{writes} etcd writes in {IDLE_S:g} idle seconds: {kinds}"
    assert not kinds["DELETE"], "a member record lapsed: its node stopped keeping it alive"
    # and a failover is still seen at once: the standbys wake on the leader key's end
    killed = time.monotonic()
    old.signal(signal.SIGKILL)
    new = cluster.primary(exclude=old.node_id, timeout=30)
    took = time.monotonic() - killed
    print(f"new primary {new.node_id} after {took:.2f} s (TTL {TTL:g} s)")
    assert took < TTL + 5
