"""Cluster identity, for real (issue 15, item 5): a second `apollo11 dev` whose nodes
joined the first cluster wedged its sync gate at 0 standbys for ten minutes.

Each test here reproduces one part of that: a data directory of another cluster,
a node id that is already live, a second stream under a live standby's node id,
a write blocked on replication that must say what it waits for.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import orjson
import pytest

from apollo11.lease.etcd import EtcdLease
from apollo11.lease.local_etcd import LocalEtcd
from apollo11.scheduler.client import SyncClient
from apollo11.v1 import replication_pb2 as rpb
from apollo11.v1 import replication_pb2_grpc as rpbg
from tests.cluster import TTL, Cluster, Member
from tests.nodes import ROOT

pytestmark = [pytest.mark.cluster, pytest.mark.etcd, pytest.mark.slow]


def _connected(c: Cluster, primary: Member) -> set[str]:
    s = c.status(primary) or {}
    return {
        str(m["node_id"])
        for m in s.get("members", [])  # type: ignore[union-attr]
        if m["node_id"] != primary.node_id and m.get("connected")
    }


def _wait_connected(c: Cluster, primary: Member, want: set[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if want <= _connected(c, primary):
            return
        time.sleep(0.1)
    raise AssertionError(f"{want} did not connect:\n{c.tail_logs()}")


async def _record_settles(etcd: LocalEtcd, c: Cluster, node_id: str, last: int) -> None:
    """Until `node_id`'s member record in etcd holds position `last`."""
    lease = EtcdLease([etcd.url], cluster=c.name, ttl_s=TTL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            record = (await lease.world()).members.get(node_id)
            if record is not None and record.last_event_id == last:
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"{node_id}'s record never showed event {last}:\n{c.tail_logs()}")
    finally:
        await lease.close()


def _cluster_id(data_dir: Path) -> str:
    return str(orjson.loads((data_dir / "CLUSTER").read_bytes())["cluster_id"])


@pytest.fixture
def pair(tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str) -> Iterator[Cluster]:
    """n1 primary, n2 its one standby; strict sync on one standby (the default)."""
    c = Cluster.create(
        tmp_path, etcd_server.url, cluster_name, 2, env={"APOLLO11_SYNC_TIMEOUT": "2"}, http=True
    )
    c.members[0].start()
    try:
        assert c.primary(timeout=60).node_id == "n1"
        c.members[1].start()
        _wait_connected(c, c.members[0], {"n2"})
        yield c
    finally:
        c.stop()


