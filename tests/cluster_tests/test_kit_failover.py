"""The testing kit's `fail_over()` gives the history a real failover gives (issue 33):
each golden case's workflow (tests/golden/: `durable` is the approval flow, `etl-happy`
the etl pipeline) run through the kit with `fail_over()` at a point, and through
three node processes on etcd with the primary SIGKILLed at the same point. The two
logs are compared normalised: per task, the sequence of event types with step names
and attempts (and whether a failure was a lost attempt), the term starts in between
by kind (`began`), and the names of every event's payload fields; node ids, terms,
timestamps and instance ids left out. Both submit with an idempotency key: the
client makes one up when given none (its retries are safe so), the kit does not."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from apollo11.lease.local_etcd import LocalEtcd
from apollo11.scheduler.client import SyncClient
from apollo11.scheduler.examples import approval, etl
from apollo11.scheduler.log import Event, EventLog, EventType
from apollo11.testing import WorkflowEnvironment
from tests.cluster import Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.etcd, pytest.mark.slow]

Row = tuple[Any, ...]
STEP_SECONDS = 1.5  # etl: long enough to kill the primary mid-step


def normalised(events: Iterable[Event], task_id: str) -> list[Row]:
    """The task's history without what differs between runs by nature."""
    rows: list[Row] = []
    for e in events:
        if e.event_type is EventType.TERM_STARTED:
            rows.append(("TERM_STARTED", e.payload.get("began"), tuple(sorted(e.payload))))
        elif e.task_id == task_id:
            row: Row = (e.event_type.name, e.step_name, e.attempt)
            if e.event_type is EventType.STEP_FAILED:
                row += ("lost" if e.payload.get("lost") else "failed",)
            rows.append((*row, tuple(sorted(e.payload or {}))))
    return rows


# ------------------------------------------------------------------- the kit


async def _kit_approval() -> list[Row]:
    async with WorkflowEnvironment(workflows=[approval]) as env:
        h = await env.submit(approval, {"id": "P1"}, idempotency_key="P1")
        await env.advance(timedelta(seconds=1))  # charged, waiting for the approval
        assert (await h.task()).state == "WAITING"
        await env.fail_over()
        await env.send_event("approval:P1", {"by": "ana"})
        assert (await h.result())["state"] == "shipped"
        return normalised(env.store.log.read(), h.task_id)


async def _kit_etl() -> list[Row]:
    async with WorkflowEnvironment(workflows=[etl]) as env:
        h = await env.submit(etl, {"step_seconds": STEP_SECONDS}, idempotency_key="E1")
        async with asyncio.timeout(30):
            while not _running(env.store.log.read(), h.task_id, "feature"):
                await asyncio.sleep(0.01)
        await env.fail_over(at_rest=False)  # mid-step, as a SIGKILL
        await h.result()
        return normalised(env.store.log.read(), h.task_id)


def _running(events: Iterable[Event], task_id: str, step: str) -> bool:
    return any(
        e.task_id == task_id and e.step_name == step and e.event_type is EventType.STEP_STARTED
        for e in events
    )


# --------------------------------------------------------------- the cluster


@pytest.fixture
def cluster(tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str) -> Iterator[Cluster]:
    c = Cluster.create(tmp_path, etcd_server.url, cluster_name)
    c.start()
    c.wait_formed()  # the takeover's log holds every event from the first
    yield c
    c.stop()


def _until(what: str, ok: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, f"not {what} within {timeout} s"
        time.sleep(0.05)


def _kill_primary_and_read(
    cluster: Cluster, c: SyncClient, task_id: str, after_kill: Callable[[], object]
) -> list[Row]:
    cluster.wait_converged()  # the standbys hold what the primary wrote
    old = cluster.primary()
    old.signal(signal.SIGKILL)
    new = cluster.primary(exclude=old.node_id)
    after_kill()
    view = c.wait(task_id, timeout=60)
    assert view.state == "SUCCEEDED", view
    cluster.stop()
    log = EventLog.open(new.data_dir, read_only=True)
    try:
        return normalised(log.read(), task_id)
    finally:
        log.close_sync()


def _real_approval(cluster: Cluster) -> list[Row]:
    with SyncClient(cluster.endpoints, timeout_s=10) as c:
        task_id = c.submit("approval", {"id": "P1"}, idempotency_key="P1").task_id
        _until("waiting", lambda: c.task(task_id).state == "WAITING")
        return _kill_primary_and_read(
            cluster, c, task_id, lambda: c.send_event("approval:P1", {"by": "ana"})
        )


def _real_etl(cluster: Cluster) -> list[Row]:
    with SyncClient(cluster.endpoints, timeout_s=10) as c:
        task_id = c.submit("etl", {"step_seconds": STEP_SECONDS}, idempotency_key="E1").task_id

        def feature_started() -> bool:
            events, _ = c.events(task_id=task_id)
            return any(e.event_type == "STEP_STARTED" and e.step_name == "feature" for e in events)

        _until("feature started", feature_started)
        return _kill_primary_and_read(cluster, c, task_id, lambda: None)


# --------------------------------------------------------------------- cases

CASES: dict[str, tuple[Callable[[], Any], Callable[[Cluster], list[Row]]]] = {
    "durable": (_kit_approval, _real_approval),
    "etl-happy": (_kit_etl, _real_etl),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_the_kits_failover_gives_a_real_failovers_history(
    case: str, cluster: Cluster
) -> None:
    kit, real = CASES[case]
    from_kit = await kit()
    from_cluster = await asyncio.to_thread(real, cluster)
    assert from_kit == from_cluster, (
        f"{case}: the kit's failover\n  {from_kit}\nand a real one\n  {from_cluster}"
    )
