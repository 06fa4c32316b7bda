"""Schedules firing on a primary: N schedules (10,000; --quick 1,000), each
`* * * * *`, on a real store and engine with fsync on, in one process.

It creates them, waits for two minute boundaries, and reads the log: each fired
occurrence's lateness (its TASK_SUBMITTED's time minus its nominal time: no
jitter here), and what the schedules' decisions cost (the decide and the
drafts, on the loop: `Schedules.decide_seconds`) against the wall time, as a
share of one core. The tasks the schedules start run too (one trivial step
each), and the process's whole CPU is given beside it.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from apollo11.scheduler.clock import Clock
from apollo11.scheduler.engine import Engine
from apollo11.scheduler.log import EventType, LogConfig
from apollo11.scheduler.schedules import ScheduleSpec
from apollo11.scheduler.state import Store, StoreConfig
from apollo11.scheduler.workflow import Idempotent, Registry, StepContext, Workflow

tock = Workflow("tock", version=1)


@tock.step(idempotency=Idempotent())
def beat(ctx: StepContext) -> None:
    return None


def run(quick: bool, workdir: str | None, progress: Callable[[str], None]) -> dict[str, Any]:
    n = 1_000 if quick else 10_000
    with tempfile.TemporaryDirectory(dir=workdir) as d:
        return asyncio.run(_run(Path(d), n, progress))


async def _run(root: Path, n: int, progress: Callable[[str], None]) -> dict[str, Any]:
    registry = Registry()
    registry.register(tock)
    clock = Clock()
    store = Store.open(root, config=StoreConfig(log=LogConfig()), instance_id="b1")
    store.log.term = store.log.last_term + 1
    await store.log.append(EventType.TERM_STARTED, "", payload={"node": "b1"})
    engine = Engine(store, registry, node_id="b1", clock=clock, concurrency=256)
    await engine.start()
    try:
        spec = ScheduleSpec(cron="* * * * *", overlap="allow-all")
        progress(f"creating {n:,} schedules")
        for i in range(0, n, 500):
            await asyncio.gather(
                *(engine.schedules.create(f"s{j}", "tock", spec) for j in range(i, min(n, i + 500)))
            )
        # from the next minute boundary, two whole minutes
        start = (int(clock.now()) // 60 + 1) * 60
        progress("waiting for the next minute, then two more")
        await asyncio.sleep(start - clock.now())
        s0 = engine.schedules.decide_seconds
        cpu0, wall0 = time.process_time(), time.perf_counter()
        await asyncio.sleep(120.5)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        decide = engine.schedules.decide_seconds - s0
        late = [
            e.timestamp - int(e.payload["schedule"]["nominal_ms"])
            for e in store.log.read()
            if e.event_type is EventType.TASK_SUBMITTED
            and start * 1000 <= int(e.payload["schedule"]["nominal_ms"]) < (start + 120) * 1000
        ]
    finally:
        await engine.stop()
        await store.close()
    late.sort()
    return {
        "schedules": n,
        "fired": len(late),
        "expected": 2 * n,
        "lateness_ms": {
            "p50": statistics.median(late) if late else None,
            "p99": late[int(len(late) * 0.99) - 1] if late else None,
            "max": late[-1] if late else None,
        },
        "decide_cpu_share": decide / wall,
        "process_cpu_share": cpu / wall,
    }


def summary_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    lat = r["lateness_ms"]
    return [
        ("schedules (`* * * * *`)", f"{r['schedules']:,}"),
        ("fired in two minutes (expected)", f"{r['fired']:,} ({r['expected']:,})"),
        ("fire lateness p50 / p99 / max", f"{lat['p50']} / {lat['p99']} / {lat['max']} ms"),
        ("the decisions' CPU, of one core", f"{r['decide_cpu_share'] * 100:.2f} %"),
        ("the process's CPU (tasks run too)", f"{r['process_cpu_share'] * 100:.1f} %"),
    ]
