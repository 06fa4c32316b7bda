"""What clients and operators ask of the primary: submit (with idempotency keys),
retry a step, skip a step, cancel a task, send an event (durable tasks' waits).

Each request is checked against the state, written as one event (or one
batch), and answered only once that is committed. The checks are pure
functions of the task (`refuse_retry`, `refuse_skip`, `refuse_cancel`,
`owed_by_cancel`); what a request needs of the engine it runs on is the
`Primary` port below.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from apollo11.scheduler import defaults, metrics
from apollo11.scheduler.clock import Clock
from apollo11.scheduler.engine.decide import compensable
from apollo11.scheduler.engine.flowsubmit import FlowSubmit
from apollo11.scheduler.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    WorkflowDefinitionError,
)
from apollo11.scheduler.log import Draft, Event, EventType
from apollo11.scheduler.shell import SHELL_WORKFLOW, shell_workflow
from apollo11.scheduler.state import (
    State,
    StepState,
    StepStatus,
    Store,
    TaskState,
    TaskStatus,
    held_by,
)
from apollo11.scheduler.taskid import new_task_id as new_task_id
from apollo11.scheduler.workflow import Registry, Workflow

DEFAULT_IDEMPOTENCY_TTL_S = defaults.IDEMPOTENCY_TTL_S
KEY_MAX = 256


@dataclass(frozen=True, slots=True)
class Submitted:
    task_id: str
    created: bool  # False when an idempotency key returned an existing task
    event_id: int = 0  # the TASK_SUBMITTED event, when created


@dataclass(frozen=True, slots=True)
class EventSent:
    event_id: int  # the EVENT recorded (the first one, when the idempotency key is known)
    created: bool  # False when the idempotency key named an event already recorded


class SubmitItem(NamedTuple):
    """One task of a `submit_many` batch."""

    workflow: str
    input: Any = None
    idempotency_key: str | None = None
    version: int | None = None
    trace: dict[str, str] | None = None  # its trace context (tracing.py)
    priority: int | None = None  # 1 (first) to 5; None: 3


class Primary(Protocol):
    """What requests need of the engine they run on."""

    @property
    def store(self) -> Store: ...

    @property
    def registry(self) -> Registry: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def idempotency_ttl_s(self) -> float: ...

    def shell_refusal(self) -> str | None:
        """Why shell tasks may not be submitted here now (None: they may)."""

    def workflow_for(self, task: TaskState) -> Workflow | None: ...

    def check_leading(self) -> None:
        """Raise NotLeaderError unless this engine leads and is not draining."""

    async def wait_commit(self, event_id: int) -> None:
        """Until a write up to `event_id` may be acknowledged (lease, standbys)."""

    def is_busy(self, task_id: str, step: str) -> bool:
        """Does the engine run something of this step (an attempt, a compensation)?"""

    @property
    def flow_submit(self) -> FlowSubmit:
        """Flow control at submit (engine/flowsubmit.py)."""


class Intake:
    """Where requests enter one engine, and the idempotency keys being written now."""

    def __init__(self, primary: Primary) -> None:
        self._p = primary
        # Idempotency keys being written right now: a second submission with one
        # waits for the first instead of creating a second task.
        self._inflight: dict[str, asyncio.Future[Submitted]] = {}
        self._inflight_what: dict[str, tuple[str, Any]] = {}  # key -> (workflow, input)
        self._events_inflight: dict[str, asyncio.Future[EventSent]] = {}
        self._events_inflight_what: dict[str, tuple[str, Any]] = {}  # key -> (key, payload)

    async def submit(
        self,
        workflow: str,
        input: Any = None,
        *,
        idempotency_key: str | None = None,
        version: int | None = None,
        trace: dict[str, str] | None = None,
        priority: int | None = None,
    ) -> Submitted:
        p = self._p
        p.check_leading()
        wf = self.workflow(workflow, input, version)
        flow = p.flow_submit.record(wf, input, priority)
        if idempotency_key is not None:
            check_key(idempotency_key)
            existing = self._existing(idempotency_key, workflow, input)
            if existing is not None:
                return Submitted(existing, False)
            pending = self._inflight.get(idempotency_key)
            if pending is not None:
                self._same_as_pending(idempotency_key, workflow, input)
                return Submitted((await asyncio.shield(pending)).task_id, False)
        task_id = new_task_id()
        if flow is not None:
            joined = await p.flow_submit.join(wf, flow, input)
            if joined is not None:  # debounced: that task takes this input
                return Submitted(joined.task_id, False, joined.event_id)
            await p.flow_submit.make_room(wf, flow, task_id)
        payload = submission(wf, input, idempotency_key, trace, flow)
        if idempotency_key is not None:
            fut: asyncio.Future[Submitted] = asyncio.get_running_loop().create_future()
            self._inflight[idempotency_key] = fut
            self._inflight_what[idempotency_key] = (workflow, input)
        started = time.perf_counter()
        try:
            with p.flow_submit.writing(task_id, flow):
                event = await p.store.log.append(EventType.TASK_SUBMITTED, task_id, payload=payload)
        except BaseException as e:
            if idempotency_key is not None:
                self._inflight_what.pop(idempotency_key, None)
                self._inflight.pop(idempotency_key).set_exception(e)
            raise
        result = Submitted(task_id, True, event.event_id)
        if idempotency_key is not None:
            self._inflight_what.pop(idempotency_key, None)
            self._inflight.pop(idempotency_key).set_result(result)
        await p.wait_commit(event.event_id)
        metrics.SUBMIT_COMMIT_SECONDS.observe(time.perf_counter() - started)
        return result

    async def submit_many(self, items: Sequence[SubmitItem]) -> list[Submitted]:
        p = self._p
        p.check_leading()
        plans: list[tuple[Workflow, SubmitItem]] = []
        flows: list[dict[str, Any] | None] = []
        for i, item in enumerate(items):
            try:
                wf = self.workflow(item.workflow, item.input, item.version)
                if item.idempotency_key is not None:
                    check_key(item.idempotency_key)
                flows.append(p.flow_submit.record(wf, item.input, item.priority))
            except (NotFoundError, InvalidArgumentError, WorkflowDefinitionError) as e:
                raise type(e)(f"tasks[{i}]: {e}") from None
            plans.append((wf, item))
        if any(p.flow_submit.one_by_one(wf) for wf, _ in plans):
            # A debounce or an on_full other than "queue" decides each submission
            # against the ones before it: one at a time, in order.
            return [
                await self.submit(
                    it.workflow,
                    it.input,
                    idempotency_key=it.idempotency_key,
                    version=it.version,
                    trace=it.trace,
                    priority=it.priority,
                )
                for _, it in plans
            ]
        # A key reused for another submission refuses the whole batch, before anything
        # is written or awaited.
        first: dict[str, tuple[int, SubmitItem]] = {}
        for i, (_, item) in enumerate(plans):
            key = item.idempotency_key
            if key is None:
                continue
            try:
                self._existing(key, item.workflow, item.input)
                if key in self._inflight:
                    self._same_as_pending(key, item.workflow, item.input)
            except AlreadyExistsError as e:
                raise AlreadyExistsError(f"tasks[{i}]: {e}") from None
            earlier = first.setdefault(key, (i, item))[1]
            if (earlier.workflow, earlier.input) != (item.workflow, item.input):
                raise AlreadyExistsError(
                    f"tasks[{i}]: idempotency key {key!r} is used by tasks[{first[key][0]}] "
                    f"of this batch with another submission"
                )
        out: list[Submitted | None] = [None] * len(plans)
        drafts: list[Draft] = []
        owners: list[int] = []  # the item each draft is for
        same_as: dict[int, int] = {}  # item -> the earlier item with its key
        pending: list[tuple[int, asyncio.Future[Submitted]]] = []
        mine: dict[str, int] = {}  # keys this batch creates -> item
        loop = asyncio.get_running_loop()
        for i, (wf, item) in enumerate(plans):
            key = item.idempotency_key
            if key is not None:
                existing = self._existing(key, item.workflow, item.input)
                if existing is not None:
                    out[i] = Submitted(existing, False)
                    continue
                if key in mine:
                    same_as[i] = mine[key]
                    continue
                if key in self._inflight:
                    pending.append((i, self._inflight[key]))
                    continue
                mine[key] = i
                self._inflight[key] = loop.create_future()
                self._inflight_what[key] = (item.workflow, item.input)
            payload = submission(wf, item.input, key, item.trace, flows[i])
            drafts.append(Draft(EventType.TASK_SUBMITTED, new_task_id(), payload=payload))
            owners.append(i)
        started = time.perf_counter()
        try:
            events = await p.store.log.append_many(drafts) if drafts else []
        except BaseException as e:
            for key in mine:
                self._inflight_what.pop(key, None)
                self._inflight.pop(key).set_exception(e)
            raise
        for i, event in zip(owners, events, strict=True):
            out[i] = Submitted(event.task_id, True, event.event_id)
        for key, i in mine.items():
            self._inflight_what.pop(key, None)
            self._inflight.pop(key).set_result(out[i])  # type: ignore[arg-type]
        for i, j in same_as.items():
            out[i] = Submitted(out[j].task_id, False)  # type: ignore[union-attr]
        if events:
            await p.wait_commit(events[-1].event_id)
            metrics.SUBMIT_COMMIT_SECONDS.observe(time.perf_counter() - started)
        # Keys another submission is writing right now: theirs (if that one fails,
        # so does this call; this batch's own tasks are committed, and a retry with
        # the same keys returns them).
        for i, fut in pending:
            out[i] = Submitted((await asyncio.shield(fut)).task_id, False)
        return out  # type: ignore[return-value]

    def workflow(self, workflow: str, input: Any, version: int | None) -> Workflow:
        """The workflow a submission names, or the error that refuses it."""
        p = self._p
        if workflow == SHELL_WORKFLOW:
            why = p.shell_refusal()
            if why:
                raise FailedPreconditionError(why)
            return shell_workflow(input)
        found = p.registry.require(workflow, version)
        found.check_input(input)
        return found

    def _existing(self, key: str, workflow: str, input: Any) -> str | None:
        """The live task of idempotency key `key`, if any; AlreadyExistsError when it
        was submitted with another workflow or input (the same key must mean the same
        request: answering the old task would hide the new input)."""
        p = self._p
        task = p.store.state.task_for_key(key)
        if task is None or p.clock.now() - task.submitted_ms / 1000 > p.idempotency_ttl_s:
            return None
        if task.workflow != workflow or task.input != input:
            raise AlreadyExistsError(_conflict(key, task.task_id, task.workflow, workflow))
        return task.task_id

    def _same_as_pending(self, key: str, workflow: str, input: Any) -> None:
        what = self._inflight_what.get(key)
        if what is not None and what != (workflow, input):
            raise AlreadyExistsError(_conflict(key, "being submitted", what[0], workflow))

    # ------------------------------------------------------------ events

    async def send_event(
        self,
        key: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
        sender: str | None = None,
    ) -> EventSent:
        """Record an EVENT; an idempotency key already recorded (or being written)
        answers with the first event instead (replay records a racing copy once too),
        and AlreadyExistsError when that event has another key or payload."""
        p = self._p
        p.check_leading()
        if not key or len(key) > KEY_MAX:
            raise InvalidArgumentError(f"key must be 1 to {KEY_MAX} characters")
        renews = None
        if idempotency_key is not None:
            check_key(idempotency_key)
            state = p.store.state
            known = state.event_keys.get(idempotency_key)
            if known is not None:
                ends = state.event_key_expires.get(idempotency_key)
                if ends is None or p.clock.now_ms() < ends:
                    refuse_event_reuse(state, idempotency_key, known, key, payload)
                    return EventSent(known, False)
                renews = known  # its TTL is over: a new event, which replay takes as one
            pending = self._events_inflight.get(idempotency_key)
            if pending is not None:
                what = self._events_inflight_what[idempotency_key]
                if what != (key, payload):
                    differs = "another event key" if what[0] != key else "another payload"
                    raise AlreadyExistsError(_event_conflict(idempotency_key, None, differs))
                return EventSent((await asyncio.shield(pending)).event_id, False)
        body: dict[str, Any] = {"key": key, "payload": payload}
        if idempotency_key is not None:
            body["idempotency_key"] = idempotency_key
            # how long a resend is recorded once: the same window as a submission's key
            body["ttl_ms"] = int(p.idempotency_ttl_s * 1000)
            if renews is not None:
                body["renews"] = renews
            fut: asyncio.Future[EventSent] = asyncio.get_running_loop().create_future()
            self._events_inflight[idempotency_key] = fut
            self._events_inflight_what[idempotency_key] = (key, payload)
        if sender:
            body["sender"] = sender
        try:
            event = await p.store.log.append(EventType.EVENT, "", payload=body)
        except BaseException as e:
            if idempotency_key is not None:
                self._events_inflight_what.pop(idempotency_key, None)
                failed = self._events_inflight.pop(idempotency_key)
                failed.set_exception(e)
                failed.exception()  # retrieved: nobody may be waiting on it
            raise
        sent = EventSent(event.event_id, True)
        if idempotency_key is not None:
            self._events_inflight_what.pop(idempotency_key, None)
            self._events_inflight.pop(idempotency_key).set_result(sent)
        await p.wait_commit(event.event_id)
        return sent

    # ------------------------------------------------------------ operators

    async def retry_step(
        self, task_id: str, step: str, *, operator: str, reason: str, display: str | None = None
    ) -> Event:
        """Retry `step`; "" retries every step failed for good (a PAUSED task's: what
        resumes it), all or none, one MANUAL_OVERRIDE each; the last is returned."""
        p = self._p
        p.check_leading()
        if not step:
            return await self._resume(task_id, operator=operator, reason=reason, display=display)
        task, s = self._task_and_step(task_id, step)
        require_reason(operator, reason)
        refuse_retry(task, s, p.workflow_for(task), busy=p.is_busy(task_id, step))
        return await self._override(task_id, step, "retry", operator, reason, display)

    async def _resume(
        self, task_id: str, *, operator: str, reason: str, display: str | None
    ) -> Event:
        p = self._p
        task = p.store.state.peek(task_id)
        if task is None:
            raise NotFoundError(p.store.state.not_found(task_id))
        require_reason(operator, reason)
        names = failed_for_good(task)
        if not names:
            raise FailedPreconditionError(
                f"task {task_id} is {task.status.value} and no step of it failed for good: "
                f"name the step to retry (apollo11 retry TASK STEP)"
            )
        wf = p.workflow_for(task)
        for name in names:
            refuse_retry(task, task.steps[name], wf, busy=p.is_busy(task_id, name))
        payload = shown_as({"action": "retry", "operator": operator, "reason": reason}, display)
        events = await p.store.log.append_many(
            [Draft(EventType.MANUAL_OVERRIDE, task_id, name, payload) for name in names]
        )
        await p.wait_commit(events[-1].event_id)
        return events[-1]

    async def skip_step(
        self, task_id: str, step: str, *, operator: str, reason: str, display: str | None = None
    ) -> Event:
        p = self._p
        p.check_leading()
        task, s = self._task_and_step(task_id, step)
        require_reason(operator, reason)
        refuse_skip(task, s, busy=p.is_busy(task_id, step))
        return await self._override(task_id, step, "skip", operator, reason, display)

    async def cancel_task(
        self, task_id: str, *, operator: str, reason: str, display: str | None = None
    ) -> Event:
        p = self._p
        p.check_leading()
        task = p.store.state.peek(task_id)
        if task is None:
            raise NotFoundError(p.store.state.not_found(task_id))
        require_reason(operator, reason)
        owed = owed_by_cancel(task, p.workflow_for(task))
        refuse_cancel(task, owed)
        payload = shown_as({"operator": operator, "reason": reason}, display)
        if owed:
            payload["compensate"] = owed
        event = await p.store.log.append(EventType.TASK_CANCELLED, task_id, payload=payload)
        await p.wait_commit(event.event_id)
        return event

    async def redact_task(
        self, task_id: str, *, operator: str, reason: str, display: str | None = None
    ) -> Event:
        """Record a TASK_REDACTED: the finished task's input and outputs are removed
        (scheduler/log/redact.py)."""
        p = self._p
        p.check_leading()
        state = p.store.state
        task = state.peek(task_id)
        if task is None:
            # purged by retention: its records are still in the segments and the
            # bucket, so an erasure request is carried out all the same
            refuse_redact_purged(task_id, state.purged, state.redacted, state.purged_records)
        require_reason(operator, reason)
        if task is not None:
            busy = any(p.is_busy(task_id, name) for name in task.steps)
            refuse_redact(task, busy=busy, hold=state.holds.get(task_id))
        payload = shown_as({"operator": operator, "reason": reason}, display)
        event = await p.store.log.append(EventType.TASK_REDACTED, task_id, payload=payload)
        await p.wait_commit(event.event_id)
        if state.redacted.get(task_id, event.event_id + 1) > event.event_id:
            # folded as an anomaly (a write raced this one): never a silent OK
            raise FailedPreconditionError(
                f"the redaction of task {task_id} (event {event.event_id}) did not take "
                f"effect: {_why_not_redacted(state, task_id, event.event_id)}"
            )
        return event

    async def close_child(self, task_id: str, *, operator: str, reason: str) -> Event | None:
        """Cancel a spawned task because its parent closed (decide's CancelTask); None
        when it finished or was cancelled meanwhile."""
        p = self._p
        task = p.store.state.peek(task_id)
        if task is None or task.cancelled is not None or task.quiescent:
            return None
        payload: dict[str, Any] = {"operator": operator, "reason": reason}
        if task.parent is not None:
            payload["parent"] = task.parent.get("task_id")
        owed = owed_by_cancel(task, p.workflow_for(task))
        if owed:
            payload["compensate"] = owed
        event = await p.store.log.append(EventType.TASK_CANCELLED, task_id, payload=payload)
        await p.wait_commit(event.event_id)
        return event

    def _task_and_step(self, task_id: str, step: str) -> tuple[TaskState, StepState]:
        task = self._p.store.state.peek(task_id)
        if task is None:
            raise NotFoundError(self._p.store.state.not_found(task_id))
        s = task.steps.get(step)
        if s is None:
            raise NotFoundError(
                f"task {task_id!r} has no step {step!r} (steps: {', '.join(task.steps)})"
            )
        return task, s

    async def _override(
        self,
        task_id: str,
        step: str,
        action: str,
        operator: str,
        reason: str,
        display: str | None,
    ) -> Event:
        p = self._p
        event = await p.store.log.append(
            EventType.MANUAL_OVERRIDE,
            task_id,
            step,
            shown_as({"action": action, "operator": operator, "reason": reason}, display),
        )
        await p.wait_commit(event.event_id)
        return event


# ------------------------------------------------------------------ checks


def submission(
    wf: Workflow,
    input: Any,
    key: str | None,
    trace: dict[str, str] | None = None,
    flow: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The payload of a TASK_SUBMITTED event (`trace`: its trace context, tracing.py;
    `flow`: its flow control, engine/flowsubmit.py)."""
    payload: dict[str, Any] = {
        "workflow": wf.name,
        "version": wf.version,
        "input": input,
        "steps": wf.deps,
    }
    if key is not None:
        payload["idempotency_key"] = key
    if trace is not None:
        payload["trace"] = trace
    if flow is not None:
        payload["flow"] = flow
    return payload


def check_key(key: str) -> None:
    if not key or len(key) > KEY_MAX:
        raise InvalidArgumentError(f"idempotency_key must be 1 to {KEY_MAX} characters")


def require_reason(operator: str, reason: str) -> None:
    if not operator.strip():
        raise InvalidArgumentError("operator must name who is acting")
    if not reason.strip():
        raise InvalidArgumentError("reason must say why (it is kept in the audit log)")


def failed_for_good(task: TaskState) -> list[str]:
    """The steps no automatic retry follows (a PAUSED task's), in declaration order."""
    return [
        n
        for n, st in task.steps.items()
        if st.final and st.status in (StepStatus.FAILED, StepStatus.COMPENSATED)
    ]


def _refuse_compensated(task: TaskState) -> None:
    if task.compensating is not None:
        raise FailedPreconditionError(
            f"task {task.task_id} is {task.status.value}: step "
            f"{task.compensating.get('step')} failed for good and the task is compensated "
            f"(on_exhausted='compensate'); submit it again to run it anew"
        )


def _refuse_redacted(task: TaskState, what: str) -> None:
    """A redacted task's input and step results read `{"$redacted": N}`: a step run (or
    one skipped, so that the next runs), or a compensation (which undoes a step from
    its input and result), would work on the marker, not the data."""
    if task.redacted is not None:
        raise FailedPreconditionError(
            f"task {task.task_id} is redacted (event {task.redacted.get('event_id')}): its "
            f"input and step results are gone, so it cannot be {what}; submit it anew"
        )


def refuse_retry(task: TaskState, s: StepState, wf: Workflow | None, *, busy: bool) -> None:
    """Raise unless an operator may run this step again, with a fresh retry budget."""
    if task.cancelled is not None:
        raise FailedPreconditionError(f"task {task.task_id} is cancelled")
    _refuse_redacted(task, "retried")
    _refuse_compensated(task)
    if s.status not in (StepStatus.FAILED, StepStatus.COMPENSATED) or busy:
        raise FailedPreconditionError(
            f"step {s.name} is {s.status.value}; only a FAILED or COMPENSATED step that is "
            f"not running or compensating can be retried"
        )
    spec = wf.steps.get(s.name) if wf is not None else None
    if spec is not None and spec.needs_compensation and s.status is StepStatus.FAILED:
        raise FailedPreconditionError(
            f"step {s.name} is not idempotent and its compensation has not completed yet; "
            f"retry it once it is COMPENSATED"
        )


_UNSKIPPABLE = (
    StepStatus.STARTED,
    StepStatus.COMPENSATING,
    StepStatus.SUCCEEDED,
    StepStatus.SKIPPED,
)


def refuse_skip(task: TaskState, s: StepState, *, busy: bool) -> None:
    """Raise unless an operator may mark this step done without running it."""
    if task.cancelled is not None:
        raise FailedPreconditionError(f"task {task.task_id} is cancelled")
    _refuse_redacted(task, "skipped")
    _refuse_compensated(task)
    if s.status in _UNSKIPPABLE or busy:
        raise FailedPreconditionError(f"step {s.name} is {s.status.value} and cannot be skipped")


def refuse_cancel(task: TaskState, owed: Sequence[str] = ()) -> None:
    """Raise unless an operator may cancel the task; `owed`: the compensations the
    cancel would owe (`owed_by_cancel`). A redacted task owing none is cancelled (it
    only ends); one owing some is not: they would undo the steps from the marker."""
    if task.status in (TaskStatus.SUCCEEDED, TaskStatus.CANCELLED):
        raise FailedPreconditionError(f"task {task.task_id} is already {task.status.value}")
    _refuse_compensated(task)  # its end is under way: a cancel would owe nothing more
    if owed:
        _refuse_redacted(task, f"cancelled (it would compensate {', '.join(owed)})")


def refuse_redact(task: TaskState, *, busy: bool, hold: Mapping[str, Any] | None = None) -> None:
    """Only a finished task is redacted: a step still to run would read its input, and
    one still running would record an output after the redaction. Nor one under a
    legal hold (`hold`, from state.holds): what it holds is kept as it is."""
    if task.redacted is not None:
        raise FailedPreconditionError(
            f"task {task.task_id} is already redacted (event {task.redacted['event_id']})"
        )
    if hold is not None:
        raise FailedPreconditionError(f"task {task.task_id} is {held_by(hold)}: release it first")
    if not task.quiescent or busy:
        raise FailedPreconditionError(
            f"task {task.task_id} is {task.status.value} and not finished: only a finished "
            "task can be redacted (cancel it first)"
        )


def refuse_redact_purged(
    task_id: str,
    purged: Mapping[str, int],
    redacted: Mapping[str, int],
    records: Mapping[str, Sequence[int]],
) -> None:
    """A task not in the state may be redacted only if retention purged it and its
    records are known (kept at the purge); else there is nothing to find."""
    if task_id not in purged and task_id not in redacted:
        raise NotFoundError(f"no task {task_id!r}")
    if task_id in redacted:
        raise FailedPreconditionError(
            f"task {task_id} is already redacted (event {redacted[task_id]})"
        )
    if task_id not in records:
        raise FailedPreconditionError(
            f"task {task_id} was purged by retention (event {purged[task_id]}) and this "
            "node does not know which records are its (it was purged by an older "
            "version): it cannot be redacted"
        )


def _why_not_redacted(state: State, task_id: str, event_id: int) -> str:
    """Why a committed TASK_REDACTED changed nothing: a write that came first."""
    hold = state.holds.get(task_id)
    if hold is not None:
        return f"the task is {held_by(hold)}: release it first"
    return f"a write that raced it came first (the state's anomaly for event {event_id})"


def owed_by_cancel(task: TaskState, wf: Workflow | None) -> list[str]:
    """What a cancel owes, recorded in its event: the succeeded steps that declared a
    compensation (decide.compensable) when the workflow compensates on cancel, or when
    a step's retries ran out under on_exhausted="compensate" and the engine has yet to
    record it: the cancel overtakes that record (the task ends CANCELLED, the late
    TASK_COMPENSATING is not written), so it must owe what the record would have."""
    if wf is None:
        return []
    undoing = task.exhausted is not None and task.exhausted.get("then") == "compensate"
    if not (wf.compensate_on_cancel or undoing):
        return []
    return compensable(task, wf)


def shown_as(payload: dict[str, Any], display: str | None) -> dict[str, Any]:
    """The payload's "operator" is the authenticated principal; a display name the
    caller typed goes beside it (as "as"), never in its place."""
    name = (display or "").strip()
    if name and name != payload["operator"]:
        payload["as"] = name[:128]
    return payload


def refuse_event_reuse(state: State, idem: str, known: int, key: str, payload: Any) -> None:
    """Raise AlreadyExistsError unless event `known`, which idempotency key `idem`
    recorded, is this one: the same event key and payload (as a submission's key
    must carry the same workflow and input). Answering the first event for another
    one would drop the new one silently; the producer must hear it was not sent."""
    first = state.first_event(key, known)  # the recorded one, if it had this key
    if first is None or first[0] != known:
        raise AlreadyExistsError(_event_conflict(idem, known, "another event key"))
    if first[1] != payload:
        raise AlreadyExistsError(_event_conflict(idem, known, "another payload"))


def _reused(key: str, names: str, differs: str, same: str) -> str:
    """The one wording of an idempotency key reused for another request, for tasks
    and events alike (ALREADY_EXISTS)."""
    return (
        f"idempotency key {key!r} already names {names} ({differs}); the same key must "
        f"carry the same {same}: use a new key for a new request"
    )


def _conflict(key: str, task: str, had: str, asked: str) -> str:
    which = f"task {task}" if task != "being submitted" else "a submission under way"
    other = f"workflow {had}" if had != asked else "another input"
    return _reused(key, which, other, "workflow and input")


def _event_conflict(key: str, event_id: int | None, differs: str) -> str:
    which = f"event {event_id}" if event_id is not None else "an event being sent"
    return _reused(key, which, differs, "event key and payload")
