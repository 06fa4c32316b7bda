"""Replay: the state of every task as a fold over the event log.

`apply(state, event)` is deterministic: no I/O, no clocks, time comes from the
event. The same log gives the same state on every machine, which is what
lets a standby take over and an auditor reconstruct any past moment.

`apply` updates `state` in place and returns it: copying the state per event
would cost more than everything else replay does. Nothing but `apply`
mutates a State.

Transitions the step state machine does not allow are facts too (the log is
the truth), so they are applied as far as they make sense and flagged as
anomalies on the task, never silently accepted and never raised. An event
type replay does not know is different: that log cannot be understood, and
`apply` raises.
"""

from __future__ import annotations

import heapq
import sys
from collections.abc import Callable, Iterable
from typing import Any

from apollo11.scheduler import waits as _waits
from apollo11.scheduler.errors import ReplayError
from apollo11.scheduler.log import Event, EventType, redact_payload, redaction_marker
from apollo11.scheduler.retrypolicy import DEFAULT_RULE
from apollo11.scheduler.state.index import State, held_by, index_wait, unindex_wait
from apollo11.scheduler.state.model import (
    BUSY,
    DONE,
    DURATION_HISTORY,
    DurableState,
    StepState,
    TaskState,
    interned,
    shared_deps,
)
from apollo11.scheduler.state.schedule import (
    FIRED,
    Backfill,
    OccurrenceRecord,
    ScheduleState,
    spec_from,
)
from apollo11.scheduler.taskstatus import StepStatus as StepStatus
from apollo11.scheduler.taskstatus import TaskStatus

MAX_STATE_ANOMALIES = 1000

# Local aliases: replay compares statuses hundreds of thousands of times a second.
_PENDING = StepStatus.PENDING
_STARTED = StepStatus.STARTED
_SUCCEEDED = StepStatus.SUCCEEDED
_FAILED = StepStatus.FAILED
_COMPENSATING = StepStatus.COMPENSATING
_COMPENSATED = StepStatus.COMPENSATED
_WAITING = StepStatus.WAITING
_T_CANCELLED = TaskStatus.CANCELLED
_T_FAILED = TaskStatus.FAILED
_T_SUCCEEDED = TaskStatus.SUCCEEDED
_T_RUNNING = TaskStatus.RUNNING
_T_PENDING = TaskStatus.PENDING
_T_WAITING = TaskStatus.WAITING
_T_NONDETERMINISTIC = TaskStatus.NONDETERMINISTIC
_T_PAUSED = TaskStatus.PAUSED
_T_COMPENSATING = TaskStatus.COMPENSATING
_T_COMPENSATED = TaskStatus.COMPENSATED
# what a final FAILED's `exhausted` may ask of the engine (retry.py); "fail" is never written
_THEN = frozenset({"pause", "compensate"})
_E_STARTED = EventType.STEP_STARTED


# ------------------------------------------------------------------- apply


def apply(state: State, event: Event) -> State:
    """Fold one event into the state (in place) and return it."""
    try:
        handler = _HANDLERS[event.event_type]
    except KeyError:
        raise ReplayError(
            f"event {event.event_id} has unknown type {event.event_type!r}; "
            f"this log needs a newer Apollo-11"
        ) from None
    handler(state, event)
    if state.occupancy.active:
        _flow_sync(state, event)
    state.last_event_id = event.event_id
    if event.term > state.term:
        state.term = event.term
    return state


def apply_all(state: State, events: Iterable[Event]) -> State:
    handlers = _HANDLERS
    term = state.term
    last = state.last_event_id
    occupancy = state.occupancy
    try:
        for event in events:
            handler = handlers.get(event.event_type)
            if handler is None:
                apply(state, event)  # raises with the message
            handler(state, event)  # type: ignore[misc]
            if occupancy.active:
                _flow_sync(state, event)
            last = event.event_id
            if event.term > term:
                term = event.term
    finally:
        state.last_event_id = last
        state.term = term
    return state


def _flow_sync(state: State, event: Event) -> None:
    """After any event of a task under flow control: what it holds now (a log with no
    flow control never comes here: `Occupancy.active` stays False)."""
    task = state.tasks.get(event.task_id)
    if task is None or task.flow is None:
        return
    if event.event_type is _E_STARTED:
        p = event.payload
        if p and "tat" in p:
            state.occupancy.started(task, p["tat"])
    state.occupancy.sync(task)


def replay(events: Iterable[Event], state: State | None = None) -> State:
    return apply_all(state if state is not None else State(), events)


