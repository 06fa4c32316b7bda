"""Steps with limits, for the worker's tests (imported by name in child processes too).

`hog` allocates, 8 MiB (touched) at a time, far past its limit; `spin` burns CPU
without end; `light` stays under both. Their retry rules are the ones a user would
write for these causes: a step stopped at its limit is not retried.

`wlimits`: each step alone, assigned by hand (tests/scheduler/worker/test_limits.py);
`fenced`: the three side by side in one task, run by a node's engine on a worker
(`fenced_memory`: without `spin`, whose CPU second is too dear for the fast tier).
"""

from __future__ import annotations

import os
from typing import Any

from apollo11.scheduler.workflow import (
    FINAL,
    CpuLimitExceeded,
    Idempotent,
    Limits,
    MemoryLimitExceeded,
    Retry,
    StepContext,
    Workflow,
)

wf = Workflow("wlimits", version=1)
ONCE = Idempotent()
# a step stopped at its limit would be again: its rules say so
NOT_AGAIN = Retry(
    attempts=3, backoff_s=0.01, on={MemoryLimitExceeded: FINAL, CpuLimitExceeded: FINAL}
)
CHUNK = 8 << 20


def _allocate(ctx: StepContext) -> int:
    kept = []
    for _ in range(int(ctx.input.get("chunks", 256)) if ctx.input else 256):  # 2 GiB
        kept.append(bytearray(CHUNK))  # zeroed: its pages are touched, really used
    return len(kept)


HOG = Limits(memory="128MiB")
SPIN = Limits(cpu_s=1)
LIGHT = Limits(memory="256MiB", cpu_s=30)


@wf.step(idempotency=ONCE, limits=HOG, retry=NOT_AGAIN)
def hog(ctx: StepContext) -> int:
    return _allocate(ctx)


@wf.step(idempotency=ONCE, retry=NOT_AGAIN)
def unlimited_hog(ctx: StepContext) -> int:
    """No limits of its own: the worker's --step-memory holds it."""
    return _allocate(ctx)


@wf.step(idempotency=ONCE, limits=SPIN, retry=NOT_AGAIN)
def spin(ctx: StepContext) -> None:
    while True:
        pass


@wf.step(idempotency=ONCE, limits=LIGHT)
def light(ctx: StepContext) -> dict[str, Any]:
    return {"pid": os.getpid(), "kept": len(bytearray(CHUNK))}


fenced = Workflow("fenced", version=1)
fenced.step(name="hog", idempotency=ONCE, limits=HOG, retry=NOT_AGAIN)(hog)
fenced.step(name="spin", idempotency=ONCE, limits=SPIN, retry=NOT_AGAIN)(spin)
fenced.step(name="light", idempotency=ONCE, limits=LIGHT)(light)

# the same without the CPU second, for the fast tier (tests/scheduler/dispatch/)
fenced_memory = Workflow("fenced_memory", version=1)
fenced_memory.step(name="hog", idempotency=ONCE, limits=HOG, retry=NOT_AGAIN)(hog)
fenced_memory.step(name="light", idempotency=ONCE, limits=LIGHT)(light)
