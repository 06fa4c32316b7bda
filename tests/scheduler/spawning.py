"""Workflows for tests/scheduler/test_step_processes.py: Python steps that start
processes. Input: {"pidfile": PATH, "guarded": bool}."""

from __future__ import annotations

import asyncio
import subprocess

from apollo11.scheduler.childguard import stop
from apollo11.scheduler.workflow import Idempotent, StepContext, Workflow

spawn = Workflow("spawn")


@spawn.step(idempotency=Idempotent(), timeout=60)
async def start(ctx: StepContext) -> None:
    pidfile = ctx.input["pidfile"]
    # A background child of a shell that ends at once: an orphan.
    script = f"sleep 120 >/dev/null 2>&1 & echo $! > {pidfile}"
    if ctx.input.get("guarded"):
        proc = await asyncio.create_subprocess_exec(
            *ctx.guarded(["/bin/sh", "-c", f"{script}; sleep 120"]), start_new_session=True
        )
        try:
            await proc.wait()
        except asyncio.CancelledError:
            await stop(proc)
            raise
    else:
        subprocess.run(["/bin/sh", "-c", script], check=True)
        await asyncio.sleep(120)