def _state_anomaly(state: State, event: Event, what: str) -> None:
    if len(state.anomalies) < MAX_STATE_ANOMALIES:
        state.anomalies.append(f"event {event.event_id}: {what}")


def _task_for(state: State, event: Event, *, moves: bool = True) -> TaskState | None:
    """The task the event names, its last event moved on; its updated time too unless
    the event is not a change of its course (`moves`): a finished task's updated time is
    its finish, which retention counts from (docs/retention.md)."""
    task = state.task(event.task_id)
    if task is None:
        _state_anomaly(state, event, f"{event.event_type.name} for unknown task {event.task_id!r}")
        return None
    task.last_event_id = event.event_id
    if moves:
        task.updated_ms = event.timestamp
    if task.event_ids is not None:
        task.event_ids.append(event.event_id)
    return task


def _flag(task: TaskState, step: StepState | None, event: Event, what: str) -> None:
    note = f"event {event.event_id}: {what}"
    task.anomalies.append(note)
    if step is not None:
        step.anomaly = note


def _move(task: TaskState, step: StepState, to: StepStatus) -> None:
    """Change a step's status, keeping the task's counters and status right."""
    was = step.status
    if was in DONE:
        task.done -= 1
    elif was in BUSY:
        task.busy -= 1
    step.status = to
    task.touched = True
    if to in DONE:
        task.done += 1
    elif to in BUSY:
        task.busy += 1
    # _derive, inlined: this runs for nearly every event.
    if task.cancelled is not None:
        task.status = _T_CANCELLED
    elif task.failed_final:
        task.status = _failed_status(task)
    elif task.done == len(task.steps):
        task.status = _T_SUCCEEDED
    elif task.durable is not None and task.durable.wait is not None and not task.busy:
        task.status = _T_WAITING
    else:
        task.status = _T_RUNNING


def _failed_status(task: TaskState) -> TaskStatus:
    """A task with a step failed for good: what its retries running out led to."""
    if task.compensating is not None:
        return _T_COMPENSATING if task.owed or task.busy else _T_COMPENSATED
    if task.paused is not None:
        return _T_PAUSED
    if task.exhausted is not None:
        # the engine has yet to record its pause or compensation: not finished, so it
        # is decided (and never archived) until it has
        return _T_RUNNING
    d = task.durable
    return _T_NONDETERMINISTIC if d is not None and d.nondeterminism is not None else _T_FAILED


def _derive(task: TaskState) -> None:
    if task.cancelled is not None:
        task.status = _T_CANCELLED
    elif task.failed_final:
        task.status = _failed_status(task)
    elif task.done == len(task.steps):
        task.status = _T_SUCCEEDED
    elif task.durable is not None and task.durable.wait is not None and not task.busy:
        task.status = _T_WAITING
    elif task.touched:
        task.status = _T_RUNNING
    else:
        task.status = _T_PENDING


def _on_submitted(state: State, event: Event) -> None:
    p = event.payload
    if event.task_id in state.tasks or (
        state.archive is not None and event.task_id in state.archive
    ):
        _state_anomaly(state, event, f"task {event.task_id!r} submitted twice")
        return
    deps: dict[str, list[str]] = shared_deps(p.get("steps") or {})
    key = p.get("idempotency_key")
    task = TaskState(
        task_id=event.task_id,
        workflow=sys.intern(str(p.get("workflow", ""))),
        version=int(p.get("version", 1)),
        input=p.get("input"),
        deps=deps,
        steps={name: StepState(name) for name in deps},
        submitted_ms=event.timestamp,
        updated_ms=event.timestamp,
        first_event_id=event.event_id,
        last_event_id=event.event_id,
        idempotency_key=key,
        event_ids=[event.event_id],
    )
    parent = p.get("parent")
    if parent is not None:
        task.parent = dict(parent)
    traced = p.get("trace")
    if traced is not None:
        task.trace = dict(traced)
    _derive(task)
    state.tasks[event.task_id] = task
    if key:
        state.idempotency[key] = event.task_id
    fired = p.get("schedule")
    if fired is not None:
        task.schedule = {k: fired[k] for k in ("id", "nominal_ms", "triggered") if k in fired}
        _fired(state, event, fired)
    flow = p.get("flow")
    if flow is not None:
        task.flow = dict(flow)  # DEBOUNCED changes it: never the event's own dict
        state.occupancy.active = True


