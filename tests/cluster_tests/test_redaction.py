"""Redaction on a real cluster (issue 34, part 6): etcd, a primary and a standby;
after `redact`, neither node shows the task's input or output (the task, its events,
its past state), the event names the principal and the reason, each node's segments
no longer hold it (byte for byte alike on both), nor any other file of its data
directory (the snapshots and archive chunks written before the redaction), and an
offline replay of the standby's data directory agrees."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from apollo11.lease.local_etcd import LocalEtcd
from apollo11.scheduler.client import SyncClient
from tests.cluster import Cluster, segment_digest
from tests.nodes import cli

pytestmark = [pytest.mark.cluster, pytest.mark.etcd, pytest.mark.slow]
FLOWS = "apollo11.scheduler.examples,tests.api.exportflows"
SECRET = "card 4111 1111 1111 1111"


@pytest.fixture
def cluster(tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str) -> Iterator[Cluster]:
    # snapshots often, without a pause between two: the task's data is in snapshot files
    # and archive chunks on both nodes before it is redacted
    snapshots = ("--snapshot-interval", "3", "--snapshot-min-interval", "0")
    c = Cluster.create(tmp_path, etcd_server.url, cluster_name, 2, *snapshots, workflows=FLOWS)
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _holding(data_dir: Path, secret: bytes) -> list[Path]:
    found = []
    for p in data_dir.rglob("*"):
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):  # replaced meanwhile
            if secret in p.read_bytes():
                found.append(p)
    return found


def _until_gone(data_dir: Path, secret: bytes, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while held := _holding(data_dir, secret):
        assert time.monotonic() < deadline, f"still holding it: {held}"
        time.sleep(0.1)


def _until_held(data_dir: Path, secret: bytes, where: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not any(where in p.name for p in _holding(data_dir, secret)):
        assert time.monotonic() < deadline, f"no {where} of {data_dir} holds it"
        time.sleep(0.1)


def test_no_node_shows_a_redacted_tasks_payloads(cluster: Cluster) -> None:
    primary = cluster.wait_formed()
    standby = next(m for m in cluster.members if m.node_id != primary.node_id)
    with SyncClient(primary.address) as c:
        task_id = c.submit("echo", {"text": SECRET}).task_id
        done = c.wait(task_id, timeout=60)
        assert done.steps[0].result == SECRET
        kept = c.submit("echo", {"text": "keep me"}).task_id
        c.wait(kept, timeout=60)
        before = done.last_event_id
        # the test means something: the data is in the snapshots on both nodes first
        for _ in range(3):
            c.wait(c.submit("echo", {"text": "more"}).task_id, timeout=60)
        for node in (primary, standby):
            _until_held(node.data_dir, SECRET.encode(), ".arc")
        rid = c.redact(task_id, reason="customer asked (ticket 42)")
    cluster.wait_applied(standby, cluster.wait_converged())
    mark = {"$redacted": rid}
    for node in (primary, standby):
        with SyncClient(node.address) as c:
            t = c.task(task_id)
            assert t.input == mark and t.steps[0].result == mark, node.node_id
            assert t.state == "SUCCEEDED"
            assert SECRET not in json.dumps(t.to_json()), node.node_id
            past = c.task(task_id, as_of=before)
            assert past.input == mark, node.node_id
            events, _ = c.events(task_id=task_id, limit=100)
            assert SECRET not in json.dumps([e.to_json() for e in events]), node.node_id
            (red,) = [e for e in events if e.event_type == "TASK_REDACTED"]
            assert red.payload["reason"] == "customer asked (ticket 42)"
            assert "operator" in red.payload
            whole, _ = c.events(from_id=1, limit=10000)
            assert SECRET not in json.dumps([e.to_json() for e in whole]), node.node_id
            assert c.task(kept).input == {"text": "keep me"}
        res = cli("export", "--workflow", "echo", server=node.address)
        assert res.returncode == 0, res.stderr
        assert SECRET not in res.stdout and "keep me" in res.stdout
    for node in (primary, standby):  # each rewrote its own segments and snapshots
        _until_gone(node.data_dir, SECRET.encode())
    last = cluster.wait_converged()
    # The primary first: the standby takes over and starts a term of its own (as it may
    # whenever the two are stopped one after the other), so the logs are compared
    # through the last event both held.
    assert primary.stop() == 0
    cluster.primary(timeout=60)
    cluster.stop()
    assert segment_digest(standby.data_dir) != segment_digest(primary.data_dir)
    assert segment_digest(primary.data_dir, last) == segment_digest(standby.data_dir, last)
    res = cli("replay", "--data-dir", str(standby.data_dir), "--task", task_id, "--json")
    assert res.returncode == 0, res.stderr
    replayed = json.loads(res.stdout)
    assert replayed["input"] == mark and replayed["redacted"]["event_id"] == rid
