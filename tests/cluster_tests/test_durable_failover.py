"""Durable tasks across a failover, for real (issue 18): kill -9 the primary while
1,000 tasks wait on timers and 100 wait for events; after the takeover every timer
fires once and never early, every event sent during the outage is matched, and no
ctx.step that succeeded runs again (the ledger counts every execution)."""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from apollo11.lease.local_etcd import LocalEtcd
from apollo11.scheduler.client import SyncClient
from apollo11.scheduler.log import EventLog, EventType
from tests.cluster import Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.etcd, pytest.mark.slow]

SLEEPERS = 1000
LISTENERS = 100
TIMEOUT_S = 30.0  # the sleepers' deadline: well after the kill and the takeover


@pytest.fixture
def cluster(tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str) -> Iterator[Cluster]:
    c = Cluster.create(tmp_path, etcd_server.url, cluster_name)
    c.start()
    c.wait_formed()  # the takeover's log holds every event from the first
    yield c
    c.stop()


def _states(c: SyncClient, ids: list[str]) -> Counter[str]:
    return Counter(c.task(t).state for t in ids)


def test_timers_and_event_waits_survive_a_kill_of_the_primary(
    cluster: Cluster, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    with SyncClient(cluster.endpoints, timeout_s=10) as c:
        sleepers: list[str] = []
        for start in range(0, SLEEPERS, 250):
            batch = [
                {
                    "workflow": "approval",
                    "input": {"id": f"s{i}", "timeout_s": TIMEOUT_S, "ledger": str(ledger)},
                }
                for i in range(start, start + 250)
            ]
            sleepers += [s.task_id for s in c.submit_many(batch)]
        listeners = [
            s.task_id
            for s in c.submit_many(
                {"workflow": "approval", "input": {"id": f"e{i}", "ledger": str(ledger)}}
                for i in range(LISTENERS)
            )
        ]
        everyone = sleepers + listeners
        deadline = time.monotonic() + 120
        while (counts := _states(c, everyone))["WAITING"] < len(everyone):
            assert time.monotonic() < deadline, f"not all waiting: {counts}"
            time.sleep(0.5)

    old = cluster.primary()
    killed_at_ms = int(time.time() * 1000)
    old.signal(signal.SIGKILL)
    # the events are sent while there is no primary: the client follows the takeover
    sent: dict[str, int] = {}
    with SyncClient(cluster.endpoints, timeout_s=10) as c:
        for i in range(LISTENERS):
            ev = c.send_event(f"approval:e{i}", {"by": f"op{i}"}, idempotency_key=f"ok-e{i}")
            sent[f"e{i}"] = ev.event_id
        new = cluster.primary(exclude=old.node_id)
        deadline = time.monotonic() + TIMEOUT_S + 120
        while (counts := _states(c, everyone))["SUCCEEDED"] < len(everyone):
            assert time.monotonic() < deadline, f"not all done: {counts}\n{cluster.tail_logs()}"
            time.sleep(1)
        results = {t: c.task(t) for t in everyone}

    cluster.stop()
    log = EventLog.open(new.data_dir, read_only=True)
    events = list(log.read())
    log.close_sync()
    takeover_ms = next(
        e.timestamp
        for e in events
        if e.event_type is EventType.TERM_STARTED and e.timestamp >= killed_at_ms
    )

    # every sleeper's timer fired once: one timed-out checkpoint, never before its deadline
    waits = {
        e.task_id: e.payload
        for e in events
        if e.event_type is EventType.WAIT and e.task_id in set(sleepers)
    }
    fired = [e for e in events if e.event_type is EventType.CHECKPOINT and e.payload.get("timeout")]
    assert sorted(e.task_id for e in fired) == sorted(sleepers)
    late = []
    for e in fired:
        until = int(waits[e.task_id]["until_ms"])
        assert e.timestamp >= until, f"{e.task_id}: its timer fired {until - e.timestamp} ms early"
        # on time, give or take the failover (and the time to run a thousand mains)
        late.append(e.timestamp - max(until, takeover_ms))
    late.sort()
    print(f"timers after the takeover: late p50 {late[len(late) // 2]} ms, max {late[-1]} ms")
    assert late[-1] < 30_000, f"timers fired late: p50 {late[len(late) // 2]} ms"
    for t in sleepers:
        assert results[t].steps[0].result["state"] == "refunded"

    # every event sent during the outage was matched, by the task waiting for it
    matched = {
        e.task_id: int(e.payload["event_id"])
        for e in events
        if e.event_type is EventType.CHECKPOINT
        and e.payload.get("kind") == "event"
        and e.payload.get("event_id") is not None
    }
    for i, t in enumerate(listeners):
        assert matched[t] == sent[f"e{i}"]
        assert results[t].steps[0].result["approved_by"] == {"by": f"op{i}"}

    # no side effect ran twice: one charge each, one refund or one shipment each
    lines = Counter(" ".join(line.split()[:2]) for line in ledger.read_text().splitlines())
    assert all(n == 1 for n in lines.values()), [k for k, n in lines.items() if n > 1][:5]
    kinds = Counter(k.split()[1] for k in lines)
    assert kinds == {"charge": SLEEPERS + LISTENERS, "refund": SLEEPERS, "ship": LISTENERS}