def _lookup(state: State, event: Event) -> tuple[TaskState, StepState] | None:
    task = state.tasks.get(event.task_id) or state.task(event.task_id)
    if task is None:
        _state_anomaly(state, event, f"{event.event_type.name} for unknown task {event.task_id!r}")
        return None
    task.last_event_id = event.event_id
    task.updated_ms = event.timestamp
    if task.event_ids is not None:
        task.event_ids.append(event.event_id)
    step = task.steps.get(event.step_name)
    if step is None:
        _flag(task, None, event, f"{event.event_type.name} for unknown step {event.step_name!r}")
        return None
    return task, step


def _on_started(state: State, event: Event) -> None:
    found = _lookup(state, event)
    if found is None:
        return
    task, step = found
    was = step.status
    if (
        was is not _PENDING
        and was is not _FAILED
        and was is not _COMPENSATED
        and was is not _WAITING
    ):
        if was is _STARTED:
            _flag(task, step, event, f"step {step.name} started again without an end")
        elif was is _COMPENSATING:
            _flag(task, step, event, f"step {step.name} re-run before its compensation completed")
        else:
            _flag(task, step, event, f"step {step.name} started again after it {was.value}")
    if event.attempt <= step.attempt:
        _flag(task, step, event, f"step {step.name} attempt {event.attempt} is not new")
    step.attempt = event.attempt
    step.started_ms = event.timestamp
    p = event.payload
    step.worker = p.get("worker") if p else None
    step.started_term = event.term
    step.started_event = event.event_id
    step.finished_ms = None
    step.error = None
    step.lost = False
    _clear_final(task, step)
    if task.durable is not None:
        task.durable.nondeterminism = None
    _move(task, step, _STARTED)


def _on_succeeded(state: State, event: Event) -> None:
    found = _lookup(state, event)
    if found is None:
        return
    task, step = found
    if step.status is not _STARTED or event.attempt != step.attempt:
        if step.status is _COMPENSATED:
            # The seed's rule: after compensation a step must be STARTED again.
            _flag(
                task,
                step,
                event,
                f"step {step.name} succeeded after compensation without a new start",
            )
            return
        _flag(
            task,
            step,
            event,
            f"step {step.name} attempt {event.attempt} succeeded while "
            f"{step.status.value} at attempt {step.attempt}",
        )
        if step.status is not _STARTED:
            return
    ts = event.timestamp
    step.finished_ms = ts
    step.result = event.payload.get("result")
    started = step.started_ms
    if started is not None:
        per_step = state.durations.get(task.workflow)
        if per_step is None:
            per_step = state.durations[task.workflow] = {}
        hist = per_step.get(step.name)
        if hist is None:
            hist = per_step[step.name] = []
        hist.append(ts - started if ts > started else 0)
        if len(hist) > 2 * DURATION_HISTORY:
            del hist[:DURATION_HISTORY]  # amortized: trim rarely, keep at least the last 100
    _move(task, step, _SUCCEEDED)


def _owe(task: TaskState, step: StepState) -> None:
    if not step.owed:
        step.owed = True
        task.owed += 1


def _settle(task: TaskState, step: StepState) -> None:
    if step.owed:
        step.owed = False
        task.owed -= 1


def _clear_final(task: TaskState, step: StepState) -> None:
    if step.final:
        step.final = False
        task.failed_final -= 1
    step.exhausted = None


def _next_exhaustion(task: TaskState) -> dict[str, Any] | None:
    """What follows for a task whose exhaustion's step an operator cleared, while other
    steps are still failed for good: the first of them (in declaration order) whose
    FAILED asked for a pause or a compensation; None: they all said "fail"."""
    for name, st in task.steps.items():
        if st.final and st.exhausted is not None:
            return {"step": name, "then": st.exhausted}
    return None


