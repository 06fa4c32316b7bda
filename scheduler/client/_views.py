"""Typed results of the client API, and the JSON shapes the CLI prints.

These shapes are a contract (scripts parse `--json`): keys may be added,
never renamed or removed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from apollo11.scheduler.historynote import history_note


@dataclass(frozen=True, slots=True)
class StepView:
    name: str
    state: str
    attempt: int
    error: str | None
    result: Any
    started_ms: int | None
    finished_ms: int | None
    after: tuple[str, ...]
    final: bool
    lost: bool
    compensations: int
    compensation_error: str | None
    owed: bool
    override: dict[str, Any] | None
    losses: int = 0  # attempts interrupted by a dying node or worker (0: an older server)

    @property
    def duration_ms(self) -> int | None:
        if self.started_ms is None or self.finished_ms is None:
            return None
        return self.finished_ms - self.started_ms

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state,
            "attempt": self.attempt,
            "error": self.error,
            "duration_ms": self.duration_ms,
            "result": self.result,
            "compensations": self.compensations,
            "override": self.override,
            "losses": self.losses,
        }


@dataclass(frozen=True, slots=True)
class TaskView:
    task_id: str
    workflow: str
    version: int
    state: str
    input: Any
    steps: tuple[StepView, ...]
    submitted_ms: int
    updated_ms: int
    first_event_id: int
    last_event_id: int
    idempotency_key: str | None
    cancelled: dict[str, Any] | None
    anomalies: tuple[str, ...]
    as_of_event_id: int
    # a durable task: its checkpoints, the wait in force, a non-determinism report
    durable: dict[str, Any] | None = None
    # a spawned task: {"task_id" (its parent), "seq", "close"}
    parent: dict[str, Any] | None = None
    # why the primary cannot move it on now (a version not loaded, no worker for it);
    # None when nothing stands in its way, and from a standby or for a past state
    blocked: str | None = None
    # the schedule occurrence it is: {"id", "nominal_time" (ISO-8601 UTC), "triggered"}
    schedule: dict[str, Any] | None = None
    # why the primary holds it back under flow control ("queued: host=db1 is full
    # (2/2), 14 ahead"); None when it does not, and from a standby or for a past state
    waiting: str | None = None
    priority: int = 3  # 1 (first) to 5, as submitted
    # its legal hold (docs/retention.md): {"by", "reason", "at_ms", "event_id"}; None when
    # it is not held, and for a past state
    held: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        return self.state in ("SUCCEEDED", "FAILED", "CANCELLED", "COMPENSATED") and not any(
            s.state in ("STARTED", "COMPENSATING") or s.owed for s in self.steps
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "workflow": self.workflow,
            "version": self.version,
            "state": self.state,
            "steps": [s.to_json() for s in self.steps],
            "submitted_ms": self.submitted_ms,
            "updated_ms": self.updated_ms,
            "last_event_id": self.last_event_id,
            "as_of_event_id": self.as_of_event_id,
            "cancelled": self.cancelled,
            "anomalies": list(self.anomalies),
            "durable": self.durable,
            "parent": self.parent,
            "blocked": self.blocked,
            "schedule": self.schedule,
            "waiting": self.waiting,
            "priority": self.priority,
            "held": self.held,
        }


@dataclass(frozen=True, slots=True)
class TaskSummaryView:
    task_id: str
    workflow: str
    state: str
    submitted_ms: int
    updated_ms: int
    steps_done: int
    steps_total: int
    name: str = ""  # the workflow, or "shell <name>" for a shell DAG that names itself

    def to_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "workflow": self.workflow,
            "name": self.name or self.workflow,
            "state": self.state,
            "submitted_ms": self.submitted_ms,
            "updated_ms": self.updated_ms,
            "steps_done": self.steps_done,
            "steps_total": self.steps_total,
        }


@dataclass(frozen=True, slots=True)
class EventView:
    event_id: int
    term: int
    instance_id: str
    task_id: str
    step_name: str
    event_type: str
    payload: Any
    timestamp_ms: int
    attempt: int

    def to_json(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "term": self.term,
            "instance_id": self.instance_id,
            "task_id": self.task_id,
            "step_name": self.step_name,
            "event_type": self.event_type,
            "payload": self.payload,
            "timestamp_ms": self.timestamp_ms,
            "attempt": self.attempt,
        }


@dataclass(frozen=True, slots=True)
class EventsPage:
    """A page of events, where the next starts (0: none), and where its older part
    came from: below `bucket_before` the archive's bucket (the node's disk no longer
    holds them), below `gone_before` nowhere (not in the page). 0: none."""

    events: list[EventView]
    next_id: int
    bucket_before: int = 0
    gone_before: int = 0

    @property
    def note(self) -> str:
        """The sentence to show beside the page ("": all from the node's disk)."""
        return history_note(self.bucket_before, self.gone_before)


@dataclass(frozen=True, slots=True)
class TaskRead:
    """One task of `Client.tasks_with_events`: `task` None when there is no such task
    (purged since it was listed, say); `page` its events from its first on, and
    `page.next_id` where the rest start when they did not all fit (read them with
    `events_page`)."""

    task_id: str
    task: TaskView | None
    page: EventsPage


@dataclass(frozen=True, slots=True)
class MemberView:
    node_id: str
    role: str
    address: str
    last_event_id: int
    term: int
    lag_events: int
    lag_ms: float
    connected: bool
    synchronous: bool
    ack_p50_ms: float = 0.0
    ack_p99_ms: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "role": self.role,
            "address": self.address,
            "last_event_id": self.last_event_id,
            "lag_events": self.lag_events,
            "lag_ms": self.lag_ms,
            "connected": self.connected,
            "synchronous": self.synchronous,
            "ack_p50_ms": self.ack_p50_ms,
            "ack_p99_ms": self.ack_p99_ms,
        }


