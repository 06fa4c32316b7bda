"""A workflow that pauses when its step's retries run out, for the CLI tests of
`apollo11 tasks --state paused` and `apollo11 retry TASK` (tests/api/test_pause_cli.py);
the node loads this module.

`flaky_export`: one step that fails (one attempt, on_exhausted="pause") until the file
its input names as `fixed` exists, then returns "exported".
"""

from __future__ import annotations

from pathlib import Path

from apollo11.scheduler.workflow import Idempotent, Retry, StepContext, StepError, Workflow

flaky_export = Workflow("flaky_export", on_exhausted="pause")


@flaky_export.step(idempotency=Idempotent(), retry=Retry(attempts=1))
def export(ctx: StepContext) -> str:
    if not Path(ctx.input["fixed"]).exists():
        raise StepError("the warehouse refused the export")
    return "exported"
