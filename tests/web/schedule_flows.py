"""A workflow and a nightly schedule declared beside it, for the Schedules page's
browser test: the node reconciles it into its log as it starts leading."""

from __future__ import annotations

from typing import Any

from apollo11.scheduler.schedules import Schedule
from apollo11.scheduler.workflow import Idempotent, StepContext, Workflow

report = Workflow("report", version=1)


@report.step(idempotency=Idempotent())
def build(ctx: StepContext) -> dict[str, Any]:
    return {"ok": True}


nightly = Schedule("nightly-report", workflow=report, cron="0 3 * * *", tz="Europe/Berlin")
