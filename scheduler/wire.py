"""What both ends of the gRPC API agree on beyond the generated messages.

The server (`apollo11.scheduler.api.server`, `apollo11.scheduler.api.codec`) and the client
(`apollo11.scheduler.client`) each import this module and never each other, so that an
application embedding the client loads no engine, store or metric. Only facts
of the wire belong here: metadata keys and the names the enums carry. This
module imports the generated messages and nothing else of the project.
"""

from __future__ import annotations

from typing import Any

from apollo11.v1 import scheduler_pb2 as pb

# Trailing metadata of a FAILED_PRECONDITION answered by a standby: the primary's
# address, which the client retries the write on.
LEADER_METADATA = "apollo11-leader"
# Trailing metadata of an UNAVAILABLE answered by a node that knows no primary (an
# election is under way), set to "1": a worker passing over a frozen primary keeps
# passing it over while the others elect, not a transport failure's UNAVAILABLE.
ELECTION_METADATA = "apollo11-election"


def _names(enum: Any, prefix: str) -> dict[str, Any]:
    """`TASK_STATE_RUNNING` -> `RUNNING`: the name both sides print and parse."""
    return {str(name).removeprefix(prefix): value for name, value in enum.items()}


# name -> enum value, UNSPECIFIED included (0: the field was not set)
TASK_STATE: dict[str, pb.TaskState] = _names(pb.TaskState, "TASK_STATE_")
STEP_STATE: dict[str, pb.StepState] = _names(pb.StepState, "STEP_STATE_")
EVENT_TYPE: dict[str, pb.EventType] = _names(pb.EventType, "EVENT_TYPE_")
# enum value -> name
TASK_STATE_NAME = {v: k for k, v in TASK_STATE.items()}
STEP_STATE_NAME = {v: k for k, v in STEP_STATE.items()}
EVENT_TYPE_NAME = {v: k for k, v in EVENT_TYPE.items()}
