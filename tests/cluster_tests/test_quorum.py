"""A member that missed acknowledged writes must not lead because it came back first.

Every node stops (a power cut, a botched upgrade). The one that comes back first
is the one that was down longest: its log lacks writes the others acknowledged.
Alone, it must not elect itself; once enough members report their positions, the
one furthest ahead leads, and no acknowledged write is lost.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from apollo11.lease.local_etcd import LocalEtcd
from apollo11.scheduler.client import SyncClient
from tests.cluster import TTL, Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.etcd, pytest.mark.slow]


@pytest.fixture
def cluster(tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str) -> Iterator[Cluster]:
    c = Cluster.create(tmp_path, etcd_server.url, cluster_name, 3, "--sync-replicas", "1")
    c.start()
    yield c
    c.stop()


def test_the_stale_member_that_comes_back_first_does_not_lead(cluster: Cluster) -> None:
    primary = cluster.primary()
    cluster.wait_converged()
    stale = next(m for m in cluster.members if m is not primary)
    stale.signal(signal.SIGKILL)  # it misses what follows
    with SyncClient(cluster.endpoints) as c:
        acked = [c.submit("etl", {"step_seconds": 0}).task_id for _ in range(10)]
    for m in cluster.members:
        if m.alive():
            m.signal(signal.SIGKILL)
    stale.start()  # back first, alone
    deadline = time.monotonic() + 60
    while cluster.status(stale) is None:  # up and answering (a loaded machine is slow)
        assert time.monotonic() < deadline, cluster.tail_logs()
        time.sleep(0.1)
    watch = time.monotonic() + 3 * TTL  # it would have elected itself well within this
    while time.monotonic() < watch:
        s = cluster.status(stale)
        assert s is None or s["role"] != "primary", "a stale member elected itself"
        time.sleep(0.1)
    assert "report their position" in stale.log_text(), "it says what it waits for"
    for m in cluster.members:
        if not m.alive():
            m.start()
    new = cluster.primary(timeout=60)
    assert new is not stale, "the members that hold the acknowledged writes lead"
    with SyncClient(new.address) as c:  # (the stale member may still be catching up)
        for t in acked:
            assert c.wait(t).state == "SUCCEEDED", f"acknowledged task {t} was lost"


def test_members_gone_for_good_are_taken_off_the_roster(cluster: Cluster) -> None:
    import json
    import subprocess
    import sys

    from tests.nodes import ROOT

    def roster(*args: str) -> subprocess.CompletedProcess[str]:
        etcd = cluster.etcd_url
        return subprocess.run(
            [sys.executable, "-m", "apollo11.scheduler.cli", "roster", *args,
             "--etcd", etcd, "--cluster", cluster.name],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    cluster.primary()
    cluster.wait_converged()
    got = roster("list", "--json")
    assert got.returncode == 0, got.stderr
    listed = json.loads(got.stdout)
    assert [(r["node_id"], r["live"]) for r in listed] == [("n1", True), ("n2", True), ("n3", True)]
    live = roster("remove", "n2")
    assert live.returncode != 0 and "'n2' is live: stop it before removing it" in live.stderr
    for m in cluster.members:
        m.signal(signal.SIGKILL)
    keep = cluster.members[0]
    keep.start()
    deadline = time.monotonic() + 60
    while "report their position" not in keep.log_text():
        assert time.monotonic() < deadline, cluster.tail_logs()
        time.sleep(0.1)
    assert "one gone for good: apollo11 roster remove ID" in keep.log_text()

    # The dead members' records may still be live for up to a TTL (they vouch for
    # nothing meanwhile); the roster refuses to remove a live one.
    def dead_live() -> bool:
        listed = json.loads(roster("list", "--json").stdout)
        return any(r["live"] for r in listed if r["node_id"] != "n1")

    while dead_live():
        assert time.monotonic() < deadline, "n2's and n3's records never lapsed"
        time.sleep(0.2)
    assert (cluster.status(keep) or {}).get("role") != "primary", "n1 led alone of three"
    for gone in ("n2", "n3"):
        done = roster("remove", gone)
        assert done.returncode == 0, done.stderr
    assert "elections now count 1 member(s)" in done.stdout
    assert cluster.primary(timeout=60) is keep, "alone on the roster, it leads"