@dataclass(frozen=True, slots=True)
class WorkerView:
    """A worker connected to the primary."""

    name: str
    address: str
    slots: int
    slots_used: int
    workflows: tuple[str, ...]
    labels: dict[str, str]
    last_heartbeat_s_ago: float
    attempts_running: int
    connected_s_ago: float
    version: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "address": self.address,
            "slots": self.slots,
            "slots_used": self.slots_used,
            "workflows": list(self.workflows),
            "labels": dict(self.labels),
            "last_heartbeat_s_ago": self.last_heartbeat_s_ago,
            "attempts_running": self.attempts_running,
            "connected_s_ago": self.connected_s_ago,
            "version": self.version,
        }


@dataclass(frozen=True, slots=True)
class StatusView:
    node_id: str
    role: str
    term: int
    leader: dict[str, Any] | None
    lease: dict[str, float] | None
    members: tuple[MemberView, ...]
    last_event_id: int
    applied_event_id: int
    recovery: str
    running_steps: int
    active_tasks: int
    extra: dict[str, Any] = field(default_factory=dict)
    security: str = ""
    notice: str = ""
    workers: tuple[WorkerView, ...] = ()
    execution: str = "embedded"
    terms_started: int = 0  # leaders that took over, as the node's log records them

    def to_json(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "role": self.role,
            "term": self.term,
            "terms_started": self.terms_started,
            "leader": self.leader,
            "lease": self.lease,
            "members": [m.to_json() for m in self.members],
            "last_event_id": self.last_event_id,
            "applied_event_id": self.applied_event_id,
            "recovery": self.recovery,
            "running_steps": self.running_steps,
            "active_tasks": self.active_tasks,
            "security": self.security,
            "notice": self.notice,
            "execution": self.execution,
            "workers": [w.to_json() for w in self.workers],
        }


@dataclass(frozen=True, slots=True)
class TermView:
    """One term of the cluster's history: who led it, from which event, since when."""

    term: int
    first_event_id: int
    node_id: str  # "": the log no longer keeps its first event (retention)
    address: str
    started_ms: int
    # how the term began: bootstrap, failover, switchover, restart; "" when its
    # TERM_STARTED does not say (written by an older node, or not kept)
    began: str = ""
    previous: str = ""  # the previous term's leader

    def to_json(self) -> dict[str, Any]:
        return {
            "term": self.term,
            "first_event_id": self.first_event_id,
            "node_id": self.node_id,
            "address": self.address,
            "started_ms": self.started_ms,
            "began": self.began,
            "previous": self.previous,
        }


@dataclass(frozen=True, slots=True)
class Page:
    tasks: tuple[TaskSummaryView, ...]
    next_page_token: str


@dataclass(frozen=True, slots=True)
class Submission:
    task_id: str
    created: bool
    event_id: int


@dataclass(frozen=True, slots=True)
class SentEvent:
    """What SendEvent recorded: the EVENT's id (the first one's, for a duplicate)."""

    event_id: int
    created: bool  # False: the idempotency key named an event already recorded


@dataclass(frozen=True, slots=True)
class ScheduleSpecView:
    """When a schedule fires, each field as the node spells it (durations "1h30m",
    times ISO-8601 in UTC): one of `cron`, `every`, `at`; the rest always set."""

    cron: str | None
    every: str | None
    at: str | None
    tz: str
    start: str | None
    end: str | None
    jitter: str
    catchup_window: str
    overlap: str
    nonexistent: str
    ambiguous: str

    @property
    def when(self) -> str:
        """ "cron 0 3 * * *", "every 15m", "at 2026-01-01T09:00:00"."""
        for name in ("cron", "every", "at"):
            value = getattr(self, name)
            if value is not None:
                return f"{name} {value}"
        return ""

    def to_json(self) -> dict[str, str]:
        """The fields that have a value: what `ScheduleSpec.model_validate` reads back."""
        return {
            name: value for name in self.__slots__ if (value := getattr(self, name)) is not None
        }