def _on_failed(state: State, event: Event) -> None:
    found = _lookup(state, event)
    if found is None:
        return
    task, step = found
    p = event.payload
    error = str(p.get("error", "")) or "failed"
    if step.status is StepStatus.COMPENSATING and p.get("compensation"):
        # A compensation attempt failed; it will be retried and stays visible.
        step.compensation_error = error
        return
    if step.status is not StepStatus.STARTED:
        _flag(task, step, event, f"step {step.name} failed while {step.status.value}")
    step.finished_ms = event.timestamp
    step.error = error
    step.lost = bool(p.get("lost", False))
    if step.lost:
        step.losses += 1
    else:
        # an own failure spends its rule's budget (retry.py); the default rule's is what
        # the others leave of the step's own failures, so a FAILED without a rule (an
        # old log) needs no count, and leaves the state as it always did
        rule = p.get("rule")
        if isinstance(rule, str) and rule != DEFAULT_RULE:
            # a new dict, never changed in place: a snapshot being written may hold the old
            causes = step.causes = dict(step.causes) if step.causes else {}
            causes[rule] = causes.get(rule, 0) + 1
    after = p.get("retry_in_s")
    step.retry_in_s = float(after) if isinstance(after, int | float) else None
    if "heartbeat" in p:
        step.heartbeat = p["heartbeat"]
    if p.get("final", False):
        if not step.final:
            step.final = True
            task.failed_final += 1
        then = p.get("exhausted")
        if then in _THEN:
            # kept on the step too: a second exhaustion while the task is paused (or
            # waiting for the engine's record) follows once the first is retried
            step.exhausted = then
        if (
            then in _THEN
            and task.exhausted is None
            and task.paused is None
            and task.compensating is None
            and task.cancelled is None
        ):
            task.exhausted = {"step": step.name, "then": then}
    if p.get("compensate", False):
        _owe(task, step)
    if "nondeterminism" in p:
        _durable(task).nondeterminism = p["nondeterminism"]
    _move(task, step, StepStatus.FAILED)


def _on_compensating(state: State, event: Event) -> None:
    found = _lookup(state, event)
    if found is None:
        return
    task, step = found
    if step.status is StepStatus.COMPENSATING:
        step.compensations += 1  # a retry of a failed compensation
        return
    if step.status not in (
        StepStatus.SUCCEEDED,
        StepStatus.FAILED,
        StepStatus.STARTED,
        StepStatus.WAITING,  # a cancelled durable main undoing its ctx.steps
    ):
        _flag(task, step, event, f"step {step.name} compensating while {step.status.value}")
    step.compensations += 1
    step.compensation_error = None
    _move(task, step, StepStatus.COMPENSATING)


def _on_compensated(state: State, event: Event) -> None:
    found = _lookup(state, event)
    if found is None:
        return
    task, step = found
    if step.status is not StepStatus.COMPENSATING:
        _flag(task, step, event, f"step {step.name} compensated while {step.status.value}")
    step.compensation_error = None
    step.finished_ms = event.timestamp
    _settle(task, step)
    _move(task, step, StepStatus.COMPENSATED)


def _on_override(state: State, event: Event) -> None:
    found = _lookup(state, event)
    if found is None:
        return
    task, step = found
    p = event.payload
    action = p.get("action")
    step.override = {
        "action": action,
        "operator": p.get("operator"),
        "reason": p.get("reason"),
        "event_id": event.event_id,
        "attempt": step.attempt,  # retry budgets count from here
        "losses": step.losses,
    }
    if step.waits:  # a durable main's: its budget counts from here too
        step.override["waits"] = step.waits
    if "as" in p:  # the display name typed beside the authenticated operator
        step.override["as"] = p["as"]
    _clear_final(task, step)
    if not task.failed_final and task.compensating is None:
        # no step is failed for good any more: a paused task runs on
        task.paused = None
        task.exhausted = None
    elif task.compensating is None and step.name in (
        _step_of(task.paused),
        _step_of(task.exhausted),
    ):
        # the step the task paused (or was about to) for runs again, but another is
        # still failed for good: what its own FAILED asked for follows (a new record)
        task.paused = None
        task.exhausted = _next_exhaustion(task)
    if action == "skip":
        if step.status in BUSY:
            _flag(task, step, event, f"step {step.name} skipped while {step.status.value}")
        _settle(task, step)  # the operator takes over whatever compensation was owed
        if task.durable is not None and task.durable.wait is not None:
            unindex_wait(state, task)
            task.durable.wait = None  # skipping a waiting main ends its wait
        _move(task, step, StepStatus.SKIPPED)
    elif action == "retry":
        if step.status in BUSY:
            _flag(task, step, event, f"step {step.name} retried while {step.status.value}")
        step.error = None
        step.causes = None  # a fresh budget for every cause
        step.retry_in_s = None
        _move(task, step, StepStatus.PENDING)
    else:
        _flag(task, step, event, f"unknown manual override {action!r}")


def _step_of(ended: dict[str, Any] | None) -> Any:
    return ended.get("step") if ended is not None else None


def _audit(event: Event) -> dict[str, Any]:
    """An operator's act on a task as the state keeps it (cancel, redaction): who (the
    authenticated principal, and the display name typed beside it), why, and where."""
    p = event.payload
    out: dict[str, Any] = {
        "operator": p.get("operator"),
        "reason": p.get("reason"),
        "event_id": event.event_id,
    }
    if "as" in p:
        out["as"] = p["as"]
    return out


