"""The one place that converts between domain objects and protobuf messages.

Nothing else in the project imports generated `*_pb2` code.
"""

from __future__ import annotations

from typing import Any

import orjson
from apollo11.v1 import scheduler_pb2 as pb

from scheduler.api.views import (
    EventView,
    MemberView,
    Page,
    StatusView,
    StepView,
    Submission,
    TaskSummaryView,
    TaskView,
)
from scheduler.log.record import Event, EventType
from scheduler.replay import StepState, TaskState, TaskStatus

TASK_STATE = {s.value: getattr(pb, f"TASK_STATE_{s.value}") for s in TaskStatus}
TASK_STATE_NAME = {v: k for k, v in TASK_STATE.items()}
STEP_STATE_NAME = {getattr(pb, n): n.removeprefix("STEP_STATE_") for n in pb.StepState.keys()}  # noqa: SIM118
STEP_STATE = {v: k for k, v in STEP_STATE_NAME.items()}
EVENT_TYPE = {t: getattr(pb, f"EVENT_TYPE_{t.name}") for t in EventType}
EVENT_TYPE_NAME = {getattr(pb, n): n.removeprefix("EVENT_TYPE_") for n in pb.EventType.keys()}  # noqa: SIM118


def dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def loads(text: str) -> Any:
    return orjson.loads(text) if text else None


# ------------------------------------------------------------ server side


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
        compensations=s.compensations,
        compensation_error=s.compensation_error or "",
        owed=s.owed,
        anomaly=s.anomaly or "",
    )
    o = _override(s.override)
    if o is not None:
        msg.override.CopyFrom(o)
    return msg


def task_to_pb(t: TaskState, as_of: int) -> pb.Task:
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
    )
    o = _override(t.cancelled)
    if o is not None:
        msg.cancelled.CopyFrom(o)
    return msg


