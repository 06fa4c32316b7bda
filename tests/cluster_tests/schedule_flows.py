"""A workflow and a schedule declared beside it, for the cluster's schedule test:
every node loads this module, and whichever leads fires it."""

from __future__ import annotations

from typing import Any

from apollo11.scheduler.schedules import Schedule
from apollo11.scheduler.workflow import Idempotent, StepContext, Workflow

tick = Workflow("tick", version=1)


@tick.step(idempotency=Idempotent())
def beat(ctx: StepContext) -> dict[str, Any]:
    return {"ok": True}


every_second = Schedule("every-second", workflow=tick, every="1s", overlap="allow-all")

# for the whole cluster stopped longer than its window: the old times are missed
short_window = Schedule(
    "short-window", workflow=tick, every="1s", overlap="allow-all", catchup_window="10s"
)
