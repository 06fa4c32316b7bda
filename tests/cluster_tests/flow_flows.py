"""Workflows under flow control for the cluster's flow-control tests: every node and
worker loads this module (tests/cluster_tests/test_flow_limits.py).

Each execution of a step writes to a ledger (a file the input names) when it begins,
after each slice of its work, and when it ends, with the time, so a test can tell
how many ran against one host at any instant, and where:

    start|tick|end TASK STEP ATTEMPT HOST WORKER UNIX_TIME

One write(2) per line, appended: lines never interleave and survive a SIGKILL.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from apollo11.scheduler.workflow import Concurrency, Idempotent, Retry, StepContext, Workflow

RETRY = Retry(attempts=3, backoff_s=0.1, jitter=0)


def note(ctx: StepContext, what: str) -> None:
    given = dict(ctx.input or {})
    line = (
        f"{what} {ctx.task_id} {ctx.step} {ctx.attempt} {given.get('host')} "
        f"{ctx.worker or ctx.node_id} {time.time():.6f}\n"
    )
    fd = os.open(str(given["ledger"]), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


async def _work(ctx: StepContext) -> dict[str, Any]:
    """Input: {"host", "ledger", "step_seconds" (1), "slices" (1)}: the work is
    `slices` sleeps, a line after each."""
    given = dict(ctx.input or {})
    slices = int(given.get("slices", 1))
    each = float(given.get("step_seconds", 1.0)) / slices
    note(ctx, "start")
    for i in range(slices):
        await asyncio.sleep(each)
        note(ctx, "end" if i == slices - 1 else "tick")
    return {"host": given.get("host")}


# A fixed timeout, so that the limit test does not depend on the `auto` one's
# history; an adopted attempt's `auto` timeout is test_flow_limits.py's
# test_an_adopted_attempt_is_not_timed_out_by_the_failover (`auto` below).
TIMEOUT_S = 60.0

# At most two runs against one host at once.
hosts = Workflow("hosts", version=1, concurrency=Concurrency(key="host", max=2))
hosts.step(name="work", idempotency=Idempotent(), retry=RETRY, timeout=TIMEOUT_S)(_work)

# One at a time per host.
solo = Workflow("solo", version=1, concurrency=Concurrency(key="host", max=1))
solo.step(name="work", idempotency=Idempotent(), retry=RETRY, timeout=TIMEOUT_S)(_work)

# The default timeout (`auto`), no flow control.
auto = Workflow("auto", version=1)
auto.step(name="work", idempotency=Idempotent(), retry=RETRY)(_work)