def _on_cancelled(state: State, event: Event) -> None:
    task = _task_for(state, event)
    if task is None:
        return
    p = event.payload
    task.cancelled = _audit(event)
    for name in p.get("compensate", ()):
        step = task.steps.get(name)
        if step is None:
            _flag(task, None, event, f"cancel owes compensation of unknown step {name!r}")
        elif step.status is not StepStatus.COMPENSATED:
            _owe(task, step)
    if task.durable is not None and task.durable.wait is not None:
        unindex_wait(state, task)  # the wait stays on the task (shown), matches nothing more
    _derive(task)


def _on_redacted(state: State, event: Event) -> None:
    """An operator removed the task's input and outputs (scheduler/log/redact.py): in
    the state they read as redacted from here on; the events before it are redacted
    where they are read (GetEvents, WatchTask) and, later, where they are stored.
    Not a change of the task's course: its updated time (its finish) stays."""
    hold = state.holds.get(event.task_id)
    if hold is not None:  # the intake refuses it; a hold that raced it came first
        _state_anomaly(
            state, event, f"TASK_REDACTED of task {event.task_id!r} refused: " + held_by(hold)
        )
        return
    if state.task(event.task_id) is None and event.task_id in state.purged_records:
        _redact_purged(state, event)
        return
    task = _task_for(state, event, moves=False)
    if task is None:
        return
    task.redacted = _audit(event)
    state.redacted[task.task_id] = event.event_id
    if task.event_ids is not None:  # the records each member rewrites (state/redactor.py)
        state.redacted_records[task.task_id] = [i for i in task.event_ids if i < event.event_id]
    hide_data(task, event.event_id)


def hide_data(task: TaskState, redaction_id: int) -> None:
    """Replace the task's input, step results and checkpoint outputs by the marker of
    TASK_REDACTED `redaction_id`: as the fold does, and as time travel does to a past
    state rebuilt from a snapshot older than the redaction (node/views.py)."""
    mark = redaction_marker(redaction_id)
    if task.input is not None:
        task.input = mark
    for step in task.steps.values():
        if step.result is not None:
            step.result = mark
    if task.durable is not None:
        task.durable.checkpoints = [
            dict(redact_payload(c, redaction_id)) for c in task.durable.checkpoints
        ]


def redactions_after(events: Iterable[Event], held: Iterable[str]) -> dict[str, int]:
    """The TASK_REDACTED among `events` (those after a past state) that the fold takes,
    by task id, as `_on_redacted` judges them: the first of a task, unless a hold
    (`held`: the past state's holds, then the TASK_HELD among `events`) refuses it.
    What time travel hides of a past state rebuilt from a snapshot that predates them
    (state_at, with hide_data)."""
    holding = set(held)
    out: dict[str, int] = {}
    for e in events:
        if e.event_type is EventType.TASK_HELD:
            if e.payload.get("held"):
                holding.add(e.task_id)
            else:
                holding.discard(e.task_id)
        elif e.event_type is EventType.TASK_REDACTED and e.task_id not in holding:
            out.setdefault(e.task_id, e.event_id)
    return out


def _redact_purged(state: State, event: Event) -> None:
    """A purged task redacted: nothing of it is in memory, but its records are still
    in the segments and the bucket; they are hidden and rewritten as any other's."""
    task_id = event.task_id
    if task_id in state.redacted:
        _state_anomaly(state, event, f"TASK_REDACTED of task {task_id!r}, already redacted")
        return
    state.redacted[task_id] = event.event_id
    state.redacted_records[task_id] = [
        i for i in state.purged_records[task_id] if i < event.event_id
    ]


def _ends_here(task: TaskState) -> bool:
    """May a TASK_PAUSED or TASK_COMPENSATING change the task? Not once an operator's
    cancel, retry or skip overtook the decision (the engine checks right before it
    writes one, but a log read back may hold either order): it changes nothing then,
    and is no anomaly (a decision overtaken, not a broken transition)."""
    return bool(task.failed_final) and task.cancelled is None and task.compensating is None


def _on_paused(state: State, event: Event) -> None:
    """The engine's record that a step's retries ran out under on_exhausted="pause"."""
    task = _task_for(state, event)
    if task is None:
        return
    if not _ends_here(task):
        return
    p = event.payload
    task.paused = {"step": p.get("step"), "event_id": event.event_id}
    if "error" in p:
        task.paused["error"] = p["error"]
    task.exhausted = None
    _derive(task)


