"""Domain records -> protobuf messages, for the server: tasks, steps, events, schedules,
flow-control limits (and a request's schedule spec -> ScheduleSpec, refused in
`explain`'s words).

The server's half of the conversion; the client's half (messages -> views, and
the request messages) is `apollo11.scheduler.client`, which never imports this module:
this one imports the state model and the log's records. The enum names are
`apollo11.scheduler.wire`'s, so both halves spell them alike. No domain module (log,
replay, store, engine, node) imports generated `*_pb2` code; the API layer's
handlers still build their own small responses, and the replicator speaks
`replication_pb2` itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import ValidationError

from apollo11.scheduler import wire
from apollo11.scheduler.errors import InvalidArgumentError
from apollo11.scheduler.flow import DEFAULT_PRIORITY
from apollo11.scheduler.log import Event, EventType
from apollo11.scheduler.nodeview import MAX_ID
from apollo11.scheduler.schedules import EPOCH, ScheduleSpec, explain
from apollo11.scheduler.state import StepState, StepStatus, TaskState, TaskStatus
from apollo11.scheduler.workflow import (
    AUTO,
    Checkpoint,
    DedupeKey,
    Idempotent,
    NotIdempotent,
    Workflow,
)
from apollo11.v1 import scheduler_pb2 as pb

if TYPE_CHECKING:
    from apollo11.scheduler.engine import LimitView
    from apollo11.scheduler.state import OccurrenceRecord, ScheduleState

# Built from the domain's enums: a status or event type the wire cannot carry
# fails here, at import, not in the middle of an answer.
TASK_STATE = {s.value: wire.TASK_STATE[s.value] for s in TaskStatus}
TASK_STATE_NAME = {v: k for k, v in TASK_STATE.items()}
STEP_STATE = {s.value: wire.STEP_STATE[s.value] for s in StepStatus}
EVENT_TYPE = {t: wire.EVENT_TYPE[t.name] for t in EventType}


def dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _override(d: dict[str, Any] | None) -> pb.Override | None:
    if not d:
        return None
    return pb.Override(
        action=str(d.get("action") or ""),
        operator=str(d.get("operator") or ""),
        reason=str(d.get("reason") or ""),
        event_id=int(d.get("event_id") or 0),
        shown_as=str(d.get("as") or ""),
    )


def step_to_pb(s: StepState, after: list[str]) -> pb.Step:
    msg = pb.Step(
        name=s.name,
        state=STEP_STATE[s.status.value],
        attempt=s.attempt,
        error=s.error or "",
        result_json=dumps(s.result) if s.result is not None else "",
        started_ms=s.started_ms or 0,
        finished_ms=s.finished_ms or 0,
        after=after,
        final=s.final,
        lost=s.lost,
        losses=s.losses,
        compensations=s.compensations,
        compensation_error=s.compensation_error or "",
        owed=s.owed,
        anomaly=s.anomaly or "",
    )
    o = _override(s.override)
    if o is not None:
        msg.override.CopyFrom(o)
    return msg


def task_to_pb(
    t: TaskState,
    as_of: int,
    blocked: str = "",
    waiting: str = "",
    held: Mapping[str, Any] | None = None,
) -> pb.Task:
    msg = pb.Task(
        task_id=t.task_id,
        workflow=t.workflow,
        version=t.version,
        state=TASK_STATE[t.status.value],
        input_json=dumps(t.input),
        steps=[step_to_pb(s, t.deps.get(n, [])) for n, s in t.steps.items()],
        submitted_ms=t.submitted_ms,
        updated_ms=t.updated_ms,
        first_event_id=t.first_event_id,
        last_event_id=t.last_event_id,
        idempotency_key=t.idempotency_key or "",
        anomalies=t.anomalies,
        as_of_event_id=as_of,
        durable_json="" if t.durable is None else dumps(t.durable.to_dict()),
        parent_json="" if t.parent is None else dumps(t.parent),
        blocked=blocked,
        schedule_json="" if t.schedule is None else dumps(_occurrence_of(t.schedule)),
        waiting=waiting,
        priority=priority_of(t),
        held_json="" if held is None else dumps(dict(held)),
    )
    o = _override(t.cancelled)
    if o is not None:
        msg.cancelled.CopyFrom(o)
    return msg


def priority_of(t: TaskState) -> int:
    """The priority the task was submitted with (its "flow" records one only when it is
    not the default)."""
    return int((t.flow or {}).get("priority", DEFAULT_PRIORITY))


def limit_to_pb(v: LimitView) -> pb.Limit:
    return pb.Limit(
        limit_id=v.limit_id,
        kind=v.kind,
        scope=v.scope,
        declared=v.declared,
        effective=v.effective,
        overridden=v.overridden,
        on_full=v.on_full,
        keys=[pb.KeyLoad(value=k.value, running=k.running, queued=k.queued) for k in v.keys],
        values=v.values,
    )


def event_to_pb(e: Event) -> pb.Event:
    return pb.Event(
        event_id=e.event_id,
        term=e.term,
        instance_id=e.instance_id,
        task_id=e.task_id,
        step_name=e.step_name,
        event_type=EVENT_TYPE[e.event_type],
        payload_json=dumps(e.payload),
        timestamp_ms=e.timestamp,
        attempt=e.attempt,
    )


def task_state_filter(value: pb.TaskState) -> str | None:
    """A ListTasks state filter as a TaskStatus value (None: no filter)."""
    if value == pb.TASK_STATE_UNSPECIFIED:
        return None
    return TASK_STATE_NAME.get(value)


_IDEMPOTENCY = {
    Idempotent: "idempotent",
    DedupeKey: "dedupe_key",
    Checkpoint: "checkpoint",
    NotIdempotent: "not_idempotent",
}


def workflow_to_pb(wf: Workflow) -> pb.WorkflowInfo:
    """A loaded workflow version and how each of its steps is declared."""
    return pb.WorkflowInfo(
        name=wf.name,
        version=wf.version,
        description=wf.description,
        durable=any(s.journaled for s in wf.steps.values()),
        steps=[
            pb.WorkflowStep(
                name=s.name,
                after=list(s.after),
                idempotency=_IDEMPOTENCY.get(type(s.idempotency), "") if s.idempotency else "",
                attempts=s.retry.attempts,
                timeout=AUTO if s.timeout == AUTO else f"{float(s.timeout):g}",
                labels=dict(s.labels),
                compensated=s.compensate is not None,
            )
            for s in wf.steps.values()
        ],
        input_schema_json=_schema_json(wf.input_schema()),
        result_schema_json=_schema_json(wf.result_schema()),
    )


def _schema_json(schema: dict[str, Any] | None) -> str:
    return "" if schema is None else orjson.dumps(schema).decode()


# A spec's `when` (the request's oneof) and its other fields, as ScheduleSpec names them.
WHEN = ("cron", "every", "at")
SPEC_OPTIONS = (
    "tz",
    "start",
    "end",
    "jitter",
    "catchup_window",
    "overlap",
    "nonexistent",
    "ambiguous",
)


def iso_ms(ms: int) -> str:
    """Milliseconds since the epoch as ISO-8601 in UTC with "Z" (integer arithmetic: a
    float would show 03:00:00.000999 for some times)."""
    return iso(EPOCH + timedelta(milliseconds=ms))


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def spec_to_pb(spec: ScheduleSpec) -> pb.ScheduleSpec:
    """Every field of the spec, defaults too (its stored JSON is text field by field)."""
    return pb.ScheduleSpec(**orjson.loads(spec.to_json()))


def _given(m: pb.ScheduleSpec) -> dict[str, str]:
    """The fields a request set: its `when`, and each optional field present."""
    fields: dict[str, str] = {}
    when = m.WhichOneof("when")
    if when is not None:
        fields[when] = getattr(m, when)
    for name in SPEC_OPTIONS:
        if m.HasField(name):
            fields[name] = getattr(m, name)
    for name, value in fields.items():
        if len(value) > MAX_ID:
            raise InvalidArgumentError(
                f"spec.{name} is {len(value)} characters, over the limit of {MAX_ID}"
            )
    return fields


def _spec(fields: dict[str, str]) -> ScheduleSpec:
    try:
        return ScheduleSpec.model_validate(fields)
    except ValidationError as e:
        raise InvalidArgumentError(explain(e)) from None


def spec_from_pb(m: pb.ScheduleSpec) -> ScheduleSpec:
    """A create request's spec: an empty option takes its default; an empty `when` is
    given to the spec as it is, which says what is wrong with it."""
    given = _given(m)
    return _spec({k: v for k, v in given.items() if v or k in WHEN})


def spec_updated(current: ScheduleSpec, m: pb.ScheduleSpec) -> ScheduleSpec:
    """An update's spec over the current one: a `when` given replaces cron, every or at;
    each option given replaces that field, and "" puts it back to its default."""
    fields: dict[str, Any] = orjson.loads(current.to_json())
    given = _given(m)
    if any(name in given for name in WHEN):
        for name in WHEN:
            fields.pop(name, None)
    for name, value in given.items():
        if value or name in WHEN:
            fields[name] = value
        else:
            fields.pop(name, None)
    return _spec(fields)


def _occurrence_of(fired: dict[str, Any]) -> dict[str, Any]:
    """A task's schedule field for clients: its nominal time as ISO-8601, not ms."""
    return {
        "id": fired["id"],
        "nominal_time": iso_ms(int(fired["nominal_ms"])),
        "triggered": bool(fired.get("triggered")),
    }


