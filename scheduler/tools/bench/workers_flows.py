"""Workflows of `apollo11 bench workers`, loaded by its nodes and its workers by name
(`--workflows apollo11.scheduler.tools.bench.workers_flows`).

Each step returns `began`, its own `time.time()` as it starts: beside the STARTED
event's timestamp in the log, that is how long the attempt took to begin where it
ran (both clocks are this machine's).

* `bench_stamp`: five no-op steps in a chain (a five-step task, like etl's);
* `bench_sleep`: one async step sleeping `seconds` (default 1): I/O-bound work, as
  many at once as there are slots;
* `bench_spin`: one plain function burning the CPU in pure Python for `seconds`:
  it holds the GIL of whatever process runs it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from apollo11.scheduler.workflow import Idempotent, StepContext, Workflow

bench_stamp = Workflow("bench_stamp", version=1, description="five no-op steps, timestamped")
bench_sleep = Workflow("bench_sleep", version=1, description="one async sleep")
bench_spin = Workflow("bench_spin", version=1, description="one CPU-bound pure-Python step")


def _seconds(ctx: StepContext, default: float) -> float:
    return float((ctx.input or {}).get("seconds", default))


async def _stamp(ctx: StepContext) -> dict[str, Any]:
    return {"began": time.time()}


for _i, _name in enumerate(("s1", "s2", "s3", "s4", "s5")):
    bench_stamp.step(name=_name, after=[f"s{_i}"] if _i else [], idempotency=Idempotent())(_stamp)


@bench_sleep.step(idempotency=Idempotent())
async def sleep(ctx: StepContext) -> dict[str, Any]:
    began = time.time()
    await asyncio.sleep(_seconds(ctx, 1.0))
    return {"began": began}


@bench_spin.step(idempotency=Idempotent(), timeout=3600)
def spin(ctx: StepContext) -> dict[str, Any]:
    began = time.time()
    end = time.perf_counter() + _seconds(ctx, 1.0)
    n = 0
    while time.perf_counter() < end:
        for _ in range(1000):
            n += 1
    return {"began": began, "loops": n}
