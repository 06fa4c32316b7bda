"""The request messages the client sends, built from plain arguments."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import orjson

from apollo11.scheduler import wire
from apollo11.scheduler.errors import InvalidArgumentError
from apollo11.v1 import scheduler_pb2 as pb


def _task_state(name: str) -> pb.TaskState:
    value = wire.TASK_STATE.get(name)
    if not value:  # UNSPECIFIED is "no filter", said by passing no state
        known = ", ".join(n for n, v in wire.TASK_STATE.items() if v)
        raise InvalidArgumentError(f"state {name!r} is not a task state: one of {known}")
    return value


def json_text(value: Any, name: str) -> str:
    """`value` as the JSON text of argument `name`; InvalidArgumentError (as a node's
    refusal is) when it cannot be encoded, rather than orjson's bare TypeError."""
    try:
        return orjson.dumps(value, default=_model_json).decode()
    except orjson.JSONEncodeError as e:
        if "Recursion" in str(e):  # orjson's only depth error: "Recursion limit reached"
            raise InvalidArgumentError(
                f"{name} nests deeper than 254 levels, more than JSON can be encoded "
                f"here (and far past what a node takes: json_max_depth, 64 by default)"
            ) from e
        raise InvalidArgumentError(f"{name} cannot be sent as JSON: {e}") from e


def _model_json(value: Any) -> Any:
    """A pydantic model (a typed workflow's input) as the JSON its model_validate reads
    back: by alias, as the log keeps a result (scheduler/typed.py)."""
    if hasattr(value, "model_dump") and not isinstance(value, type):
        return value.model_dump(mode="json", by_alias=True)
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


PRIORITIES = range(1, 6)  # 1 first; what the node takes (0 on the wire: the default, 3)


def priority_value(priority: int | None, name: str = "priority") -> int:
    """A priority as the wire carries it: None is 0 (the node's default, 3). Outside 1
    to 5 it is refused here, in the node's words (a 0 would silently mean the default,
    and a negative cannot be encoded)."""
    if priority is None:
        return 0
    if isinstance(priority, bool) or not isinstance(priority, int) or priority not in PRIORITIES:
        raise InvalidArgumentError(f"{name} must be 1 to 5 (1 first), got {priority!r}")
    return priority


def submit_request(
    workflow: str, input_json: str, key: str, version: int, priority: int = 0
) -> pb.SubmitTaskRequest:
    return pb.SubmitTaskRequest(
        workflow=workflow,
        input_json=input_json,
        idempotency_key=key,
        version=version,
        priority=priority,
    )


def submit_many_request(items: list[pb.SubmitTaskRequest]) -> pb.SubmitTasksRequest:
    return pb.SubmitTasksRequest(tasks=items)


def submit_shell_request(dag_json: str, key: str) -> pb.SubmitShellRequest:
    return pb.SubmitShellRequest(dag_json=dag_json, idempotency_key=key)


def get_task_request(task_id: str, as_of: int) -> pb.GetTaskRequest:
    return pb.GetTaskRequest(task_id=task_id, as_of_event_id=as_of)


def list_request(
    state: str | None,
    workflow: str,
    page_size: int,
    token: str,
    schedule: str = "",
    held: bool = False,
) -> pb.ListTasksRequest:
    return pb.ListTasksRequest(
        state=_task_state(state) if state else pb.TASK_STATE_UNSPECIFIED,
        workflow=workflow,
        page_size=page_size,
        page_token=token,
        schedule=schedule,
        held=held,
    )


def hold_request(task_id: str, reason: str) -> pb.HoldTaskRequest:
    return pb.HoldTaskRequest(task_id=task_id, reason=reason)


def watch_request(task_id: str) -> pb.WatchTaskRequest:
    return pb.WatchTaskRequest(task_id=task_id)


def events_request(task_id: str, from_id: int, to_id: int, limit: int) -> pb.GetEventsRequest:
    return pb.GetEventsRequest(
        task_id=task_id, from_event_id=from_id, to_event_id=to_id, limit=limit
    )


def get_tasks_request(task_ids: Sequence[str]) -> pb.GetTasksRequest:
    return pb.GetTasksRequest(task_ids=task_ids)


def step_action_request(
    task_id: str, step: str, operator: str, reason: str
) -> pb.StepActionRequest:
    return pb.StepActionRequest(task_id=task_id, step=step, operator=operator, reason=reason)


def cancel_request(task_id: str, operator: str, reason: str) -> pb.CancelTaskRequest:
    return pb.CancelTaskRequest(task_id=task_id, operator=operator, reason=reason)


