"""Durable tasks (seed 004, docs/durable.md): code that waits for days, checkpointed
in the log, evicted while it waits, replayed on wake-up, non-determinism caught.

    approvals = DurableWorkflow("approvals", version=1)

    @approvals.main
    async def run(ctx: DurableContext, order: dict) -> dict:
        charge = await ctx.step("charge", charge_card, order, idempotency=DedupeKey())
        decision = await ctx.wait_for_event(f"approval:{order['id']}", timeout=timedelta(days=3))
        if decision is None:
            await ctx.step("refund", refund, charge, idempotency=Idempotent())
            return {"state": "refunded"}
        return {"state": "approved"}

The rules of determinism: the main may only compute from its input and what
`ctx.*` returns; every side effect, clock read or random draw goes through
`ctx.step`, `ctx.now()`, `ctx.uuid()`, `ctx.random()`; calls keep their order,
names and arguments for the life of a version (a changed flow is a new version).
Do not catch `BaseException` around a `ctx.*` call: waits unwind the main with one.
"""

from apollo11.scheduler.durable._check import Run, check_all, check_run
from apollo11.scheduler.durable._context import (
    ChildFailed,
    ChildHandle,
    DurableContext,
    DurableStepError,
    NonDeterminism,
    StepInfo,
    Wait,
    current_step,
    input_hash,
)
from apollo11.scheduler.durable._workflow import MAIN, DurableWorkflow
from apollo11.scheduler.workflow import FINAL, Checkpoint, DedupeKey, Idempotent, Retry, StepError

__all__ = [
    "FINAL",
    "MAIN",
    "Checkpoint",
    "ChildFailed",
    "ChildHandle",
    "DedupeKey",
    "DurableContext",
    "DurableStepError",
    "DurableWorkflow",
    "Idempotent",
    "NonDeterminism",
    "Retry",
    "Run",
    "StepError",
    "StepInfo",
    "Wait",
    "check_all",
    "check_run",
    "current_step",
    "input_hash",
]
