"""`DurableWorkflow`: a workflow whose one step, `main`, drives the user's code.

It is a `Workflow` like any other (loaded by `--workflows`, submitted with
SubmitTask, versioned by the registry). Its step `main` is declared
`Checkpoint()` (it resumes from its own progress markers: the checkpoints) and
`journaled` (its attempt gets a `ctx.journal` that reaches the log: the engine's
when it runs embedded, its worker's stream to the primary on a worker). An attempt
of `main` builds a `DurableContext` from the task's checkpoints and calls the
user's function with it and the task's input:

* it returns: the buffered checkpoints are recorded, then its result is the
  step's (STEP_SUCCEEDED);
* it waits: the WAIT is recorded and the attempt ends, without an outcome;
* it asked for something its log does not hold at that position: the step fails
  for good with the non-determinism report (task NONDETERMINISTIC);
* it raises: the step fails, and is retried by `retry` (default one attempt:
  a replay would reach the same exception).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from apollo11.scheduler.durable._context import (
    DurableContext,
    JournalFailed,
    NonDeterminism,
    Suspended,
)
from apollo11.scheduler.errors import WorkflowDefinitionError
from apollo11.scheduler.workflow import Checkpoint, Retry, Step, StepContext, StepError, Workflow

MAIN = "main"
DEFAULT_MAIN_TIMEOUT_S = 3600.0

MainFn = Callable[[DurableContext, Any], Awaitable[Any]]
M = TypeVar("M", bound=MainFn)


class DurableWorkflow(Workflow):
    """`DurableWorkflow("approvals", version=1)`, then `@approvals.main` on
    `async def run(ctx: DurableContext, input) -> result`.

    `timeout_s` bounds one attempt of the main (replay plus the `ctx.step`s it runs
    before it waits or returns); `retry` is the main's own policy."""

    def __init__(
        self,
        name: str,
        version: int = 1,
        *,
        description: str = "",
        timeout_s: float = DEFAULT_MAIN_TIMEOUT_S,
        retry: Retry | None = None,
        input: Any = None,
    ) -> None:
        # input: a pydantic model the input must fit; the main gets an instance of it
        super().__init__(name=name, version=version, description=description, input=input)
        self.compensate_on_cancel = False  # its ctx.steps declare no compensations yet
        self.timeout_s = timeout_s
        self.retry = retry or Retry(attempts=1)
        self.main_fn: MainFn | None = None

    def main(self, fn: M) -> M:
        """Decorator: the durable main, `async def (ctx, input) -> result`."""
        if self.main_fn is not None:
            self._errors.append("it has two mains")
        self.main_fn = fn

        async def drive(ctx: StepContext) -> Any:
            # a plain function, not the bound method: executors key caches by the step's
            # function, and a Workflow (a dataclass) is not hashable
            return await self._drive(ctx)

        drive.__name__ = drive.__qualname__ = f"{self.name}.main"
        self.add_step(
            Step(
                name=MAIN,
                fn=drive,
                after=(),
                idempotency=Checkpoint(),
                retry=self.retry,
                timeout=self.timeout_s,
                compensation_retry=Retry(),
                journaled=True,
            )
        )
        return fn

    def validate(self) -> None:
        if self.main_fn is None:
            raise WorkflowDefinitionError(
                f"durable workflow {self.name!r} v{self.version} has no main: decorate its "
                f"async function with @{self.name}.main"
            )
        super().validate()

    async def _drive(self, ctx: StepContext) -> Any:
        """One attempt of the main: replay to the end of the log, then run on."""
        journal = ctx.journal
        main = self.main_fn
        if journal is None or main is None:
            raise StepError(
                f"durable workflow {self.name!r}: its main was given no journal (run it "
                f"through an engine or a worker, not by calling the step)",
                final=True,
            )
        dctx = DurableContext(journal, task_id=ctx.task_id, attempt=ctx.attempt)
        try:
            result = await main(dctx, ctx.input)
            dctx.finished()
        except Suspended as s:
            await journal.record(dctx.pending, wait=s.wait)
            return None  # the WAIT ended the attempt: nothing more is recorded for it
        except NonDeterminism as n:
            raise StepError(n.describe(), final=True, nondeterminism=n.report()) from None
        except JournalFailed as j:
            raise j.error from None
        await dctx.flush()
        return result
