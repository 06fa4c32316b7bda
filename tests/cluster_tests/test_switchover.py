"""`apollo11 switchover`: a planned hand-over, for real (issue 19, item 1): three node
processes on a real etcd, the CLI, a run going on through it."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from apollo11.lease.local_etcd import LocalEtcd
from apollo11.scheduler.client import SyncClient
from apollo11.scheduler.log import EventLog, EventType
from tests.cluster import Cluster
from tests.nodes import cli

pytestmark = [pytest.mark.cluster, pytest.mark.etcd, pytest.mark.slow]


@pytest.fixture
def cluster(tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str) -> Iterator[Cluster]:
    c = Cluster.create(tmp_path, etcd_server.url, cluster_name)
    c.start()
    c.wait_formed()  # the takeover's log holds every event from the first
    yield c
    c.stop()


def test_switchover_hands_the_primary_role_to_the_named_standby(cluster: Cluster) -> None:
    old = cluster.primary()
    cluster.wait_converged()
    target = next(m for m in cluster.members if m is not old and m.node_id != "n1")
    with SyncClient(cluster.endpoints) as c:
        running = c.submit("etl", {"step_seconds": 1}).task_id
        time.sleep(0.5)  # a step of it runs on the primary
        res = cli("switchover", "--to", target.node_id, "--json", server=cluster.endpoints)
        assert res.returncode == 0, res.stderr
        done = json.loads(res.stdout)
        assert done["from"] == old.node_id and done["to"] == target.node_id
        assert done["leader"] == target.node_id
        assert cluster.primary().node_id == target.node_id
        # the run went on: the step that ran on the old primary finished there (drained)
        task = c.wait(running, timeout=60)
        assert task.state == "SUCCEEDED"
        after = c.submit("etl", {"step_seconds": 0}).task_id
        assert c.wait(after, timeout=60).state == "SUCCEEDED"
        status = c.status()
        roles = {m.node_id: m.role for m in status.members}
        assert roles[old.node_id] == "standby"
        # the history says how the target's term began, and from whom
        last = c.history()[-1]
        assert (last.node_id, last.began, last.previous) == (
            target.node_id,
            "switchover",
            old.node_id,
        ), last
        # refused, naming why: not a standby, and the primary itself
        bad = cli("switchover", "--to", "n9", server=cluster.endpoints)
        assert bad.returncode != 0 and "n9 is not a live standby" in bad.stderr, bad.stderr
        same = cli("switchover", "--to", target.node_id, server=cluster.endpoints)
        assert same.returncode != 0 and "is the primary already" in same.stderr, same.stderr
    cluster.stop()
    log = EventLog.open(target.data_dir, read_only=True)
    events = list(log.read())
    log.close_sync()
    lost = [e for e in events if e.event_type is EventType.STEP_FAILED and e.payload.get("lost")]
    assert not lost, "a drained hand-over loses no attempt"
    terms = [e for e in events if e.event_type is EventType.TERM_STARTED]
    assert terms[-1].instance_id == target.node_id
