"""What happens next to one task: `decide(task, workflow, busy, now, world) -> list[Action]`.

A pure function, like Temporal's activation -> completion and raft's `Ready`:
it reads the task's replayed state, the workflow it runs, which of its steps
this engine has something running for (`busy`) and the time, and names the
effects as data. It starts nothing, arms nothing, writes nothing, and never
raises for one task's fault: a task it cannot decide gets `Stuck(reason)` and
the others go on. The engine acts on the actions, in order
(scheduler/engine/engine.py); whether a slot is free to start a step is the
engine's to know, not the decision's.

The rules, step by step in declaration order:

* a step done (SUCCEEDED or SKIPPED) needs nothing, unless it owes a
  compensation;
* a step this engine is running is left alone, unless its task was
  cancelled: then its attempt is cancelled;
* a step STARTED that nothing here runs was begun by a node that died (or
  by this one before it lost the lease): it is failed as lost, unless it
  runs on a worker, which outlives primaries: then it is adopted (its worker
  reports it, or it is lost when the worker does not come back);
* a compensation owed is run, or resumed, once nothing downstream of the
  step runs, is about to, owes one or is compensating (dependents first:
  reverse topological order);
* nothing new starts in a task that is cancelled or failed for good;
* a step failed for good whose rule says `on_exhausted="pause"` pauses the task
  (`PauseTask`: its TASK_PAUSED; an operator's retry resumes it); one that says
  "compensate" stops the task's running attempts as a cancel does and, once
  none runs, names the steps that succeeded and declared a compensation
  (`CompensateTask`: its TASK_COMPENSATING), which are then compensated by the
  rule above, dependents first: the task ends COMPENSATED;
* a spawned task whose parent was cancelled or has returned is cancelled too,
  unless it was spawned with the parent-close policy "abandon";
* a durable main that is WAITING runs again (its code replays, docs/durable.md)
  once its wait can resolve (an event it takes is recorded, a child it waits
  for has finished, a deadline is due), and wakes the engine at the next
  deadline otherwise;
* otherwise a step whose dependencies are done runs when `retry` says it may
  (now, or a wake-up at the time its backoff ends).

Time comes in as `now`, the retry times from the log, so a new primary
deciding the same task reaches the same actions. `world` is the rest of the
replayed state, read only: the event index, and a durable task's parent and
children.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from apollo11.scheduler import waits
from apollo11.scheduler.retry import due_at, final_after_loss, may_run_again, then_after_loss
from apollo11.scheduler.retrypolicy import Exhausted
from apollo11.scheduler.state.model import (
    DONE,
    StepStatus,
    TaskState,
    TaskStatus,
    joined,
)
from apollo11.scheduler.workflow import Workflow

_STARTED = StepStatus.STARTED
_COMPENSATING = StepStatus.COMPENSATING
_COMPENSATED = StepStatus.COMPENSATED
_FAILED = StepStatus.FAILED
_WAITING = StepStatus.WAITING

CANCELLED_BY_OPERATOR = "cancelled by operator"
_SUCCEEDED = StepStatus.SUCCEEDED


@dataclass(frozen=True, slots=True)
class StartAttempt:
    """Begin attempt `attempt` of `step` (its STARTED first, committed before it runs)."""

    step: str
    attempt: int


@dataclass(frozen=True, slots=True)
class WakeAt:
    """`step` may run again at `at` (seconds, the engine's clock): decide the task then."""

    step: str
    at: float


@dataclass(frozen=True, slots=True)
class CancelAttempt:
    """Give up on the running attempt of `step`; it fails for good with `reason`."""

    step: str
    reason: str


@dataclass(frozen=True, slots=True)
class FailLost:
    """Record that attempt `attempt` of `step` stopped without an outcome."""

    step: str
    attempt: int
    final: bool  # no automatic retry follows
    compensate: bool  # the step is not idempotent: its compensation is owed
    then: Exhausted = "fail"  # final because max_lost is spent: what follows for the task


@dataclass(frozen=True, slots=True)
class Adopt:
    """Attempt `attempt` of `step` was STARTED on a worker, and nothing here follows
    it: wait for the worker to report it."""

    step: str
    attempt: int


@dataclass(frozen=True, slots=True)
class Compensate:
    """Run the compensation of `step`; `resume`: it is COMPENSATING already (a former
    primary's, or this node's before a restart), so no new COMPENSATING is written."""

    step: str
    resume: bool


@dataclass(frozen=True, slots=True)
class Stuck:
    """The task cannot be scheduled here; `reason` says why (shown to operators)."""

    reason: str


@dataclass(frozen=True, slots=True)
class CancelTask:
    """Cancel the whole task (a spawned task whose parent closed), on behalf of
    `operator` (the principal who cancelled the parent, or "apollo11")."""

    operator: str
    reason: str


@dataclass(frozen=True, slots=True)
class PauseTask:
    """`step` failed for good under on_exhausted="pause": record the task PAUSED."""

    step: str


@dataclass(frozen=True, slots=True)
class CompensateTask:
    """`step` failed for good under on_exhausted="compensate" and nothing of the task
    runs any more: record that `compensate` (the steps that succeeded and declared a
    compensation) owe theirs."""

    step: str
    compensate: tuple[str, ...]


Action = (
    StartAttempt
    | WakeAt
    | CancelAttempt
    | FailLost
    | Adopt
    | Compensate
    | Stuck
    | CancelTask
    | PauseTask
    | CompensateTask
)


class StateView(Protocol):
    """The replayed state beyond the task decided (state.State is one)."""

    def peek(self, task_id: str) -> TaskState | None: ...

    def first_event(self, key: str, since: int) -> tuple[int, Any] | None: ...

    def not_found(self, task_id: str, as_of: int = 0) -> str: ...


SYSTEM = "apollo11"  # who cancels an abandoned child of a parent that returned


@dataclass(frozen=True, slots=True)
class NoWorkflow:
    """In place of a workflow: why the engine has none for the task."""

    reason: str


def decide(
    task: TaskState,
    workflow: Workflow | NoWorkflow,
    busy: Container[str],
    now: float,
    world: StateView | None = None,
) -> list[Action]:
    """What happens next to `task`. `busy`: its steps this engine has something
    running for (an attempt, a compensation, a lost step's FAILED being written).
    `world`: the other tasks and the events (None: this task alone; its wait then
    resolves only by a deadline or the event replay matched)."""
    try:
        return _decide(task, workflow, busy, now, world)
    except Exception as e:  # a state no rule foresaw: this task waits, the others go on
        return [Stuck(f"deciding it failed: {type(e).__name__}: {e}")]


def _decide(
    task: TaskState,
    workflow: Workflow | NoWorkflow,
    busy: Container[str],
    now: float,
    world: StateView | None,
) -> list[Action]:
    if task.quiescent:
        return []
    if task.parent is not None and task.cancelled is None and world is not None:
        closed = _parent_closed(task.parent, world)
        if closed is not None:
            return [closed]
    if task.anomalies:
        return [Stuck(f"has anomalies, an operator must look: {task.anomalies[0]}")]
    if isinstance(workflow, NoWorkflow):
        return [Stuck(workflow.reason)]
    actions: list[Action] = []
    cancelled = task.cancelled is not None
    failed = task.failed_final > 0  # with cancelled: starts_nothing(task)
    # a step's retries ran out and the engine has yet to record what follows
    ending = task.exhausted if not cancelled else None
    undoing = ending is not None and ending.get("then") == "compensate"
    stopping = cancelled or undoing  # running attempts are given up on
    why = CANCELLED_BY_OPERATOR if cancelled else _stopped(ending)
    comp = owed_compensations(task, workflow)
    steps = task.steps
    deps = task.deps
    specs = workflow.steps
    starting: set[str] | None = None  # started by this decision: about to run
    for name, step in steps.items():
        status = step.status
        if status in DONE and name not in comp:
            continue  # finished (checked against the workflow when it started)
        if name in busy:
            if stopping and status is _STARTED:
                actions.append(CancelAttempt(name, why))
            continue
        spec = specs.get(name)
        if spec is None:
            actions.append(
                Stuck(f"step {name!r} is not in workflow {workflow.name} v{workflow.version}")
            )
            return actions
        if status is _STARTED:
            if step.worker is not None:
                actions.append(Adopt(name, step.attempt))
                continue
            if stopping:
                actions.append(FailLost(name, step.attempt, True, spec.needs_compensation))
            elif final_after_loss(step, spec.retry):
                # a task already failed for good keeps failing; a paused one (or one
                # about to be) keeps this step's own mode, for after the first's retry
                keep = not failed or task.paused is not None or ending is not None
                then = then_after_loss(spec.retry) if keep else "fail"
                actions.append(FailLost(name, step.attempt, True, spec.needs_compensation, then))
            else:
                actions.append(FailLost(name, step.attempt, False, spec.needs_compensation))
        elif status is _COMPENSATING or name in comp:
            if status is not _COMPENSATING and _blocked(task, workflow, name, comp, busy, starting):
                continue  # dependents that must be compensated go first
            if spec.compensate is None:
                actions.append(
                    Stuck(
                        f"step {name!r} owes a compensation but workflow {workflow.name} "
                        f"v{workflow.version} declares no compensation action for it"
                    )
                )
                return actions
            actions.append(Compensate(name, status is _COMPENSATING))
        elif cancelled or failed:
            continue  # nothing new starts in a task that is cancelled or has failed
        elif status is _WAITING:
            woken = _wake(task, name, step.attempt, now, world)
            if woken is not None:
                actions.append(woken)
                if isinstance(woken, Stuck):
                    return actions
        elif may_run_again(step):
            for d in deps[name]:
                dep = steps.get(d)
                if dep is None:
                    actions.append(Stuck(f"step {name!r} depends on {d!r}, which the task lacks"))
                    return actions
                if dep.status not in DONE:
                    break
            else:
                due = due_at(task.task_id, step, spec.retry)
                if due is None or now >= due:
                    actions.append(StartAttempt(name, step.attempt + 1))
                    if starting is None:
                        starting = set()
                    starting.add(name)
                else:
                    actions.append(WakeAt(name, due))
    if ending is not None:
        if not undoing:
            actions.append(PauseTask(str(ending.get("step"))))
        elif not any(s.status is _STARTED for s in steps.values()):
            # every attempt has its outcome: the steps that succeeded are all known
            owed = tuple(compensable(task, workflow))
            actions.append(CompensateTask(str(ending.get("step")), owed))
    return actions


def starts_nothing(task: TaskState) -> bool:
    """Does the task start no step on its own any more: cancelled, or a step of it
    failed for good (failed, paused, compensated, or about to be)? Only an operator's
    retry or skip can change that."""
    return task.cancelled is not None or task.failed_final > 0


def own_exhaustion_moot(task: TaskState) -> bool:
    """Does a step failing for good now lose its own on_exhausted (recorded "fail")?
    Yes when the task is cancelled or compensated (or about to be): its end is set.
    Not when it is paused (or about to be): an operator's retry of the step it paused
    for lets this one's mode follow (state/fold.py keeps it on the step)."""
    if task.cancelled is not None or task.compensating is not None:
        return True
    return task.exhausted is not None and task.exhausted.get("then") == "compensate"


def _stopped(ending: Mapping[str, Any] | None) -> str:
    step = ending.get("step") if ending is not None else None
    return f"stopped: step {step} failed for good and the task is compensated"


def compensable(task: TaskState, workflow: Workflow) -> list[str]:
    """The steps whose compensation a task's end owes (a cancel's, an exhaustion's
    under on_exhausted="compensate"): those that succeeded and declared one. A durable
    task's main, when one of its NotIdempotent ctx.steps succeeded or was begun and
    has no outcome (its compensation undoes them, last first)."""
    d = task.durable
    if d is not None:
        last = d.checkpoints[-1] if d.checkpoints else {}
        undo = last.get("kind") == "intent" or any(c.get("compensate") for c in d.checkpoints)
        main = [n for n, st in task.steps.items() if st.status is not _COMPENSATED]
        return main if undo else []
    specs = workflow.steps
    return [
        n
        for n, st in task.steps.items()
        if st.status is _SUCCEEDED and n in specs and specs[n].needs_compensation
    ]


def _wake(
    task: TaskState, name: str, attempt: int, now: float, world: StateView | None
) -> Action | None:
    """A waiting main: run it when its wait can resolve (waits.resolve), be woken at
    its next deadline, or (None) wait for an event or a child."""
    d = task.durable
    wait = d.wait if d is not None else None
    if d is None or wait is None:
        return Stuck(f"step {name!r} is WAITING but no wait is registered")
    view = _View(world, d.matched, d.checkpoints)
    now_ms = int(now * 1000)
    if waits.resolve(wait, view, now_ms) is not None:
        return StartAttempt(name, attempt + 1)
    at = waits.next_at(wait, view, now_ms)
    return None if at is None else WakeAt(name, at / 1000)


class _View:
    """What resolving a wait reads, from the replayed state (read only)."""

    __slots__ = ("_checkpoints", "_matched", "_world")

    def __init__(
        self,
        world: StateView | None,
        matched: int | None,
        checkpoints: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        self._world = world
        self._matched = matched
        self._checkpoints = checkpoints  # the waiting task's: which children it recorded

    def first_event(self, key: str, since: int) -> tuple[int, Any] | None:
        if self._world is None:  # the task alone: what replay matched for it
            return None if self._matched is None else (self._matched, None)
        return self._world.first_event(key, since)

    def child(self, task_id: str) -> Mapping[str, Any] | None:
        world = self._world
        if world is None:
            return None
        recorded = any(c == task_id for c, _ in waits.spawned(self._checkpoints))
        return joined(world.peek(task_id), recorded, lambda: world.not_found(task_id))


def _parent_closed(parent: Mapping[str, Any], world: StateView) -> CancelTask | None:
    """A spawned task's parent-close policy, applied: cancel it when its parent was
    cancelled or returned (succeeded) without waiting for it."""
    if parent.get("close", "cancel") != "cancel":
        return None
    p = world.peek(str(parent.get("task_id")))
    if p is None:
        return None
    if p.cancelled is not None:
        who = str(p.cancelled.get("operator") or SYSTEM)
        why = p.cancelled.get("reason") or "cancelled"
        return CancelTask(who, f"parent task {p.task_id} was cancelled: {why}")
    if p.status is TaskStatus.SUCCEEDED:
        return CancelTask(SYSTEM, f"parent task {p.task_id} returned without waiting for it")
    return None


def owed_compensations(task: TaskState, workflow: Workflow) -> set[str]:
    """Steps whose compensation is owed and not started yet.

    The log says what is owed (a failure of a non-idempotent step, or a
    cancel, records it), so the answer survives a failover and a task that
    still owes a compensation is never archived as finished.
    """
    out: set[str] = set()
    if not task.owed and not workflow.compensating_steps:
        return out  # the common case, decided without looking at any step
    compensating = workflow.compensating_steps
    for name, step in task.steps.items():
        status = step.status
        if status is _COMPENSATING or status is _COMPENSATED:
            continue
        if step.owed or (name in compensating and status is _FAILED):
            out.add(name)
    return out


def _blocked(
    task: TaskState,
    workflow: Workflow,
    name: str,
    comp: set[str],
    busy: Container[str],
    starting: set[str] | None,
) -> bool:
    """Must this step's compensation wait? Yes while any step downstream of it (not
    only a direct dependent) runs, is about to run, owes a compensation or is
    compensating: dependents are compensated first."""
    dependents = workflow.dependents
    seen: set[str] = set()
    stack = list(dependents.get(name, ()))
    while stack:
        d = stack.pop()
        if d in seen:
            continue
        seen.add(d)
        step = task.steps.get(d)
        if step is not None and (
            d in comp
            or step.status is _STARTED
            or step.status is _COMPENSATING
            or d in busy
            or (starting is not None and d in starting)
        ):
            return True
        stack.extend(dependents.get(d, ()))
    return False