def _on_task_compensating(state: State, event: Event) -> None:
    """The engine's record that a step's retries ran out under on_exhausted="compensate":
    the steps it names owe their compensation (dependents go first: decide.py)."""
    task = _task_for(state, event)
    if task is None:
        return
    if not _ends_here(task):
        return
    p = event.payload
    names = list(p.get("compensate", ()))
    task.compensating = {"step": p.get("step"), "compensate": names, "event_id": event.event_id}
    for name in names:
        step = task.steps.get(name)
        if step is None:
            _flag(task, None, event, f"TASK_COMPENSATING owes unknown step {name!r}")
        elif step.status is not StepStatus.COMPENSATED:
            _owe(task, step)
    task.exhausted = None
    task.paused = None
    _derive(task)


def _on_term_started(state: State, event: Event) -> None:
    if state.terms and event.term <= state.terms[-1][0]:
        _state_anomaly(state, event, f"term {event.term} started after term {state.terms[-1][0]}")
    state.terms.append((event.term, event.event_id))


# ---------------------------------------------------------- durable tasks


def _durable(task: TaskState) -> DurableState:
    d = task.durable
    if d is None:
        d = task.durable = DurableState()
    return d


def _durable_record(state: State, event: Event) -> tuple[TaskState, StepState, int] | None:
    """The task and step of a CHECKPOINT or WAIT, and its seq; None (flagged) unless it
    comes from the running attempt, at the next position."""
    found = _lookup(state, event)
    if found is None:
        return None
    task, step = found
    name = event.event_type.name
    if step.status is not _STARTED or event.attempt != step.attempt:
        _flag(
            task,
            step,
            event,
            f"{name} of attempt {event.attempt} while step {step.name} is "
            f"{step.status.value} at attempt {step.attempt}",
        )
        return None
    seq = event.payload.get("seq")
    have = len(task.durable.checkpoints) if task.durable is not None else 0
    if seq != have:
        _flag(task, step, event, f"{name} at position {seq!r}, but {have} checkpoints precede it")
        return None
    return task, step, have


def _on_checkpoint(state: State, event: Event) -> None:
    found = _durable_record(state, event)
    if found is None:
        return
    task, _, seq = found
    d = _durable(task)
    d.checkpoints.append(dict(event.payload))
    if d.wait is not None and d.wait.get("seq") == seq:
        unindex_wait(state, task)  # this checkpoint is the wait's resolution
        d.wait = None


def _on_wait(state: State, event: Event) -> None:
    found = _durable_record(state, event)
    if found is None:
        return
    task, step, _ = found
    d = _durable(task)
    unindex_wait(state, task)
    d.wait = w = interned(event.payload)
    index_wait(state, task, w)
    step.waits += 1
    step.finished_ms = event.timestamp
    _move(task, step, _WAITING)


def _on_event(state: State, event: Event) -> None:
    p = event.payload
    key = p.get("key")
    if not isinstance(key, str) or not key:
        _state_anomaly(state, event, "EVENT without a key")
        return
    _expire_event_keys(state, event.timestamp)
    idem = p.get("idempotency_key")
    if idem:
        known = state.event_keys.get(idem)
        if known is not None and p.get("renews") != known:
            return  # a duplicate: the first one with this key is the one recorded
        state.event_keys[idem] = event.event_id
        ttl = p.get("ttl_ms")
        if ttl:
            ends = event.timestamp + int(ttl)
            state.event_key_expires[idem] = ends
            heapq.heappush(state.event_key_heap, (ends, idem))
        else:
            state.event_key_expires.pop(idem, None)
    refs = state.events.get(key)
    if refs is None:
        refs = state.events[key] = []
    refs.append((event.event_id, p.get("payload")))
    for task_id in state.waits.get(key, ()):
        task = state.tasks.get(task_id)
        d = task.durable if task is not None else None
        if d is None or d.wait is None or d.matched is not None:
            continue
        if any(k == key and event.event_id >= since for k, since in _waits.event_keys(d.wait)):
            d.matched = event.event_id


def _expire_event_keys(state: State, now_ms: int) -> None:
    """Forget the event idempotency keys whose TTL ended before `now_ms` (an EVENT's
    time: the same point of the log on every replica)."""
    heap = state.event_key_heap
    while heap and heap[0][0] <= now_ms:
        ends, key = heapq.heappop(heap)
        if state.event_key_expires.get(key) == ends:
            del state.event_key_expires[key]
            del state.event_keys[key]


# ---------------------------------------------------------------- schedules


