"""A workflow for the export and redaction tests (tests/api/test_export_cli.py); the
node loads this module.

`echo`: one step that returns its input's `text` (a long one tests values exported
by reference). `stamp`: one step that returns the wall clock, in nanoseconds, when it
began (tests/api/measure_export.py's `--fine` probe).
"""

from __future__ import annotations

import time

from apollo11.scheduler.workflow import Idempotent, StepContext, Workflow

echo = Workflow("echo")


@echo.step(idempotency=Idempotent())
def say(ctx: StepContext) -> str:
    return str(ctx.input["text"])


stamp = Workflow("stamp")


@stamp.step(idempotency=Idempotent())
def began(ctx: StepContext) -> int:
    return time.time_ns()
