"""Network cuts, not crashes: each node in its own network namespace.

The primary keeps running through these, and clients can still reach it.
That is where split brain comes from: a primary that does not know it has
been replaced. It must stop acknowledging before its lease can lapse.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from apollo11.lease.local_etcd import LocalEtcd
from apollo11.replicator.hub import STANDBY_SILENCE_S
from apollo11.scheduler.log import EventType
from tests import netns
from tests.cluster import TTL, Cluster, Member, segment_digest, stubborn_client
from tests.cluster_tests.test_failover import (
    Submitter,
    _check_ledger_and_log,
    _final_log,
    _wait_all_done,
)

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.etcd,
    pytest.mark.slow,
    pytest.mark.skipif(netns.available() is not None, reason=str(netns.available())),
]


@pytest.fixture
def net() -> Iterator[netns.Net]:
    n = netns.Net(3).create()
    yield n
    n.destroy()


@pytest.fixture
def etcd(net: netns.Net, tmp_path: Path) -> Iterator[LocalEtcd]:
    server = LocalEtcd(tmp_path / "etcd" / "member", host=net.host_ip).start()
    yield server
    server.stop()


@pytest.fixture
def cluster(net: netns.Net, etcd: LocalEtcd, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster.create(
        tmp_path,
        etcd.url,
        "partition",
        hosts=net.ips,
        wraps=[net.wrap(i) for i in range(3)],
    )
    try:
        # n1 first, so that the test knows which namespace holds the primary
        c.members[0].start()
        assert c.primary(timeout=60).node_id == "n1", c.tail_logs()
        for m in c.members[1:]:
            m.start()
        _wait_connected(c, c.members[0], 2)
        yield c
    finally:
        c.stop()


def _wait_connected(c: Cluster, primary: Member, n: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(_connected(c, primary)) >= n:
            return
        time.sleep(0.1)
    raise AssertionError(f"{n} standbys did not connect:\n{c.tail_logs()}")


def _connected(c: Cluster, primary: Member) -> list[str]:
    members = (c.status(primary) or {}).get("members") or []
    return [m["node_id"] for m in members if m.get("connected") and m["role"] != "primary"]  # type: ignore[index,union-attr]


def _role(c: Cluster, m: Member) -> str | None:
    s = c.status(m)
    return None if s is None else str(s["role"])


def _leader(c: Cluster, m: Member) -> str | None:
    leader = (c.status(m) or {}).get("leader")
    return leader.get("node_id") if isinstance(leader, dict) else None


def test_a_primary_cut_off_from_etcd_and_its_standbys_steps_down_and_rejoins(
    cluster: Cluster, net: netns.Net, etcd: LocalEtcd, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    old = cluster.members[0]
    acks_from_old: list[str] = []
    stop = threading.Event()
    with Submitter(cluster.endpoints, ledger) as sub:
        time.sleep(1.0)
        poker = stubborn_client(old.address, acks_from_old, stop)
        net.cut(0, etcd.client_port)
        cut_at = time.monotonic()
        new = cluster.primary(exclude=old.node_id, timeout=TTL + 15)
        # Still running and still reachable by clients, it must have stepped down.
        deadline = time.monotonic() + TTL + 10
        while _role(cluster, old) == "primary":
            assert time.monotonic() < deadline, cluster.tail_logs(40)
            time.sleep(0.1)
        stepped_down = time.monotonic() - cut_at
        time.sleep(TTL)
        net.heal(0)
        deadline = time.monotonic() + 60
        while _leader(cluster, old) != new.node_id:
            assert time.monotonic() < deadline, cluster.tail_logs(40)
            time.sleep(0.2)
        time.sleep(1.0)
        stop.set()
        poker.join(30)
    assert stepped_down < TTL + 5
    assert _role(cluster, old) == "standby"
    _wait_all_done(cluster.endpoints, sub.acked)
    _wait_all_done(cluster.endpoints, acks_from_old)
    last = cluster.wait_converged()
    events = _final_log(new.data_dir)
    submitted = {e.task_id for e in events if e.event_type is EventType.TASK_SUBMITTED}
    lost = [t for t in acks_from_old if t not in submitted]
    assert not lost, f"the cut-off primary acknowledged writes that were lost: {lost}"
    _check_ledger_and_log(ledger, events, sub.acked)
    assert len({segment_digest(m.data_dir, last) for m in cluster.members}) == 1
    assert "demoted self because" in old.log_text()


def test_a_primary_cut_off_from_its_standbys_keeps_the_lease_and_acknowledges_nothing_unsafe(
    cluster: Cluster, net: netns.Net, tmp_path: Path
) -> None:
    primary = cluster.members[0]
    acks: list[str] = []
    stop = threading.Event()
    poker = stubborn_client(primary.address, acks, stop)
    time.sleep(1.0)
    assert acks, cluster.tail_logs()

    net.isolate_from_peers(0)
    # counted once the cut is in place (on a loaded machine the iptables calls take a
    # while, and writes acknowledged meanwhile were acknowledged with the standbys)
    before = len(acks)
    # The cut drops packets: the streams stay "open", but the standbys fall silent.
    deadline = time.monotonic() + STANDBY_SILENCE_S + 5
    while _connected(cluster, primary):
        assert time.monotonic() < deadline, "silent standbys still counted as connected"
        time.sleep(0.2)
    time.sleep(TTL * 2)
    during = len(acks) - before
    net.heal(0)
    _wait_connected(cluster, primary, 2)
    time.sleep(1.0)
    stop.set()
    poker.join(30)

    # etcd still sees it: no election, the same primary throughout
    assert _role(cluster, primary) == "primary"
    assert all(_role(cluster, m) == "standby" for m in cluster.members[1:])
    # --sync-replicas 1 with no standby reachable: writes wait, then fail
    assert during <= 1, f"{during} writes acknowledged with no standby reachable"
    assert len(acks) > before + during, "writes are acknowledged again once healed"
    last = cluster.wait_converged()
    events = _final_log(cluster.members[1].data_dir)
    submitted = {e.task_id for e in events if e.event_type is EventType.TASK_SUBMITTED}
    assert all(t in submitted for t in acks)
    assert len({segment_digest(m.data_dir, last) for m in cluster.members}) == 1
