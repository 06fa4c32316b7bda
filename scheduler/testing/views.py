"""The engine's records as a client sees them: a test of a workflow asserts on what
its program reads in production (`TaskView`, `EventView`, `TaskFailed`), not on the
node's state model.

The same fields as the API's codec (scheduler/api/codec.py) then the client's
conversion (scheduler/client/_convert.py) give, without the protobuf trip: the
wire's names of states and event types are the model's (the codec checks that at
import), and results and payloads are JSON already (the log holds them so).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from apollo11.scheduler.client import EventView, StepView, TaskView
from apollo11.scheduler.log import Event
from apollo11.scheduler.state import TaskState


def task_view(t: TaskState, *, as_of: int, blocked: str | None = None) -> TaskView:
    return TaskView(
        task_id=t.task_id,
        workflow=t.workflow,
        version=t.version,
        state=t.status.value,
        input=t.input,
        steps=tuple(
            StepView(
                name=name,
                state=s.status.value,
                attempt=s.attempt,
                error=s.error or None,
                result=s.result,
                started_ms=s.started_ms or None,
                finished_ms=s.finished_ms or None,
                after=tuple(t.deps.get(name, ())),
                final=s.final,
                lost=s.lost,
                compensations=s.compensations,
                compensation_error=s.compensation_error or None,
                owed=s.owed,
                override=s.override,
            )
            for name, s in t.steps.items()
        ),
        submitted_ms=t.submitted_ms,
        updated_ms=t.updated_ms,
        first_event_id=t.first_event_id,
        last_event_id=t.last_event_id,
        idempotency_key=t.idempotency_key or None,
        cancelled=t.cancelled,
        anomalies=tuple(t.anomalies),
        as_of_event_id=as_of,
        durable=None if t.durable is None else t.durable.to_dict(),
        parent=t.parent,
        blocked=blocked,
        schedule=None if t.schedule is None else _occurrence(t.schedule),
        priority=int((t.flow or {}).get("priority", 3)),
    )


def event_view(e: Event) -> EventView:
    return EventView(
        event_id=e.event_id,
        term=e.term,
        instance_id=e.instance_id,
        task_id=e.task_id,
        step_name=e.step_name,
        event_type=e.event_type.name,
        payload=dict(e.payload),
        timestamp_ms=e.timestamp,
        attempt=e.attempt,
    )


def _occurrence(fired: dict[str, Any]) -> dict[str, Any]:
    """A task's schedule as clients get it: its nominal time in ISO-8601, not ms."""
    # integer arithmetic, as the codec's iso_ms: a float shows 03:00:00.000999
    at = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=int(fired["nominal_ms"]))
    return {
        "id": fired["id"],
        "nominal_time": at.isoformat().replace("+00:00", "Z"),
        "triggered": bool(fired.get("triggered")),
    }