def _run_node(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """A node expected to refuse to start: it must exit by itself, non-zero."""
    return subprocess.run(
        [sys.executable, "-m", "apollo11.scheduler.cli", "node", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _node_args(node_id: str, data: Path, etcd_url: str, cluster: str) -> list[str]:
    return [
        "--node-id",
        node_id,
        "--data-dir",
        str(data),
        "--listen",
        "127.0.0.1:0",
        "--workflows",
        "apollo11.scheduler.examples",
        "--etcd",
        etcd_url,
        "--cluster",
        cluster,
        "--lease-ttl",
        str(TTL),
    ]


def test_a_second_stream_under_a_live_standbys_id_does_not_unhook_it(pair: Cluster) -> None:
    """The wedge: another process says it is n2, follows the primary, and leaves. The
    real n2 is connected and acking throughout: it must still be counted, and a
    synchronous write must go through."""
    primary, n2 = pair.members
    with SyncClient(primary.address, retries=0, timeout_s=10) as client:
        client.submit("etl", {"step_seconds": 0})
        with grpc.insecure_channel(primary.address) as ch:
            hello = rpb.Hello(
                node_id="n2",
                address="127.0.0.1:1",
                cluster_id=_cluster_id(primary.data_dir),
            )
            call = rpbg.ReplicationStub(ch).Follow(iter([rpb.StandbyMessage(hello=hello)]))
            first = next(call)
            assert first.WhichOneof("kind") == "welcome"
            call.cancel()
        time.sleep(1.0)  # let the primary see that stream end
        assert _connected(pair, primary) == {"n2"}, pair.tail_logs()
        # wedged, it waits out APOLLO11_SYNC_TIMEOUT and raises "outcome is unknown"
        client.submit("etl", {"step_seconds": 0})
    # what the "writes blocked" alert compares
    url = f"http://127.0.0.1:{primary.http_port}/metrics"
    body = urllib.request.urlopen(url, timeout=5).read().decode()
    assert "apollo11_replication_standbys_connected 1.0" in body
    assert "apollo11_replication_standbys_required 1.0" in body
    assert n2.alive()


def test_a_standby_of_another_cluster_is_refused_by_the_primary(pair: Cluster) -> None:
    primary = pair.members[0]
    with grpc.insecure_channel(primary.address) as ch:
        hello = rpb.Hello(node_id="n7", address="127.0.0.1:1", cluster_id="f" * 32)
        call = rpbg.ReplicationStub(ch).Follow(iter([rpb.StandbyMessage(hello=hello)]))
        with pytest.raises(grpc.RpcError) as e:
            next(call)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    details = e.value.details() or ""
    assert "f" * 32 in details and _cluster_id(primary.data_dir) in details, details


def test_a_blocked_write_names_the_standbys_it_waits_for(
    tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str
) -> None:
    # two synchronous standbys wanted, one exists: every write times out
    c = Cluster.create(
        tmp_path,
        etcd_server.url,
        cluster_name,
        2,
        "--sync-replicas",
        "2",
        # the step waits for its commit to the end: the stop need not wait for it
        env={"APOLLO11_SYNC_TIMEOUT": "1", "APOLLO11_DRAIN_TIMEOUT": "0"},
    )
    c.members[0].start()
    try:
        assert c.primary(timeout=60).node_id == "n1"
        c.members[1].start()
        _wait_connected(c, c.members[0], {"n2"})
        with (
            SyncClient(c.members[0].address, retries=0, timeout_s=10) as client,
            pytest.raises(Exception) as e,
        ):
            client.submit("etl", {"step_seconds": 0})
        text = str(e.value)
        assert "outcome is unknown" in text, text
        assert "needs 2" in text and "n2" in text and "acked" in text, text
    finally:
        c.stop()


def test_a_data_dir_of_another_cluster_is_refused(
    tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str, pair: Cluster
) -> None:
    # a data directory that belongs to another cluster (another prefix in the same etcd)
    other = f"{cluster_name}-other"
    foreign = tmp_path / "foreign"
    (tmp_path / "c2").mkdir()
    c2 = Cluster.create(tmp_path / "c2", etcd_server.url, other, 1)
    c2.members[0].data_dir = foreign
    c2.members[0].args[c2.members[0].args.index("--data-dir") + 1] = str(foreign)
    c2.members[0].start()
    try:
        c2.primary(timeout=60)
    finally:
        c2.stop()
    theirs = _cluster_id(foreign)
    ours = _cluster_id(pair.members[0].data_dir)
    assert theirs != ours
    done = _run_node(_node_args("n3", foreign, etcd_server.url, pair.name))
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert theirs in out and ours in out and "wipe" in out, out
    assert _cluster_id(foreign) == theirs  # untouched


def test_a_node_id_already_live_is_refused(
    tmp_path: Path, etcd_server: LocalEtcd, pair: Cluster
) -> None:
    # n2 caught up and idle: it writes no new revision of its record, it only keeps
    # its lease alive (issue 28: that was waited out as a record that "did not lapse")
    asyncio.run(_record_settles(etcd_server, pair, "n2", pair.wait_converged()))
    t0 = time.monotonic()
    done = _run_node(_node_args("n2", tmp_path / "dup", etcd_server.url, pair.name))
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "n2" in out and "already live" in out, out
    assert time.monotonic() - t0 < 30
    assert not (tmp_path / "dup" / "CLUSTER").exists(), "a refused node keeps nothing"
    # and the real n2 was not disturbed
    _wait_connected(pair, pair.members[0], {"n2"}, timeout=10)


def test_a_node_restarted_after_a_crash_waits_out_its_own_record(pair: Cluster) -> None:
    """Its old member record outlives the process by up to a TTL: not a duplicate."""
    n2 = pair.members[1]
    n2.signal(9)
    n2.start()
    _wait_connected(pair, pair.members[0], {"n2"}, timeout=30)
    assert "already live" not in n2.log_text()
