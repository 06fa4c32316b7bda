"""A schedule on a real cluster whose primary is killed (kill -9) three times:
each nominal time has at most one task, every time from the first to the last
has an outcome, and every task the schedule started is a recorded occurrence."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from apollo11.lease.local_etcd import LocalEtcd
from apollo11.scheduler.log import EventType
from apollo11.scheduler.state.store import Store
from tests.cluster import Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.etcd, pytest.mark.slow]

FLOWS = "apollo11.scheduler.examples,tests.cluster_tests.schedule_flows"


@pytest.fixture
def cluster(tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str) -> Iterator[Cluster]:
    c = Cluster.create(tmp_path, etcd_server.url, cluster_name, workflows=FLOWS)
    c.start()
    c.wait_formed()
    yield c
    c.stop()


FIRED = "schedule every-second: fired"


def _fired_count(c: Cluster, at_least: int, timeout: float = 60) -> None:
    """Wait until the primary has fired `at_least` times more than its log held
    when called: a member killed and re-elected keeps its earlier lines, which
    must not end the wait before the new term has fired anything."""
    before = {m.node_id: m.log_text().count(FIRED) for m in c.members}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = c.primary()
        if p.log_text().count(FIRED) - before[p.node_id] >= at_least:
            return
        time.sleep(0.2)
    raise AssertionError(f"fewer than {at_least} new fires within {timeout}s:\n{c.tail_logs()}")


def test_a_schedule_fires_each_time_once_across_three_kills_of_the_primary(
    cluster: Cluster,
) -> None:
    c = cluster
    for _ in range(3):
        p = c.primary()
        _fired_count(c, 3)  # this primary has fired a few
        p.signal(signal.SIGKILL)
        c.primary(exclude=p.node_id)  # a standby took over
        p.start()  # and the killed one comes back as a standby
    _fired_count(c, 3)
    last = c.primary()
    c.stop()
    store = Store.open(last.data_dir)
    try:
        s = store.state.schedules["every-second"]
        nominal = [o.nominal_ms for o in s.occurrences]
        assert len(nominal) > 10, nominal
        # every time from the first to the last has exactly one outcome
        assert nominal == list(range(nominal[0], nominal[-1] + 1000, 1000))
        submitted = [
            e
            for e in store.log.read()
            if e.event_type is EventType.TASK_SUBMITTED
            and (e.payload.get("schedule") or {}).get("id") == "every-second"
        ]
        per_time = Counter(int(e.payload["schedule"]["nominal_ms"]) for e in submitted)
        assert max(per_time.values()) == 1, "a nominal time fired twice"
        recorded = {o.task_id for o in s.occurrences if o.outcome == "fired"}
        assert {e.task_id for e in submitted} == recorded
        # the default catch-up window (a day) fires what came during each takeover
        assert {o.outcome for o in s.occurrences} == {"fired"}, Counter(
            o.outcome for o in s.occurrences
        )
    finally:
        asyncio.run(store.close())


def test_a_cluster_stopped_past_the_window_fires_its_last_times_and_records_the_rest(
    cluster: Cluster,
) -> None:
    c = cluster
    _fired_count(c, 3)
    c.stop()  # every node, gracefully: no primary for 30 s
    stopped = time.time()
    time.sleep(30)
    c.start()
    c.wait_formed()
    _fired_count(c, 2)
    last = c.primary()
    c.stop()
    store = Store.open(last.data_dir)
    try:
        s = store.state.schedules["short-window"]
        nominal = [o.nominal_ms for o in s.occurrences]
        assert nominal == list(range(nominal[0], nominal[-1] + 1000, 1000)), "a time lost"
        down = [o for o in s.occurrences if stopped * 1000 < o.nominal_ms < stopped * 1000 + 30_000]
        outcomes = [o.outcome for o in down]
        # the times more than 10 s before the new primary decided are missed (20 at
        # least), then the last ones fire late: never a fired one before a missed one
        assert outcomes.count("missed") >= 20, outcomes
        assert outcomes == sorted(outcomes, key=lambda x: x != "missed"), outcomes
        assert all(
            "past the catch-up window of 10s" in o.reason for o in down if o.outcome == "missed"
        )
    finally:
        asyncio.run(store.close())