@dataclass(frozen=True, slots=True)
class OccurrenceView:
    """What became of one nominal time: fired (with its task), missed, skipped or
    buffered (with the reason)."""

    nominal_time: str  # ISO-8601 in UTC, before jitter
    outcome: str
    reason: str
    task_id: str | None
    event_id: int

    def to_json(self) -> dict[str, Any]:
        return {
            "nominal_time": self.nominal_time,
            "outcome": self.outcome,
            "reason": self.reason,
            "task_id": self.task_id,
            "event_id": self.event_id,
        }


@dataclass(frozen=True, slots=True)
class ScheduleView:
    schedule_id: str
    workflow: str
    spec: ScheduleSpecView
    input: Any
    paused: bool
    note: str
    by: str  # the principal of the last change
    source: str  # "api", or "code" (a Schedule in a workflow module)
    created_ms: int
    updated_ms: int
    next: tuple[str, ...]  # the next nominal times, ISO-8601 in UTC
    last: OccurrenceView | None
    watermark: str | None  # the last nominal time decided
    occurrences: int  # how many are recorded
    backfills: tuple[BackfillView, ...] = ()  # those running, oldest first

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.schedule_id,
            "workflow": self.workflow,
            "spec": self.spec.to_json(),
            "input": self.input,
            "paused": self.paused,
            "note": self.note,
            "by": self.by,
            "source": self.source,
            "created_ms": self.created_ms,
            "updated_ms": self.updated_ms,
            "next": list(self.next),
            "last": None if self.last is None else self.last.to_json(),
            "watermark": self.watermark,
            "occurrence_count": self.occurrences,
            "backfills": [b.to_json() for b in self.backfills],
        }


@dataclass(frozen=True, slots=True)
class BackfillView:
    """A backfill still running: the range it fires (ISO-8601 UTC), and who asked."""

    backfill_id: int
    from_time: str
    to_time: str
    overlap: str
    by: str

    def to_json(self) -> dict[str, Any]:
        return {
            "backfill_id": self.backfill_id,
            "from": self.from_time,
            "to": self.to_time,
            "overlap": self.overlap,
            "by": self.by,
        }


@dataclass(frozen=True, slots=True)
class BackfillStarted:
    """What `backfill_schedule` started: its id and the nominal times in its range
    (those fired before are left alone as it goes)."""

    backfill_id: int
    times: int

    def to_json(self) -> dict[str, Any]:
        return {"backfill_id": self.backfill_id, "times": self.times}


@dataclass(frozen=True, slots=True)
class SchedulePage:
    schedules: tuple[ScheduleView, ...]
    next_page_token: str


@dataclass(frozen=True, slots=True)
class ScheduleDescription:
    """A schedule and a page of its occurrences (oldest first unless asked newest
    first); `next_page_token` is "" on the last page."""

    schedule: ScheduleView
    occurrences: tuple[OccurrenceView, ...]
    next_page_token: str


@dataclass(frozen=True, slots=True)
class KeyLoadView:
    """One value of a limit's key: what holds a slot of it now, and what the primary
    holds back for it."""

    value: str
    running: int
    queued: int

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "running": self.running, "queued": self.queued}


@dataclass(frozen=True, slots=True)
class LimitView:
    """A flow-control limit (docs/flow-control.md) as the primary enforces it now."""

    limit_id: str  # "runbook/host", "runbook.load/warehouse", "warehouse"
    kind: str  # concurrency, rate
    scope: str  # workflow, global
    declared: str  # "max 2", "10 per 1s, burst 20"; "" when no loaded workflow declares it
    effective: str  # the same, with an operator's change
    overridden: bool  # an operator changed it (`set_limit`); reset puts it back
    on_full: str  # concurrency: queue, reject_new, cancel_running; a rate: ""
    keys: tuple[KeyLoadView, ...]  # busiest first: most queued, then most running
    values: int  # key values with anything running or queued (`keys` may hold fewer)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.limit_id,
            "kind": self.kind,
            "scope": self.scope,
            "declared": self.declared,
            "effective": self.effective,
            "overridden": self.overridden,
            "on_full": self.on_full,
            "keys": [k.to_json() for k in self.keys],
            "values": self.values,
        }


@dataclass(frozen=True, slots=True)
class LimitsView:
    """Every limit, by id, and the fairness weights an operator set (a value not
    listed weighs 1)."""

    limits: tuple[LimitView, ...]
    weights: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        return {"limits": [v.to_json() for v in self.limits], "weights": dict(self.weights)}


@dataclass(frozen=True, slots=True)
class LimitChange:
    """What `set_limit` recorded: the LIMIT event, the limit as now in force (None when
    only weights were set) and the fairness weights now in force."""

    event_id: int
    limit: LimitView | None
    weights: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "limit": None if self.limit is None else self.limit.to_json(),
            "weights": dict(self.weights),
        }
