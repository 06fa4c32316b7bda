"""The workflow of `apollo11 bench schedules --failover`, loaded by its nodes by name
(`--workflows apollo11.scheduler.tools.bench.schedules_flows`).

`bench_tick`: one no-op step. The bench's schedules fire it every second, so what
the nodes spend is the firing and the log, not the work.
"""

from __future__ import annotations

from apollo11.scheduler.workflow import Idempotent, StepContext, Workflow

bench_tick = Workflow("bench_tick", version=1, description="one no-op step")


@bench_tick.step(idempotency=Idempotent())
def tick(ctx: StepContext) -> None:
    return None
