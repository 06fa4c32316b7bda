"""Workflows with flow control for tests that start a node process
(`--workflows apollo11.scheduler.examples,tests.api.flowflows`).

`gated`: one task per host at once; its step runs until the file its input names
exists, so a test holds a slot as long as it likes and releases it by touching it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from apollo11.scheduler.workflow import Concurrency, Idempotent, Rate, StepContext, Workflow

gated = Workflow(
    "gated",
    version=1,
    concurrency=Concurrency(key="host", max=1),
    rate=Rate(key="host", limit=100, per="1s", burst=10, name="starts"),
)


@gated.step(idempotency=Idempotent())
async def hold(ctx: StepContext) -> None:
    gate = Path(ctx.input["gate"])
    while not gate.exists():
        await asyncio.sleep(0.05)
