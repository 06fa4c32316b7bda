"""The flow-control RPCs (SetLimit, ListLimits) and a submission's priority on the wire.

Both RPCs are the primary's. A change is a LIMIT event the leading engine writes with
the authenticated principal as `by` (never a name the caller typed). The limits'
queued counts live only in the primary engine's queues, so ListLimits is answered
there too: a standby answers it as it answers a write, FAILED_PRECONDITION with the
primary's address, which the clients follow (and UNAVAILABLE while no primary is
known, which they retry). A standby's answer would show every key as idle.

What the engine refuses it names (an unknown limit id with the known ones, a max
below 1, a rate's field on a concurrency limit); what only the wire can get wrong is
refused here, naming the field: a rate without its period, a period that is not a
duration, a weight's value too long, a priority above 5.
"""

from __future__ import annotations

from apollo11.scheduler.api import codec
from apollo11.scheduler.errors import InvalidArgumentError, WorkflowDefinitionError
from apollo11.scheduler.flow import MAX_VALUE_CHARS, PRIORITIES, duration_ms
from apollo11.scheduler.nodeview import MAX_REASON, NodeView, leading_engine, optional
from apollo11.scheduler.security import current_principal
from apollo11.v1 import scheduler_pb2 as pb

TOP_KEYS = 20  # key values of each limit a ListLimits answer carries unless all_keys


def priority(value: int, name: str) -> int | None:
    """A request's priority: 0 (unset) is the default (None to the engine), 1 to 5 as
    given, anything else INVALID_ARGUMENT naming the field (`tasks[3].priority`)."""
    if value == 0:
        return None
    if value not in PRIORITIES:
        raise InvalidArgumentError(
            f"{name} must be 1 to 5 (1 first; 0 or unset: the default, 3), got {value}"
        )
    return value


class LimitCalls:
    """What the Scheduler service's limit methods do (server.py delegates each)."""

    def __init__(self, node: NodeView) -> None:
        self.node = node

    async def set(self, r: pb.SetLimitRequest) -> pb.SetLimitResponse:
        limit_id = optional(r.limit_id, "limit_id")
        rate = _rate(r)
        weights = _weights(r)
        reason = optional(r.reason, "reason", MAX_REASON) or ""
        engine = leading_engine(self.node)
        event = await engine.limits.set(
            limit_id,
            max=r.max if r.HasField("max") else None,
            rate=rate,
            burst=r.burst if r.HasField("burst") else None,
            weights=weights,
            reset=r.reset,
            operator=current_principal().name,
            reason=reason,
        )
        # applied before the write was answered: the view holds the change
        view = engine.limits.view(top=TOP_KEYS)
        answer = pb.SetLimitResponse(event_id=event.event_id, weights=dict(view.weights))
        for limit in view.limits:
            if limit.limit_id == limit_id:
                answer.limit.CopyFrom(codec.limit_to_pb(limit))
        return answer

    def listed(self, r: pb.ListLimitsRequest) -> pb.ListLimitsResponse:
        view = leading_engine(self.node).limits.view(top=None if r.all_keys else TOP_KEYS)
        return pb.ListLimitsResponse(
            limits=[codec.limit_to_pb(v) for v in view.limits], weights=dict(view.weights)
        )


def _rate(r: pb.SetLimitRequest) -> tuple[int, int] | None:
    """(limit, per_ms), or None when the request changes no rate."""
    if not r.HasField("rate"):
        if r.per:
            raise InvalidArgumentError(f"per {r.per!r} needs rate: the starts per period")
        return None
    if not r.per:
        raise InvalidArgumentError(f"rate {r.rate} needs per: its period, like 1s or 1m")
    try:
        return r.rate, duration_ms(r.per, what="per")
    except WorkflowDefinitionError as e:  # the declaration's words, a request's status
        raise InvalidArgumentError(str(e)) from None


def _weights(r: pb.SetLimitRequest) -> dict[str, float] | None:
    for value in r.weights:
        if len(value) > MAX_VALUE_CHARS:
            raise InvalidArgumentError(
                f"weights: a fairness value is {len(value)} characters, at most {MAX_VALUE_CHARS}"
            )
    return dict(r.weights) or None