def summary_to_pb(t: TaskState) -> pb.TaskSummary:
    return pb.TaskSummary(
        task_id=t.task_id,
        workflow=t.workflow,
        state=TASK_STATE[t.status.value],
        submitted_ms=t.submitted_ms,
        updated_ms=t.updated_ms,
        steps_done=t.done,
        steps_total=len(t.steps),
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


def task_state_filter(value: int) -> str | None:
    """A ListTasks state filter as a TaskStatus value (None: no filter)."""
    if value == pb.TASK_STATE_UNSPECIFIED:
        return None
    return TASK_STATE_NAME.get(value)


# ------------------------------------------------------------ client side


def _override_view(o: pb.Override, present: bool) -> dict[str, Any] | None:
    if not present:
        return None
    view: dict[str, Any] = {
        "action": o.action,
        "operator": o.operator,
        "reason": o.reason,
        "event_id": o.event_id,
    }
    if o.shown_as:
        view["as"] = o.shown_as
    return view


def task_from_pb(m: pb.Task) -> TaskView:
    return TaskView(
        task_id=m.task_id,
        workflow=m.workflow,
        version=m.version,
        state=TASK_STATE_NAME.get(m.state, "UNSPECIFIED"),
        input=loads(m.input_json),
        steps=tuple(
            StepView(
                name=s.name,
                state=STEP_STATE_NAME.get(s.state, "UNSPECIFIED"),
                attempt=s.attempt,
                error=s.error or None,
                result=loads(s.result_json),
                started_ms=s.started_ms or None,
                finished_ms=s.finished_ms or None,
                after=tuple(s.after),
                final=s.final,
                lost=s.lost,
                compensations=s.compensations,
                compensation_error=s.compensation_error or None,
                owed=s.owed,
                override=_override_view(s.override, s.HasField("override")),
            )
            for s in m.steps
        ),
        submitted_ms=m.submitted_ms,
        updated_ms=m.updated_ms,
        first_event_id=m.first_event_id,
        last_event_id=m.last_event_id,
        idempotency_key=m.idempotency_key or None,
        cancelled=_override_view(m.cancelled, m.HasField("cancelled")),
        anomalies=tuple(m.anomalies),
        as_of_event_id=m.as_of_event_id,
    )


def event_from_pb(m: pb.Event) -> EventView:
    return EventView(
        event_id=m.event_id,
        term=m.term,
        instance_id=m.instance_id,
        task_id=m.task_id,
        step_name=m.step_name,
        event_type=EVENT_TYPE_NAME.get(m.event_type, "UNSPECIFIED"),
        payload=loads(m.payload_json),
        timestamp_ms=m.timestamp_ms,
        attempt=m.attempt,
    )


def page_from_pb(m: pb.ListTasksResponse) -> Page:
    return Page(
        tasks=tuple(
            TaskSummaryView(
                task_id=t.task_id,
                workflow=t.workflow,
                state=TASK_STATE_NAME.get(t.state, "UNSPECIFIED"),
                submitted_ms=t.submitted_ms,
                updated_ms=t.updated_ms,
                steps_done=t.steps_done,
                steps_total=t.steps_total,
            )
            for t in m.tasks
        ),
        next_page_token=m.next_page_token,
    )


def status_from_pb(m: pb.ClusterStatus) -> StatusView:
    return StatusView(
        node_id=m.node_id,
        role=m.role,
        term=m.term,
        leader=(
            {"node_id": m.leader.node_id, "address": m.leader.address, "term": m.leader.term}
            if m.HasField("leader")
            else None
        ),
        lease=(
            {"ttl_s": m.lease.ttl_s, "remaining_s": m.lease.remaining_s}
            if m.HasField("lease")
            else None
        ),
        members=tuple(
            MemberView(
                node_id=x.node_id,
                role=x.role,
                address=x.address,
                last_event_id=x.last_event_id,
                term=x.term,
                lag_events=x.lag_events,
                lag_ms=x.lag_ms,
                connected=x.connected,
                synchronous=x.synchronous,
                ack_p50_ms=x.ack_p50_ms,
                ack_p99_ms=x.ack_p99_ms,
            )
            for x in m.members
        ),
        last_event_id=m.last_event_id,
        applied_event_id=m.applied_event_id,
        recovery=m.recovery,
        running_steps=m.running_steps,
        active_tasks=m.active_tasks,
        security=m.security,
        notice=m.notice,
    )


def submission_from_pb(m: pb.SubmitTaskResponse) -> Submission:
    return Submission(task_id=m.task_id, created=m.created, event_id=m.event_id)


# Request builders: the client imports these rather than pb.
def submit_request(workflow: str, input_json: str, key: str, version: int) -> pb.SubmitTaskRequest:
    return pb.SubmitTaskRequest(
        workflow=workflow, input_json=input_json, idempotency_key=key, version=version
    )


def submit_many_request(items: list[pb.SubmitTaskRequest]) -> pb.SubmitTasksRequest:
    return pb.SubmitTasksRequest(tasks=items)


def submit_shell_request(dag_json: str, key: str) -> pb.SubmitShellRequest:
    return pb.SubmitShellRequest(dag_json=dag_json, idempotency_key=key)


def get_task_request(task_id: str, as_of: int) -> pb.GetTaskRequest:
    return pb.GetTaskRequest(task_id=task_id, as_of_event_id=as_of)


def list_request(
    state: str | None, workflow: str, page_size: int, token: str
) -> pb.ListTasksRequest:
    return pb.ListTasksRequest(
        state=TASK_STATE[state] if state else pb.TASK_STATE_UNSPECIFIED,
        workflow=workflow,
        page_size=page_size,
        page_token=token,
    )


def watch_request(task_id: str) -> pb.WatchTaskRequest:
    return pb.WatchTaskRequest(task_id=task_id)


def events_request(task_id: str, from_id: int, to_id: int, limit: int) -> pb.GetEventsRequest:
    return pb.GetEventsRequest(
        task_id=task_id, from_event_id=from_id, to_event_id=to_id, limit=limit
    )


def step_action_request(
    task_id: str, step: str, operator: str, reason: str
) -> pb.StepActionRequest:
    return pb.StepActionRequest(task_id=task_id, step=step, operator=operator, reason=reason)


def cancel_request(task_id: str, operator: str, reason: str) -> pb.CancelTaskRequest:
    return pb.CancelTaskRequest(task_id=task_id, operator=operator, reason=reason)


def status_request() -> pb.GetStatusRequest:
    return pb.GetStatusRequest()
