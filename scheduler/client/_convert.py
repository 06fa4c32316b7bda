"""Protobuf messages -> the client's views (frozen records, no generated types).

The client's half of the conversion (`apollo11.scheduler.api.codec` is the server's): it
knows the messages and `apollo11.scheduler.wire`'s enum names, not the node's state
model, so an application that embeds the client loads none of it.
"""

from __future__ import annotations

from typing import Any

import orjson

from apollo11.scheduler import wire
from apollo11.scheduler.client._views import (
    BackfillView,
    EventView,
    KeyLoadView,
    LimitChange,
    LimitsView,
    LimitView,
    MemberView,
    OccurrenceView,
    Page,
    ScheduleDescription,
    SchedulePage,
    ScheduleSpecView,
    ScheduleView,
    SentEvent,
    StatusView,
    StepView,
    Submission,
    TaskSummaryView,
    TaskView,
    TermView,
    WorkerView,
)
from apollo11.v1 import scheduler_pb2 as pb


def _loads(text: str) -> Any:
    return orjson.loads(text) if text else None


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
        state=wire.TASK_STATE_NAME.get(m.state, "UNSPECIFIED"),
        input=_loads(m.input_json),
        steps=tuple(
            StepView(
                name=s.name,
                state=wire.STEP_STATE_NAME.get(s.state, "UNSPECIFIED"),
                attempt=s.attempt,
                error=s.error or None,
                result=_loads(s.result_json),
                started_ms=s.started_ms or None,
                finished_ms=s.finished_ms or None,
                after=tuple(s.after),
                final=s.final,
                lost=s.lost,
                losses=s.losses,
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
        durable=_loads(m.durable_json) if m.durable_json else None,
        parent=_loads(m.parent_json) if m.parent_json else None,
        blocked=m.blocked or None,
        schedule=_loads(m.schedule_json) if m.schedule_json else None,
        waiting=m.waiting or None,
        priority=m.priority or 3,  # 0: a server older than the field
        held=_loads(m.held_json) if m.held_json else None,
    )


def event_from_pb(m: pb.Event) -> EventView:
    return EventView(
        event_id=m.event_id,
        term=m.term,
        instance_id=m.instance_id,
        task_id=m.task_id,
        step_name=m.step_name,
        event_type=wire.EVENT_TYPE_NAME.get(m.event_type, "UNSPECIFIED"),
        payload=_loads(m.payload_json),
        timestamp_ms=m.timestamp_ms,
        attempt=m.attempt,
    )


def page_from_pb(m: pb.ListTasksResponse) -> Page:
    return Page(
        tasks=tuple(
            TaskSummaryView(
                task_id=t.task_id,
                workflow=t.workflow,
                state=wire.TASK_STATE_NAME.get(t.state, "UNSPECIFIED"),
                submitted_ms=t.submitted_ms,
                updated_ms=t.updated_ms,
                steps_done=t.steps_done,
                steps_total=t.steps_total,
                name=t.name or t.workflow,
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
        execution=m.execution or "embedded",
        terms_started=m.terms_started,
        workers=tuple(
            WorkerView(
                name=w.name,
                address=w.address,
                slots=w.slots,
                slots_used=w.slots_used,
                workflows=tuple(w.workflows),
                labels=dict(w.labels),
                last_heartbeat_s_ago=w.last_heartbeat_s_ago,
                attempts_running=w.attempts_running,
                connected_s_ago=w.connected_s_ago,
                version=w.version,
            )
            for w in m.workers
        ),
    )


def sent_event_from_pb(m: pb.SendEventResponse) -> SentEvent:
    return SentEvent(event_id=m.event_id, created=m.created)


def submission_from_pb(m: pb.SubmitTaskResponse) -> Submission:
    return Submission(task_id=m.task_id, created=m.created, event_id=m.event_id)


def workflow_from_pb(m: pb.WorkflowInfo) -> dict[str, Any]:
    return {
        "name": m.name,
        "version": m.version,
        "description": m.description,
        "durable": m.durable,
        "steps": [
            {
                "name": st.name,
                "after": list(st.after),
                "idempotency": st.idempotency,
                "attempts": st.attempts,
                "timeout": st.timeout,
                "labels": dict(st.labels),
                "compensated": st.compensated,
            }
            for st in m.steps
        ],
        "input_schema": orjson.loads(m.input_schema_json) if m.input_schema_json else None,
        "result_schema": orjson.loads(m.result_schema_json) if m.result_schema_json else None,
    }


def term_from_pb(m: pb.TermInfo) -> TermView:
    return TermView(
        term=m.term,
        first_event_id=m.first_event_id,
        node_id=m.node_id,
        address=m.address,
        started_ms=m.started_ms,
        began=m.began,
        previous=m.previous,
    )


def _spec_from_pb(m: pb.ScheduleSpec) -> ScheduleSpecView:
    when = m.WhichOneof("when")
    return ScheduleSpecView(
        cron=m.cron if when == "cron" else None,
        every=m.every if when == "every" else None,
        at=m.at if when == "at" else None,
        tz=m.tz,
        start=m.start if m.HasField("start") else None,
        end=m.end if m.HasField("end") else None,
        jitter=m.jitter,
        catchup_window=m.catchup_window,
        overlap=m.overlap,
        nonexistent=m.nonexistent,
        ambiguous=m.ambiguous,
    )


def occurrence_from_pb(m: pb.Occurrence) -> OccurrenceView:
    return OccurrenceView(
        nominal_time=m.nominal_time,
        outcome=m.outcome,
        reason=m.reason,
        task_id=m.task_id or None,
        event_id=m.event_id,
    )


def schedule_from_pb(m: pb.Schedule) -> ScheduleView:
    return ScheduleView(
        schedule_id=m.schedule_id,
        workflow=m.workflow,
        spec=_spec_from_pb(m.spec),
        input=_loads(m.input_json),
        paused=m.paused,
        note=m.note,
        by=m.by,
        source=m.source,
        created_ms=m.created_ms,
        updated_ms=m.updated_ms,
        next=tuple(m.next),
        last=occurrence_from_pb(m.last) if m.HasField("last") else None,
        watermark=m.watermark or None,
        occurrences=m.occurrences,
        backfills=tuple(
            BackfillView(b.backfill_id, b.from_time, b.to_time, b.overlap, b.by)
            for b in m.backfills
        ),
    )


def schedule_page_from_pb(m: pb.ListSchedulesResponse) -> SchedulePage:
    return SchedulePage(
        schedules=tuple(schedule_from_pb(s) for s in m.schedules),
        next_page_token=m.next_page_token,
    )


def schedule_description_from_pb(m: pb.DescribeScheduleResponse) -> ScheduleDescription:
    return ScheduleDescription(
        schedule=schedule_from_pb(m.schedule),
        occurrences=tuple(occurrence_from_pb(o) for o in m.occurrences),
        next_page_token=m.next_page_token,
    )


def limit_from_pb(m: pb.Limit) -> LimitView:
    return LimitView(
        limit_id=m.limit_id,
        kind=m.kind,
        scope=m.scope,
        declared=m.declared,
        effective=m.effective,
        overridden=m.overridden,
        on_full=m.on_full,
        keys=tuple(KeyLoadView(k.value, k.running, k.queued) for k in m.keys),
        values=m.values,
    )


def limits_from_pb(m: pb.ListLimitsResponse) -> LimitsView:
    return LimitsView(
        limits=tuple(limit_from_pb(v) for v in m.limits), weights=dict(sorted(m.weights.items()))
    )


def limit_change_from_pb(m: pb.SetLimitResponse) -> LimitChange:
    return LimitChange(
        event_id=m.event_id,
        limit=limit_from_pb(m.limit) if m.HasField("limit") else None,
        weights=dict(sorted(m.weights.items())),
    )
