"""`run_step`: one step of a workflow, unit-tested with a real `StepContext`, without
an engine: the function runs as the engine runs it (a coroutine on the loop, a
plain function in a thread), under its workflow's input and result models when the
workflow is given.

    out = await run_step(etl.steps["clean"], input={"ledger": ""},
                         results={"collect": {"rows": 100}})

`results` holds what the engine would hand the step: the results of the steps in
its `after=`, each of them (a name outside `after=` is refused, as the engine
never gives one). A durable main runs with a journal of the log: test it with
`WorkflowEnvironment`; the functions its `ctx.step`s call are plain functions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from apollo11.scheduler.durable import DurableWorkflow
from apollo11.scheduler.errors import InvalidArgumentError
from apollo11.scheduler.workflow import FencingToken, Step, StepContext, StepFn, Workflow, call_step

TASK_ID = "test-task"
NODE_ID = "test-node"


async def run_step(
    step: Step | StepFn | str,
    *,
    input: Any = None,
    results: Mapping[str, Any] | None = None,
    workflow: Workflow | None = None,
    attempt: int = 1,
    task_id: str = TASK_ID,
    last_heartbeat: Any = None,
    heartbeats: list[Any] | None = None,
) -> Any:
    """Run one step once and return what it returned (its exception propagates).

    `step`: a `Step` (`wf.steps["name"]`), a step's function, or a step's name with
    `workflow=`. With `workflow`, the step runs under the workflow's `input=` model
    (`input` is checked and given as the model, as at submit) and `result=` model.
    `heartbeats`: a list that each `ctx.heartbeat(details)` appends to."""
    spec = _spec(step, workflow)
    name = spec.name if spec is not None else str(getattr(step, "__name__", "step"))
    if isinstance(workflow, DurableWorkflow) or (spec is not None and spec.journaled):
        raise InvalidArgumentError(
            f"step {name!r} is a durable main: it needs the log's journal, so test it "
            f"with WorkflowEnvironment (apollo11.testing); the functions its ctx.step "
            f"calls are plain functions, to call directly"
        )
    given = dict(results or {})
    if spec is not None:
        _check_results(name, spec.after, given)
    fn: StepFn
    if workflow is not None and spec is not None:
        workflow.check_input(input)
        fn = workflow.runnable(name)
    else:
        fn = spec.fn if spec is not None else step  # type: ignore[assignment]
    beat: Callable[[Any], None] | None = heartbeats.append if heartbeats is not None else None
    ctx = StepContext(
        task_id=task_id,
        step=name,
        attempt=attempt,
        input=input,
        results=given,
        node_id=NODE_ID,
        workflow=workflow.name if workflow is not None else "",
        version=workflow.version if workflow is not None else 0,
        fencing_token=FencingToken(1, attempt),
        worker=NODE_ID,
        last_heartbeat=last_heartbeat,
        beat=beat,
    )
    return await call_step(fn, ctx)


def _spec(step: Step | StepFn | str, workflow: Workflow | None) -> Step | None:
    if isinstance(step, Step):
        return step
    if isinstance(step, str):
        if workflow is None:
            raise InvalidArgumentError(
                f"run_step({step!r}) names a step: say whose, run_step({step!r}, workflow=wf)"
            )
        found = workflow.steps.get(step)
        if found is None:
            raise InvalidArgumentError(
                f"workflow {workflow.name!r} has no step {step!r} "
                f"(its steps: {', '.join(workflow.steps) or 'none'})"
            )
        return found
    if not callable(step):
        raise InvalidArgumentError(
            f"run_step takes a Step, a step's function or its name, got {type(step).__name__}"
        )
    if workflow is not None:
        for s in workflow.steps.values():
            if s.fn is step or getattr(s.fn, "__wrapped__", None) is step:
                return s
        raise InvalidArgumentError(
            f"{getattr(step, '__name__', step)!r} is not a step of workflow {workflow.name!r}"
        )
    return None


def _check_results(name: str, after: tuple[str, ...], given: Mapping[str, Any]) -> None:
    extra = sorted(set(given) - set(after))
    missing = [a for a in after if a not in given]
    if extra or missing:
        wrong = []
        if extra:
            wrong.append(f"not in its after=: {', '.join(extra)}")
        if missing:
            wrong.append(f"missing: {', '.join(missing)}")
        raise InvalidArgumentError(
            f"step {name!r} runs after {list(after)}: results= must hold the result of each "
            f"of them and nothing else ({'; '.join(wrong)})"
        )
