"""on_exhausted="compensate" for real (issue 32): a task's last step fails for good,
its steps are compensated in reverse dependency order, and the primary is killed
(kill -9) in the middle of a compensation; the new primary finishes it. No
compensation that completed runs again, each step is COMPENSATED once in the log, and
the task ends COMPENSATED (tests/cluster_tests/exhaust_flows.py)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from apollo11.lease.local_etcd import LocalEtcd
from apollo11.scheduler.client import SyncClient
from apollo11.scheduler.log import EventLog, EventType
from tests.cluster import Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.etcd, pytest.mark.slow]

FLOWS = "apollo11.scheduler.examples,tests.cluster_tests.exhaust_flows"


@pytest.fixture
def cluster(tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str) -> Iterator[Cluster]:
    c = Cluster.create(tmp_path, etcd_server.url, cluster_name, workflows=FLOWS)
    c.start()
    c.wait_formed()
    yield c
    c.stop()


def _ledger(path: Path) -> list[tuple[str, str, str]]:
    if not path.exists():
        return []
    return [tuple(line.split()) for line in path.read_text().splitlines()]  # type: ignore[misc]


def _until(what: str, ok: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ok():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not within {timeout:g}s: {what}"
        time.sleep(0.05)


def test_compensation_in_reverse_order_survives_a_kill_of_the_primary(
    cluster: Cluster, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    old = cluster.primary()
    with SyncClient(cluster.endpoints, timeout_s=10) as c:
        task_id = c.submit("undo_order", {"ledger": str(ledger), "hold": "b"}).task_id
    # d failed for good, d and c are compensated, b's compensation has begun: kill -9
    _until("b's compensation begins", lambda: ("begin", "b", old.node_id) in _ledger(ledger))
    old.signal(signal.SIGKILL)
    new = cluster.primary(exclude=old.node_id)
    (tmp_path / "release").touch()
    with SyncClient(cluster.endpoints, timeout_s=10) as c:
        deadline = time.monotonic() + 90
        while (task := c.task(task_id)).state != "COMPENSATED":
            assert time.monotonic() < deadline, f"task {task.state}\n" + cluster.tail_logs()
            time.sleep(0.1)
        assert {s.name: s.state for s in task.steps} == {
            "a": "COMPENSATED",
            "b": "COMPENSATED",
            "c": "COMPENSATED",
            "d": "COMPENSATED",
        }
    lines = _ledger(ledger)
    ends = [(step, node) for what, step, node in lines if what == "end"]
    # reverse dependency order, each completed once; b's, cut off by the kill, is
    # begun again (and completed) by the new primary; none that completed runs again
    assert [s for s, _ in ends] == ["d", "c", "b", "a"], lines
    assert ends[:2] == [("d", old.node_id), ("c", old.node_id)], lines
    assert ends[2:] == [("b", new.node_id), ("a", new.node_id)], lines
    begins = [(step, node) for what, step, node in lines if what == "begin"]
    assert begins == [
        ("d", old.node_id),
        ("c", old.node_id),
        ("b", old.node_id),
        ("b", new.node_id),
        ("a", new.node_id),
    ], lines

    # the log (any surviving member's: they are byte-identical): one TASK_COMPENSATING,
    # one COMPENSATED per step, in reverse order
    cluster.wait_converged()
    log = EventLog.open(new.data_dir, read_only=True)
    try:
        mine = [e for e in log.read() if e.task_id == task_id]
    finally:
        log.close_sync()
    kinds = [e.event_type for e in mine]
    assert kinds.count(EventType.TASK_COMPENSATING) == 1
    compensated = [e.step_name for e in mine if e.event_type is EventType.STEP_COMPENSATED]
    assert compensated == ["d", "c", "b", "a"]
    owed = next(e for e in mine if e.event_type is EventType.TASK_COMPENSATING).payload
    assert owed == {
        "step": "d",
        "error": "ValueError: the order cannot be shipped",
        "compensate": ["a", "b", "c"],
    }
