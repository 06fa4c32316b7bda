"""Cluster-wide settings in etcd (issue 19, item 4): the first node's flags bootstrap
them, every node follows them, `apollo11 config set` changes them for all, a node
with other flags is told, and a new lease TTL applies from the next election."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from apollo11.lease.local_etcd import LocalEtcd
from apollo11.scheduler.client import SyncClient
from tests.cluster import TTL, Cluster, Member
from tests.nodes import cli

pytestmark = [pytest.mark.cluster, pytest.mark.etcd, pytest.mark.slow]


@pytest.fixture
def cluster(tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str) -> Iterator[Cluster]:
    c = Cluster.create(tmp_path, etcd_server.url, cluster_name)
    c.start()
    yield c
    c.stop()


def _until(what: str, check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _said(m: Member, text: str) -> Callable[[], bool]:
    return lambda: text in m.log_text()


def test_every_node_follows_the_cluster_settings_in_etcd(
    cluster: Cluster, etcd_server: LocalEtcd, cluster_name: str
) -> None:
    where = ("--etcd", etcd_server.url, "--cluster", cluster_name)
    primary = cluster.primary()
    shown = cli("config", "show", *where, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == {
        "lease_ttl": TTL,
        "sync_replicas": 1,
        "sync_mode": "strict",
    }
    # a node started with other flags follows the cluster's, and says so
    odd = next(m for m in cluster.members if m is not primary)
    odd.stop()
    i = odd.args.index("--lease-ttl")
    odd.args[i + 1] = "7"
    odd.args += ["--sync-replicas", "0"]
    odd.start()
    _until("the odd node back", lambda: cluster.status(odd) is not None)
    _until(
        "it tells",
        _said(odd, "cluster settings from etcd: lease_ttl 7.0 -> 2.0, sync_replicas 0 -> 1"),
    )
    # a change reaches every node
    bad = cli("config", "set", "sync_mode", "eventually", *where)
    assert bad.returncode == 2 and "sync_mode must be one of strict, relaxed" in bad.stderr
    done = cli("config", "set", "sync_replicas", "2", *where)
    assert done.returncode == 0 and "sync_replicas: 1 -> 2" in done.stdout, done.stderr
    for m in cluster.members:
        _until(f"{m.node_id} to follow", _said(m, "sync_replicas 1 -> 2"))
    with SyncClient(cluster.endpoints) as c:  # both standbys hold each write now
        assert c.wait(c.submit("etl", {"step_seconds": 0}).task_id, timeout=60).state == "SUCCEEDED"
    # a new lease TTL: the standbys take it for their next lease, the primary keeps its own
    assert cli("config", "set", "lease_ttl", "3", *where).returncode == 0
    _until("the primary to hear of it", _said(primary, "applies from the next election"))
    with SyncClient(primary.address) as c:
        assert c.status().lease["ttl_s"] == TTL  # type: ignore[index]
    moved = cli("switchover", "--json", server=cluster.endpoints)
    assert moved.returncode == 0, moved.stderr
    new = cluster.member(json.loads(moved.stdout)["to"])
    with SyncClient(new.address) as c:
        assert c.status().lease["ttl_s"] == 3.0  # type: ignore[index]
