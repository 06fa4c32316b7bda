"""A backfill beside ordinary tasks: does it queue their dispatch behind it?

On a real store and engine with fsync on, in one process: ordinary tasks are
submitted at a steady rate (40/s; --quick the same, for less time) and each one's
dispatch latency is read from the log (its TASK_SUBMITTED to its first
STEP_STARTED). Three phases of the same length, side by side: the baseline, then
the same while a backfill of 10,000 nominal times runs (its own tasks run too),
then the baseline again. A backfill fires at most 20 times a second, so 10,000
take over eight minutes: a phase sees a window of it (60 s: 1,200 fired; --quick
20 s), which is the steady state it keeps until it ends. The figure is the
backfill phase's p99 against the baselines' (the target: within 2x).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from apollo11.scheduler.clock import Clock
from apollo11.scheduler.engine import Engine
from apollo11.scheduler.log import EventType, LogConfig
from apollo11.scheduler.schedules import ScheduleSpec
from apollo11.scheduler.state import Store, StoreConfig
from apollo11.scheduler.workflow import Idempotent, Registry, StepContext, Workflow

RATE = 40  # ordinary submissions a second
BACKFILL = 10_000

plain = Workflow("plain", version=1)
filled = Workflow("filled", version=1)


@plain.step(idempotency=Idempotent())
def work(ctx: StepContext) -> None:
    return None


@filled.step(idempotency=Idempotent())
def refill(ctx: StepContext) -> None:
    return None


def run(quick: bool, workdir: str | None, progress: Callable[[str], None]) -> dict[str, Any]:
    seconds = 20 if quick else 60
    with tempfile.TemporaryDirectory(dir=workdir) as d:
        return asyncio.run(_run(Path(d), seconds, progress))


async def _run(root: Path, seconds: int, progress: Callable[[str], None]) -> dict[str, Any]:
    registry = Registry()
    registry.register(plain)
    registry.register(filled)
    clock = Clock()
    store = Store.open(root, config=StoreConfig(log=LogConfig()), instance_id="b1")
    store.log.term = store.log.last_term + 1
    await store.log.append(EventType.TERM_STARTED, "", payload={"node": "b1"})
    engine = Engine(store, registry, node_id="b1", clock=clock, concurrency=256)
    await engine.start()
    phases: dict[str, list[str]] = {}
    try:
        now = datetime.fromtimestamp(clock.now(), UTC).replace(microsecond=0)
        # every second for the last 10,000 seconds; it ends now, so only the backfill fires
        spec = ScheduleSpec(every="1s", end=now, overlap="allow-all")
        await engine.schedules.create("past", "filled", spec)
        progress(f"baseline: {RATE} tasks/s for {seconds} s")
        phases["before"] = await _submit(engine, seconds)
        start = now - timedelta(seconds=BACKFILL - 1)
        started = await engine.schedules.backfill("past", start, now)
        progress(f"with a backfill of {started.times:,} times: {RATE} tasks/s for {seconds} s")
        phases["backfill"] = await _submit(engine, seconds)
        await engine.schedules.delete("past")  # the backfill stops with its schedule
        progress(f"baseline again: {seconds} s")
        phases["after"] = await _submit(engine, seconds)
        await asyncio.sleep(2)  # the last ones dispatched
        submitted: dict[str, int] = {}
        dispatched: dict[str, int] = {}
        fired = 0
        for e in store.log.read():
            if e.event_type is EventType.TASK_SUBMITTED:
                submitted[e.task_id] = e.timestamp
                fired += e.payload.get("workflow") == "filled"
            elif e.event_type is EventType.STEP_STARTED and e.task_id not in dispatched:
                dispatched[e.task_id] = e.timestamp
    finally:
        await engine.stop()
        await store.close()
    out: dict[str, Any] = {"rate": RATE, "seconds": seconds, "backfill_fired": fired}
    for name, ids in phases.items():
        lat = sorted(dispatched[t] - submitted[t] for t in ids if t in dispatched)
        out[name] = {
            "tasks": len(ids),
            "dispatched": len(lat),
            "p50_ms": statistics.median(lat) if lat else None,
            "p99_ms": lat[max(0, int(len(lat) * 0.99) - 1)] if lat else None,
        }
    base = max(out["before"]["p99_ms"] or 0, out["after"]["p99_ms"] or 0)
    out["p99_ratio"] = (out["backfill"]["p99_ms"] or 0) / base if base else None
    return out


async def _submit(engine: Engine, seconds: int) -> list[str]:
    """RATE submissions a second, paced against the wall clock, each on its own."""
    ids: list[str] = []
    t0 = time.perf_counter()
    pending: set[asyncio.Task[Any]] = set()
    for i in range(seconds * RATE):
        delay = t0 + i / RATE - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        t = asyncio.create_task(engine.submit("plain", None))
        pending.add(t)
        t.add_done_callback(pending.discard)
        t.add_done_callback(lambda done: ids.append(done.result().task_id))
    await asyncio.gather(*pending)
    return ids


def summary_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    def shown(phase: dict[str, Any]) -> str:
        return f"{phase['p50_ms']} / {phase['p99_ms']} ms ({phase['dispatched']:,} tasks)"

    ratio = r["p99_ratio"]
    return [
        (f"ordinary tasks, {r['rate']}/s, {r['seconds']} s a phase", ""),
        ("dispatch p50 / p99, baseline before", shown(r["before"])),
        ("dispatch p50 / p99, beside the backfill", shown(r["backfill"])),
        ("dispatch p50 / p99, baseline after", shown(r["after"])),
        ("backfill tasks fired in its phase", f"{r['backfill_fired']:,}"),
        ("p99 beside ÷ the worse baseline (≤ 2)", "n/a" if ratio is None else f"{ratio:.2f}"),
    ]
