"""Steps with limits through a real node (issue 32, part 3): on a worker, a step stopped
at its limit fails with its cause, recorded in the FAILED with its MRO and judged by
the rule that names it; a node that runs steps itself refuses them; `both` sends
them to its workers. (The CPU limit, and all of it in real node and worker processes:
tests/scheduler/worker/test_limits.py.)"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.dispatch import LocalFirstExecutor, RemoteExecutor
from apollo11.scheduler.engine import EMBEDDED, InProcessExecutor
from apollo11.scheduler.errors import WorkflowDefinitionError
from apollo11.scheduler.log import EventType, FsyncPolicy
from apollo11.scheduler.node import Node
from apollo11.scheduler.state import TaskStatus
from apollo11.scheduler.worker import Worker
from apollo11.scheduler.workflow import Registry

FLOWS = "tests.scheduler.worker.limit_flows"


def _settings(tmp_path: Path, execution: str) -> NodeSettings:
    return NodeSettings(
        node_id="n1",
        listen="127.0.0.1:0",
        workflows=[FLOWS],
        fsync=FsyncPolicy.UNSAFE_NEVER,
        data_dir=tmp_path / "data",
        execution=execution,
        # No worker or primary is lost here: silences a loaded machine cannot reach.
        # Node and worker share one loop; at load 12 on 2 cores it stalled 2.8 s: the
        # node (2 s timeout) or the worker (4 intervals of 0.2 s) took the other for
        # gone, both attempts were lost, and `light` failed with the task.
        worker_heartbeat_interval=2.0,
        worker_heartbeat_timeout=60.0,
    )


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = Node(_settings(tmp_path, "remote"))
    await n.start()
    yield n
    await n.stop()


async def test_a_limit_reaches_the_failed_event_with_its_mro_and_its_rule(node: Node) -> None:
    registry = Registry()
    registry.load_module(FLOWS)
    worker = Worker(f"127.0.0.1:{node.port}", registry, name="w1", slots=2)
    run = asyncio.create_task(worker.run())
    try:
        assert node.engine is not None and node.store is not None
        task_id = (await node.engine.submit("fenced_memory", None)).task_id
        async with asyncio.timeout(60):
            task = await node.engine.wait(task_id)
        failed = {
            e.step_name: e.payload
            for e in node.store.log.read()
            if e.task_id == task_id and e.event_type is EventType.STEP_FAILED
        }
    finally:
        await worker.stop(grace_s=0)
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run
    assert task.status is TaskStatus.FAILED
    assert task.steps["light"].status.name == "SUCCEEDED"  # beside them, on the same worker
    hog = failed["hog"]
    assert hog["cause"]["mro"][:3] == [
        "apollo11.MemoryLimitExceeded",
        "apollo11.StepLimitExceeded",
        "builtins.MemoryError",
    ]
    assert (hog["rule"], hog["final"]) == ("apollo11.MemoryLimitExceeded", True)
    assert set(failed) == {"hog"}  # FINAL: it did not run twice


async def test_a_node_that_runs_steps_itself_refuses_limits(tmp_path: Path) -> None:
    n = Node(_settings(tmp_path, "embedded"))
    with pytest.raises(WorkflowDefinitionError) as e:
        await n.start()
    said = str(e.value)
    assert "workflow 'fenced' v1 step 'hog'" in said
    assert "enforced on workers only" in said and "--execution remote" in said


def test_both_sends_a_step_with_limits_to_a_worker() -> None:
    registry = Registry()
    registry.load_module(FLOWS)
    remote = RemoteExecutor(node_id="n1", heartbeat_interval_s=1, heartbeat_timeout_s=5)
    both = LocalFirstExecutor(
        InProcessExecutor(threads=1), remote, 4, needs_worker=registry.needs_worker
    )
    no_labels: dict[str, Any] = {}
    assert both.place("t1", "hog", "fenced", 1, no_labels) is None  # no worker yet
    assert both.place("t2", "unlimited_hog", "wlimits", 1, no_labels) == EMBEDDED
    assert registry.needs_worker("fenced", 1, "light")
    assert not registry.needs_worker("fenced", 1, "nope")
