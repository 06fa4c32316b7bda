"""A tiny workflow module for the worker's tests (imported by name in child processes too).

Steps that wait do so until the file named by input["release"] exists, so that a
test decides when they end; they heartbeat their pid first, so that the test knows
they began and where they run.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from apollo11.scheduler.workflow import Idempotent, StepContext, StepError, Workflow

wf = Workflow("wtest", version=1)
ONCE = Idempotent()


def _describe(ctx: StepContext) -> dict[str, Any]:
    return {
        "input": ctx.input,
        "results": dict(ctx.results),
        "worker": ctx.worker,
        "node_id": ctx.node_id,
        "fencing_token": list(ctx.fencing_token),
        "last_heartbeat": ctx.last_heartbeat,
        "workflow": [ctx.workflow, ctx.version],
        "pid": os.getpid(),
    }


@wf.step(idempotency=ONCE)
async def echo(ctx: StepContext) -> dict[str, Any]:
    return _describe(ctx)


@wf.step(idempotency=ONCE)
def sync_echo(ctx: StepContext) -> dict[str, Any]:
    return _describe(ctx)


@wf.step(idempotency=ONCE)
async def wait_async(ctx: StepContext) -> str:
    ctx.heartbeat({"pid": os.getpid(), "progress": 0.5})
    release = Path(ctx.input["release"])
    try:
        while not release.exists():
            await asyncio.sleep(0.02)
    except asyncio.CancelledError:
        Path(ctx.input["cancelled"]).write_text("cancelled")
        raise
    return "released"


@wf.step(idempotency=ONCE)
def wait_sync(ctx: StepContext) -> str:
    ctx.heartbeat({"pid": os.getpid(), "progress": 0.5})
    release = Path(ctx.input["release"])
    while not release.exists():
        time.sleep(0.02)
    return "released"


@wf.step(idempotency=ONCE)
def die(ctx: StepContext) -> None:
    os._exit(9)


@wf.step(idempotency=ONCE)
def declared(ctx: StepContext) -> None:
    raise StepError("the card was declined", code=7)


@wf.step(idempotency=ONCE)
async def crash(ctx: StepContext) -> None:
    raise KeyError("missing")


class Throttled(StepError, ConnectionError):
    """A step's own error class: a StepError (its details travel) and a ConnectionError
    (the primary's rules for connections match it by its MRO)."""


@wf.step(idempotency=ONCE)
def throttled(ctx: StepContext) -> None:
    raise Throttled("429 too many requests", retry_after=2.5)


@wf.step(idempotency=ONCE)
async def unencodable(ctx: StepContext) -> object:
    return object()
