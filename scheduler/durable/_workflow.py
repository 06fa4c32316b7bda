"""`DurableWorkflow`: a workflow whose one step, `main`, drives the user's code.

It is a `Workflow` like any other (loaded by `--workflows`, submitted with
SubmitTask, versioned by the registry). Its step `main` is declared
`Checkpoint()` (it resumes from its own progress markers: the checkpoints) and
`journaled` (its attempt gets a `ctx.journal` that reaches the log: the engine's
when it runs embedded, its worker's stream to the primary on a worker). An attempt
of `main` builds a `DurableContext` from the task's checkpoints and calls the
user's function with it and the task's input:

* it returns: the buffered checkpoints are recorded, then its result is the
  step's (STEP_SUCCEEDED), once it fits the workflow's `result=` model if it
  declares one (the model's JSON is recorded; one that does not fit fails the
  attempt, its checkpoints kept);
* it waits: the WAIT is recorded and the attempt ends, without an outcome;
* it asked for something its log does not hold at that position: the step fails
  for good with the non-determinism report (task NONDETERMINISTIC);
* it raises: the step fails, and is retried by `retry` (default one attempt:
  a replay would reach the same exception).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from apollo11.scheduler.durable._context import (
    DurableContext,
    DurableStepError,
    Frontier,
    JournalFailed,
    NonDeterminism,
    Suspended,
)
from apollo11.scheduler.errors import WorkflowDefinitionError
from apollo11.scheduler.retrypolicy import Exhausted
from apollo11.scheduler.workflow import (
    Checkpoint,
    Concurrency,
    Debounce,
    InputT,
    Journal,
    Rate,
    ResultT,
    Retry,
    Step,
    StepContext,
    StepError,
    Workflow,
)

MAIN = "main"
DEFAULT_MAIN_TIMEOUT_S = 3600.0

MainFn = Callable[[DurableContext, Any], Awaitable[Any]]
M = TypeVar("M", bound=MainFn)


class DurableWorkflow(Workflow[InputT, ResultT]):
    """`DurableWorkflow("approvals", version=1)`, then `@approvals.main` on
    `async def run(ctx: DurableContext, input) -> result`.

    `timeout_s` bounds one attempt of the main (replay plus the `ctx.step`s it runs
    before it waits or returns); `retry` is the main's own policy. `on_exhausted`:
    what the main failing for good does to the task (as a Workflow's): "pause" (an
    operator's retry replays the main from its checkpoints) or "compensate" (its
    NotIdempotent ctx.steps that succeeded are undone, last first)."""

    def __init__(
        self,
        name: str,
        version: int = 1,
        *,
        description: str = "",
        timeout_s: float = DEFAULT_MAIN_TIMEOUT_S,
        retry: Retry | None = None,
        on_exhausted: Exhausted | None = None,
        input: type[InputT] | None = None,
        result: type[ResultT] | None = None,
        concurrency: Concurrency | Sequence[Concurrency] | None = None,
        rate: Rate | Sequence[Rate] | None = None,
        debounce: Debounce | None = None,
        fairness: str | Callable[[Any], Any] | None = None,
    ) -> None:
        # input: a pydantic model the input must fit; the main gets an instance of it.
        # result: a pydantic model its return value must fit (scheduler/typed.py).
        # concurrency, rate, debounce, fairness: as a Workflow's (a task that WAITs
        # holds no slot of its concurrency limits while it waits).
        super().__init__(
            name=name,
            version=version,
            description=description,
            input=input,
            result=result,
            concurrency=concurrency,
            rate=rate,
            debounce=debounce,
            fairness=fairness,
            on_exhausted=on_exhausted,
        )
        # cancelled: the NotIdempotent ctx.steps that succeeded are undone, last first
        self.compensate_on_cancel = True
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

        async def undo(ctx: StepContext) -> None:
            await self._undo_all(ctx)

        drive.__name__ = drive.__qualname__ = f"{self.name}.main"
        undo.__name__ = undo.__qualname__ = f"{self.name}.main.undo"
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
                compensation=undo,
            )
        )
        return fn

    def _result_checked(self, step: Step) -> Step:
        # the main's step returns None when a wait ends its attempt: `_drive` checks
        # the main's own return value instead
        return step

    def validate(self) -> None:
        if self.main_fn is None:
            raise WorkflowDefinitionError(
                f"durable workflow {self.name!r} v{self.version} has no main: decorate its "
                f"async function with @{self.name}.main"
            )
        super().validate()

    async def _undo_all(self, ctx: StepContext) -> None:
        """The main's compensation (the task was cancelled): replay it to the end of its
        log, running nothing, to find the NotIdempotent ctx.steps that succeeded and
        how each is undone; undo them, last first. Retried by the engine until it
        succeeds, so each undo must be safe to run again (as every compensation)."""
        main = self.main_fn
        if ctx.journal is None or main is None:
            raise StepError(f"durable workflow {self.name!r}: its compensation needs a journal")
        dctx = DurableContext(_ReadOnly(ctx.journal), task_id=ctx.task_id, attempt=ctx.attempt)
        dctx.compensations = []
        try:
            await main(dctx, ctx.input)
        except NonDeterminism as n:
            raise StepError(f"cannot find what to undo: {n.describe()}", final=True) from None
        except (Frontier, Suspended, DurableStepError):
            pass  # the end of the log, or a failure it recorded: what it did is found
        except Exception:
            # a main that failed for good under on_exhausted="compensate" raises again
            # where it did: what it did before is found
            pass
        for seq, name, undo, output, args in reversed(dctx.compensations):
            await dctx.run_undo(name, seq, undo, output, args)

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
        # after the flush: the ctx.steps that ran are on record even if the result
        # does not fit (a retry replays them instead of running them again)
        return self.fit_result(MAIN, result)


class _ReadOnly:
    """A journal's checkpoints, for a replay that must run and record nothing (the
    compensation finding what to undo): every position past the log stops it."""

    replay_only = True

    def __init__(self, journal: Journal) -> None:
        self.checkpoints = list(journal.checkpoints)
        self.wait = None  # a wait past the log is past the end here
        self.first_event_id = journal.first_event_id

    def now_ms(self) -> int:
        raise Frontier(-1)

    async def sleep(self, seconds: float) -> None:
        raise Frontier(-1)

    async def resolve(self, wait: Mapping[str, Any], now_ms: int) -> Mapping[str, Any] | None:
        raise Frontier(-1)

    def plan_child(self, *args: Any) -> str:
        raise Frontier(-1)

    async def record(self, checkpoints: Any, wait: Any = None) -> None:
        raise Frontier(-1)
