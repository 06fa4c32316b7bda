"""A workflow whose steps log (tests/scheduler/test_logfmt.py)."""

import logging

from apollo11.scheduler.workflow import Idempotent, StepContext, Workflow

log = logging.getLogger("logflows")
chatty = Workflow("chatty", version=1)


@chatty.step(idempotency=Idempotent())
def in_a_thread(ctx: StepContext) -> None:
    log.warning("thread step working on %s", ctx.input)


@chatty.step(after=["in_a_thread"], idempotency=Idempotent())
async def on_the_loop(ctx: StepContext) -> None:
    log.warning("async step working on %s", ctx.input)