def redact_request(task_id: str, operator: str, reason: str) -> pb.RedactTaskRequest:
    return pb.RedactTaskRequest(task_id=task_id, operator=operator, reason=reason)


def send_event_request(key: str, payload_json: str, idempotency_key: str) -> pb.SendEventRequest:
    return pb.SendEventRequest(key=key, payload_json=payload_json, idempotency_key=idempotency_key)


def status_request() -> pb.GetStatusRequest:
    return pb.GetStatusRequest()


WHEN = ("cron", "every", "at")


def _spec_text(value: str | timedelta | datetime) -> str:
    """A spec field as the node reads it: durations in seconds ("90s"), times ISO-8601."""
    if isinstance(value, timedelta):
        return f"{value.total_seconds():g}s"
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def schedule_spec(fields: Mapping[str, str | timedelta | datetime | None]) -> pb.ScheduleSpec:
    """The fields given (not None) as a ScheduleSpec message. Two of cron, every and at
    are refused here: the message's oneof would keep the last one silently."""
    given = {name: _spec_text(v) for name, v in fields.items() if v is not None}
    when = [name for name in WHEN if name in given]
    if len(when) > 1:
        raise InvalidArgumentError(
            f"exactly one of cron, every or at is needed (got {' and '.join(when)})"
        )
    return pb.ScheduleSpec(**given)


def create_schedule_request(
    schedule_id: str, workflow: str, spec: pb.ScheduleSpec, input_json: str, note: str
) -> pb.CreateScheduleRequest:
    return pb.CreateScheduleRequest(
        schedule_id=schedule_id, workflow=workflow, spec=spec, input_json=input_json, note=note
    )


def backfill_request(
    schedule_id: str, start: datetime | str, end: datetime | str, overlap: str
) -> pb.BackfillScheduleRequest:
    return pb.BackfillScheduleRequest(
        schedule_id=schedule_id,
        from_time=_spec_text(start),
        to_time=_spec_text(end),
        overlap=overlap,
    )


def update_schedule_request(
    schedule_id: str,
    workflow: str,
    spec: pb.ScheduleSpec,
    input_json: str | None,
    note: str | None,
) -> pb.UpdateScheduleRequest:
    req = pb.UpdateScheduleRequest(schedule_id=schedule_id, workflow=workflow)
    if spec.ListFields():  # an empty spec would say "no change" anyway: not sent
        req.spec.CopyFrom(spec)
    if input_json is not None:
        req.input_json = input_json
    if note is not None:
        req.note = note
    return req


def rate_fields(rate: str | tuple[int, str | timedelta]) -> tuple[int, str]:
    """A rate as SetLimitRequest's (rate, per): "10/1s", or (10, "1s") / (10, timedelta).
    The node checks the period (`per`) and the range, and says what is wrong."""
    if isinstance(rate, str):
        count, sep, per = rate.partition("/")
        if not sep or not count.strip().isdigit() or not per.strip():
            raise InvalidArgumentError(
                f"rate {rate!r} is not N/DURATION: starts per period, like 10/1s or 600/1m"
            )
        return int(count), per.strip()
    if not (isinstance(rate, tuple) and len(rate) == 2):
        raise InvalidArgumentError(f'rate must be "N/DURATION" or (N, duration), got {rate!r}')
    starts, period = rate
    return _count("rate", starts), _spec_text(period)


def _count(name: str, value: object) -> int:
    """A whole number the wire can carry (uint32); 0 is sent, for the node to refuse
    naming the field, as it refuses any value out of its range."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32:
        raise InvalidArgumentError(f"{name} must be a whole number from 1, got {value!r}")
    return value


def set_limit_request(
    limit_id: str | None,
    *,
    max: int | None,
    rate: str | tuple[int, str | timedelta] | None,
    burst: int | None,
    weights: Mapping[str, float] | None,
    reset: bool,
    reason: str,
) -> pb.SetLimitRequest:
    try:
        shares = {str(value): float(w) for value, w in (weights or {}).items()}
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"weights must map values to numbers, got {weights!r}") from None
    req = pb.SetLimitRequest(limit_id=limit_id or "", weights=shares, reset=reset, reason=reason)
    for name, value in (("max", max), ("burst", burst)):
        if value is not None:
            setattr(req, name, _count(name, value))
    if rate is not None:
        count, req.per = rate_fields(rate)
        req.rate = _count("rate", count)
    return req