def _on_schedule(state: State, event: Event) -> None:
    p = event.payload
    sid = str(p.get("schedule") or "")
    action = p.get("action")
    known = state.schedules.get(sid)
    if action == "create":
        if known is not None:
            _state_anomaly(state, event, f"schedule {sid!r} created twice")
            return
        state.schedules[sid] = ScheduleState(
            schedule_id=sid,
            workflow=sys.intern(str(p["workflow"])),
            spec=spec_from(p["spec"]),
            input=p.get("input"),
            paused=bool(p.get("paused")),
            note=str(p.get("note") or ""),
            created_ms=event.timestamp,
            updated_ms=event.timestamp,
            by=str(p.get("by") or ""),
            source=str(p.get("source") or "api"),
            # its nominal times are those after its creation
            watermark_ms=int(p.get("from_ms", event.timestamp)),
        )
        return
    if known is None:
        _state_anomaly(state, event, f"SCHEDULE {action} for unknown schedule {sid!r}")
        return
    if action == "backfilled":
        # the primary's record that a backfill ran out: no change, and no principal to
        # put in place of the last one who made one
        known.backfills.pop(int(p["backfill"]), None)
        return
    known.updated_ms = event.timestamp
    known.by = str(p.get("by") or "")
    if "note" in p:
        known.note = str(p["note"] or "")
    if action == "delete":
        del state.schedules[sid]
    elif action == "backfill":
        b = Backfill(
            event.event_id, int(p["from_ms"]), int(p["to_ms"]), str(p["overlap"]), known.by
        )
        known.backfills[event.event_id] = b
    elif action in ("pause", "unpause"):
        known.paused = action == "pause"
    elif action == "update":
        if "workflow" in p:
            known.workflow = sys.intern(str(p["workflow"]))
        if "spec" in p:
            known.spec = spec_from(p["spec"])
        if "input" in p:
            known.input = p["input"]
        if "source" in p:
            known.source = str(p["source"])
    else:
        _state_anomaly(state, event, f"SCHEDULE with unknown action {action!r}")


def _on_occurrence(state: State, event: Event) -> None:
    p = event.payload
    sid = str(p.get("schedule") or "")
    known = state.schedules.get(sid)
    if known is None:
        _state_anomaly(state, event, f"OCCURRENCE for unknown schedule {sid!r}")
        return
    known.record(
        OccurrenceRecord(
            int(p["nominal_ms"]),
            str(p["outcome"]),
            str(p.get("reason") or ""),
            None,
            event.event_id,
        )
    )


def _fired(state: State, event: Event, fired: Any) -> None:
    sid = str(fired.get("id") or "")
    known = state.schedules.get(sid)
    if known is None:
        return  # deleted since: the task stands alone
    reason = str(fired.get("reason") or "")
    triggered = bool(fired.get("triggered"))
    o = OccurrenceRecord(
        int(fired["nominal_ms"]), FIRED, reason, event.task_id, event.event_id, triggered
    )
    # a trigger and a backfill fire outside the spec's course: they move no watermark
    known.record(o, advance=not (triggered or fired.get("backfill")))


def _on_debounced(state: State, event: Event) -> None:
    """A submission joined a task's debounce window: its input is the new one, its start
    is pushed back. Only a task that has not started can take one."""
    task = state.tasks.get(event.task_id) or state.task(event.task_id)
    if task is None:
        _state_anomaly(state, event, f"DEBOUNCED for unknown task {event.task_id!r}")
        return
    task.last_event_id = event.event_id
    task.updated_ms = event.timestamp
    if task.event_ids is not None:
        task.event_ids.append(event.event_id)
    if task.touched or task.flow is None:
        _flag(task, None, event, "DEBOUNCED for a task that started or has no debounce")
        return
    p = event.payload
    task.input = p.get("input")
    task.flow = {**task.flow, "not_before_ms": int(p["not_before_ms"])}


def _on_limit(state: State, event: Event) -> None:
    """An operator changed a limit or fairness weights at runtime."""
    state.occupancy.limit(event.payload)
    state.occupancy.active = True


# ---------------------------------------------------------------- retention

PURGED_REMEMBERED = 10_000  # purged task ids kept to answer "purged by retention"


def _on_held(state: State, event: Event) -> None:
    """A legal hold set ({"held": true, "by", "reason"}) or released ({"held": false}).
    Not a change of the task's course: its updated time (its finish, for retention)
    stays as it was."""
    task = state.task(event.task_id)
    if task is None:
        _state_anomaly(state, event, f"TASK_HELD for unknown task {event.task_id!r}")
        return
    task.last_event_id = event.event_id
    if task.event_ids is not None:
        task.event_ids.append(event.event_id)
    p = event.payload
    if p.get("held"):
        state.holds[task.task_id] = {
            "by": str(p.get("by") or ""),
            "reason": str(p.get("reason") or ""),
            "at_ms": event.timestamp,
            "event_id": event.event_id,
        }
    else:
        state.holds.pop(task.task_id, None)


