"""A workflow whose result model is set after its steps (tests/scheduler/test_typed.py):
a step's own process imports this module and never registers the workflow, and must
check the result all the same."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from apollo11.scheduler.workflow import Idempotent, StepContext, Workflow


class Total(BaseModel):
    total: int


late = Workflow("late-result", version=1)


@late.step(idempotency=Idempotent())
def only(ctx: StepContext) -> dict[str, Any]:
    return {"total": "not a number"}


late.result = Total