def occurrence_to_pb(o: OccurrenceRecord) -> pb.Occurrence:
    return pb.Occurrence(
        nominal_time=iso_ms(o.nominal_ms),
        outcome=o.outcome,
        reason=o.reason or "",
        task_id=o.task_id or "",
        event_id=o.event_id,
    )


def schedule_to_pb(s: ScheduleState, next_times: list[datetime]) -> pb.Schedule:
    msg = pb.Schedule(
        schedule_id=s.schedule_id,
        workflow=s.workflow,
        spec=spec_to_pb(s.spec),
        input_json=dumps(s.input),
        paused=s.paused,
        note=s.note,
        by=s.by,
        source=s.source,
        created_ms=s.created_ms,
        updated_ms=s.updated_ms,
        next=[iso(t) for t in next_times],
        watermark="" if s.watermark_ms is None else iso_ms(s.watermark_ms),
        occurrences=len(s.occurrences),
        backfills=[
            pb.Backfill(
                backfill_id=b.event_id,
                from_time=iso_ms(b.from_ms),
                to_time=iso_ms(b.to_ms),
                overlap=b.overlap,
                by=b.by,
            )
            for _, b in sorted(s.backfills.items())
        ],
    )
    last = s.last()
    if last is not None:
        msg.last.CopyFrom(occurrence_to_pb(last))
    return msg