def _on_purged(state: State, event: Event) -> None:
    """Retention dropped these finished tasks ({"tasks": [ids]}, and "forget": purged
    redacted tasks whose redaction is carried out, `_forget_redacted`): gone from memory, their
    idempotency keys with them; one an archive chunk holds is hidden until the next
    snapshot rewrites the chunk. A held or unquiescent one, or one whose parent has not
    finished, is not purged (State.purge_refused, the test the primary asks before it
    writes; a log that asks anyway is flagged). The sweep's time is the log's
    clock: event idempotency keys past their TTL are forgotten here too."""
    _expire_event_keys(state, event.timestamp)
    archive = state.archive
    for task_id in event.payload.get("tasks") or ():
        task = state.peek(task_id)
        if task is None:
            _state_anomaly(state, event, f"TASK_PURGED names unknown task {task_id!r}")
            continue
        why = state.purge_refusal(task)
        if why is not None:
            _state_anomaly(state, event, f"TASK_PURGED of task {task_id!r} refused: {why}")
            continue
        state.tasks.pop(task_id, None)
        key = task.idempotency_key
        if key and state.idempotency.get(key) == task_id:
            del state.idempotency[key]
        if archive is not None:
            # in a chunk, or in one a snapshot being written is adding: hidden either
            # way until a snapshot that saw this purge has rewritten the chunks
            state.tombstones.add(task_id)
        purged = state.purged
        purged[task_id] = event.event_id
        if len(purged) > PURGED_REMEMBERED:
            del purged[next(iter(purged))]
        if task.event_ids is not None:  # its records, for a redaction still to come
            records = state.purged_records
            records[task_id] = task.event_ids
            if len(records) > PURGED_REMEMBERED:
                del records[next(iter(records))]
    for task_id in event.payload.get("forget") or ():
        _forget_redacted(state, event, task_id)


def _forget_redacted(state: State, event: Event, task_id: str) -> None:
    """A purged task's redaction, carried out (its records rewritten on the primary's
    disk and in the bucket: retention.forgettable, the primary's judgement, written in
    the event so that every fold forgets alike): its entries leave the state, which
    would otherwise grow by one for every redaction ever made. A task still here
    keeps them (its answers hide the data through them): flagged, not forgotten."""
    if task_id not in state.redacted:
        _state_anomaly(state, event, f"TASK_PURGED forgets task {task_id!r}, not redacted")
        return
    if state.peek(task_id) is not None:
        _state_anomaly(state, event, f"TASK_PURGED forgets task {task_id!r}, not purged")
        return
    del state.redacted[task_id]
    state.redacted_records.pop(task_id, None)


_HANDLERS: dict[EventType, Callable[[State, Event], None]] = {
    EventType.TASK_SUBMITTED: _on_submitted,
    EventType.STEP_STARTED: _on_started,
    EventType.STEP_SUCCEEDED: _on_succeeded,
    EventType.STEP_FAILED: _on_failed,
    EventType.STEP_COMPENSATING: _on_compensating,
    EventType.STEP_COMPENSATED: _on_compensated,
    EventType.MANUAL_OVERRIDE: _on_override,
    EventType.TASK_CANCELLED: _on_cancelled,
    EventType.TERM_STARTED: _on_term_started,
    EventType.CHECKPOINT: _on_checkpoint,
    EventType.WAIT: _on_wait,
    EventType.EVENT: _on_event,
    EventType.SCHEDULE: _on_schedule,
    EventType.OCCURRENCE: _on_occurrence,
    EventType.DEBOUNCED: _on_debounced,
    EventType.LIMIT: _on_limit,
    EventType.TASK_PAUSED: _on_paused,
    EventType.TASK_COMPENSATING: _on_task_compensating,
    EventType.TASK_REDACTED: _on_redacted,
    EventType.TASK_HELD: _on_held,
    EventType.TASK_PURGED: _on_purged,
}

# Exhaustive dispatch, checked at import: a new event type without a handler
# is a bug to catch before any log is replayed.
if set(_HANDLERS) != set(EventType):  # pragma: no cover
    raise ReplayError(f"replay has no handler for {set(EventType) - set(_HANDLERS)}")
