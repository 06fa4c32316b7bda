"""`apollo11 bench engine`: five-step no-op tasks through the engine, fsync on.

Also the scheduler's cost per decision with an empty history and with a long
one (finished tasks in the archive), measured in the same run: the ratio
should stay near 1, because a decision reads only the task it decides.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

from apollo11.scheduler.engine import Engine
from apollo11.scheduler.log import EventType, FsyncPolicy, LogConfig
from apollo11.scheduler.state import Store, StoreConfig
from apollo11.scheduler.testing import etl_history
from apollo11.scheduler.tools.bench.log_bench import _in_child
from apollo11.scheduler.workflow import Idempotent, Registry, Retry, StepContext, Workflow


def noop_workflow() -> Workflow:
    wf = Workflow("noop5", version=1)

    async def noop(ctx: StepContext) -> None:
        return None

    prev: list[str] = []
    for name in ("s1", "s2", "s3", "s4", "s5"):
        wf.step(name=name, after=prev, idempotency=Idempotent(), retry=Retry(attempts=1))(noop)
        prev = [name]
    return wf


async def _run_tasks(root: str, n_tasks: int, history: int, fsync: FsyncPolicy) -> dict[str, Any]:
    if history:
        await _history(root, history)
    store = Store.open(root, config=StoreConfig(log=LogConfig(fsync=fsync)), instance_id="bench")
    reg = Registry()
    reg.register(noop_workflow())
    store.log.term = store.log.last_term + 1
    await store.log.append(EventType.TERM_STARTED, "", payload={"node_id": "bench"})
    engine = Engine(store, reg, node_id="bench", concurrency=4096)
    await engine.start()
    in_memory_before = len(store.state.tasks)

    t0 = time.perf_counter()
    ids: list[str] = []

    async def submitter(k: int) -> None:
        for _ in range(n_tasks // 64):
            ids.append((await engine.submit("noop5")).task_id)

    await asyncio.gather(*(submitter(k) for k in range(64)))
    await asyncio.gather(*(engine.wait(t) for t in ids))
    dt = time.perf_counter() - t0
    decisions, decide_s = engine.decisions, engine.decide_seconds
    events = store.log.durable_id
    await engine.stop()
    reads = _reads(store) if history else {}
    await store.close()
    return {
        "tasks": len(ids),
        "seconds": round(dt, 3),
        "tasks_per_s": round(len(ids) / dt),
        "events_per_s": round(len(ids) * 11 / dt),
        "decisions": decisions,
        "us_per_decision": round(decide_s / max(1, decisions) * 1e6, 2),
        "history_tasks_archived": history and (history - in_memory_before),
        "log_events": events,
        **reads,
    }


def _reads(store: Store) -> dict[str, Any]:
    """What an operator's requests cost with a long history: they run on the node's
    event loop, so they must not grow with it."""
    t0 = time.perf_counter()
    _, token = store.state.list_summaries(None, None, 50)
    t1 = time.perf_counter()
    store.state.list_summaries(None, token, 50)
    t2 = time.perf_counter()
    oldest = next(e for e in store.log.read(1) if e.task_id)
    task = store.state.peek(oldest.task_id)
    assert task is not None
    t3 = time.perf_counter()
    events, _ = store.task_events(task)
    t4 = time.perf_counter()
    return {
        "list_first_page_ms": round((t1 - t0) * 1000, 2),
        "list_next_page_ms": round((t2 - t1) * 1000, 2),
        "oldest_task_history_ms": round((t4 - t3) * 1000, 2),
        "oldest_task_events": len(events),
    }


async def _history(root: str, n_tasks: int) -> None:
    """n_tasks finished etl tasks, written through a store (snapshots archive them)."""
    store = Store.open(
        root, config=StoreConfig(log=LogConfig(fsync=FsyncPolicy.UNSAFE_NEVER)), instance_id="h"
    )
    it = etl_history(n_tasks, seed=7, concurrency=64, fail_rate=0, compensate_rate=0, cancel_rate=0)
    while chunk := list(itertools.islice(it, 1000)):
        await store.log.append_many(chunk)
        await store.wait_snapshot()
    store.snapshot_now()
    await store.wait_snapshot()
    await store.close()


def _section(root: str, n_tasks: int, history: int, fsync: str) -> dict[str, Any]:
    return asyncio.run(_run_tasks(root, n_tasks, history, FsyncPolicy(fsync)))


def run(quick: bool, workdir: str | None, progress: Callable[[str], None]) -> dict[str, Any]:
    n = 2_000 if quick else 10_000
    history = 20_000 if quick else 100_000
    base = tempfile.mkdtemp(prefix="apollo11-bench-", dir=workdir or os.getcwd())
    try:
        progress(f"{n:,} five-step no-op tasks, fsync on, empty history")
        fresh = _in_child(_section, os.path.join(base, "fresh"), n, 0, "always")
        progress(f"{n:,} five-step no-op tasks, fsync on, {history:,} finished tasks in history")
        old = _in_child(_section, os.path.join(base, "old"), n, history, "always")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return {
        "quick": quick,
        "engine_tasks_per_s": fresh["tasks_per_s"],
        "engine_events_per_s": fresh["events_per_s"],
        "decision_us_empty_history": fresh["us_per_decision"],
        "decision_us_long_history": old["us_per_decision"],
        "decision_cost_ratio": round(
            old["us_per_decision"] / max(0.001, fresh["us_per_decision"]), 2
        ),
        "history_tasks": history,
        "fresh": fresh,
        "with_history": old,
    }


def summary_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (
            "five-step no-op tasks/s (fsync on)",
            f"{r['engine_tasks_per_s']:,} ({r['engine_events_per_s']:,} events/s)",
        ),
        ("same, with a long history", f"{r['with_history']['tasks_per_s']:,} tasks/s"),
        ("scheduler cost per decision, empty history", f"{r['decision_us_empty_history']} µs"),
        (
            f"scheduler cost per decision, {r['history_tasks']:,} finished tasks",
            f"{r['decision_us_long_history']} µs",
        ),
        ("ratio (flat = 1)", f"{r['decision_cost_ratio']}x"),
        (
            f"list tasks with {r['history_tasks']:,} in history: first / next page",
            f"{r['with_history']['list_first_page_ms']} / "
            f"{r['with_history']['list_next_page_ms']} ms",
        ),
        (
            f"the oldest task's history, in a log of {r['with_history']['log_events']:,} events",
            f"{r['with_history']['oldest_task_history_ms']} ms",
        ),
    ]
