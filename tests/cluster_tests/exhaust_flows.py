"""A workflow whose last step fails for good under on_exhausted="compensate", for the
cluster test of compensation across a kill of the primary
(tests/cluster_tests/test_exhaustion.py); every node loads this module.

a -> b -> c -> d: a, b and c are not idempotent and declare a compensation; d fails
at once (FINAL). Each compensation writes a ledger (the file the input names) when
it begins and when it ends, with the node it ran on:

    begin|end STEP NODE

and the compensation of the step the input names as `hold` waits, once begun, until
the file `release` (beside the ledger) exists: the test kills the primary while it
waits. One write(2) per line, appended: lines never interleave and survive a SIGKILL.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from apollo11.scheduler.workflow import FINAL, NotIdempotent, Retry, StepContext, Workflow


def note(ctx: StepContext, what: str) -> None:
    line = f"{what} {ctx.step} {ctx.node_id}\n"
    fd = os.open(str(ctx.input["ledger"]), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def undo(ctx: StepContext) -> None:
    note(ctx, "begin")
    if ctx.input.get("hold") == ctx.step:
        release = Path(ctx.input["ledger"]).with_name("release")
        deadline = time.monotonic() + 120
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    note(ctx, "end")


def done(ctx: StepContext) -> str:
    return ctx.step


def broken(ctx: StepContext) -> None:
    raise ValueError("the order cannot be shipped")


undo_order = Workflow("undo_order", on_exhausted="compensate")
for _name, _after in (("a", []), ("b", ["a"]), ("c", ["b"])):
    undo_order.step(name=_name, after=_after, idempotency=NotIdempotent(compensate=undo))(done)
undo_order.step(
    name="d",
    after=["c"],
    idempotency=NotIdempotent(compensate=undo),
    retry=Retry(on={ValueError: FINAL}),
)(broken)
