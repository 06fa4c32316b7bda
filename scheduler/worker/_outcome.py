"""Between a step and the wire: the context it is told, and what its end becomes.

Used the same way in the worker process and in an attempt's child process, so
that an attempt reports the same outcome whichever isolation ran it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from apollo11.scheduler import jsondepth
from apollo11.scheduler.cause import mro_names
from apollo11.scheduler.worker._records import Assignment, Failed, Outcome, Succeeded
from apollo11.scheduler.workflow import FencingToken, Journal, StepContext, StepError


def _loads(body: bytes, empty: Any) -> Any:
    return empty if not body else orjson.loads(body)


def context(
    a: Assignment, worker: str, beat: Callable[[Any], None], journal: Journal | None = None
) -> StepContext:
    return StepContext(
        task_id=a.task_id,
        step=a.step,
        attempt=a.attempt,
        input=_loads(a.input_json, None),
        results=_loads(a.results_json, {}),
        node_id=a.node_id,
        workflow=a.workflow,
        version=a.version,
        # the attempt number, not the event id: the engine's tokens are (term, attempt)
        fencing_token=FencingToken(a.token.term, a.attempt),
        worker=worker,
        last_heartbeat=_loads(a.last_heartbeat_json, None),
        beat=beat,
        journal=journal,  # a durable main's (worker/_journal.py)
    )


# A result no node would take (payload_max_bytes is at most 1 MiB, json_max_depth at
# most 128), and heartbeat details that travel with every heartbeat: refused here, in
# the step that made them. The node refuses what is over its own settings.
RESULT_MAX_BYTES = 1024 * 1024
DETAILS_MAX_BYTES = 64 * 1024
MAX_DEPTH = jsondepth.MAX_DEPTH


def _too_deep(value: Any, raw: bytes | None) -> int | None:
    """How deeply `value` (`raw`: its JSON, None when orjson could not encode it)
    nests, if deeper than any node takes."""
    if raw is not None:
        return jsondepth.deeper_than(raw, MAX_DEPTH)
    depth = jsondepth.value_depth(value)
    return depth if depth > MAX_DEPTH else None


def encode_details(details: Any) -> bytes:
    """Heartbeat details as JSON; raises TypeError (ValueError: too big) in the step
    that passed bad ones."""
    if details is None:
        return b""
    try:
        raw = orjson.dumps(details)
    except TypeError as e:
        deep = _too_deep(details, None)
        if deep is None:
            raise TypeError(f"ctx.heartbeat details must be JSON-serializable: {e}") from None
        raw = b""
    else:
        deep = _too_deep(details, raw)
    if deep is not None:
        raise ValueError(
            f"{jsondepth.too_deep_value('ctx.heartbeat details', deep, MAX_DEPTH)}: report "
            f"progress (a cursor, a count), not data"
        )
    if len(raw) > DETAILS_MAX_BYTES:
        raise ValueError(
            f"ctx.heartbeat details are {len(raw)} bytes of JSON, more than "
            f"{DETAILS_MAX_BYTES}: report progress (a cursor, a count), not data"
        )
    return raw


def succeeded(result: Any) -> Outcome:
    try:
        raw = orjson.dumps(result)
    except TypeError as e:
        deep = _too_deep(result, None)
        if deep is None:
            return Failed("TypeError", f"the step's result is not JSON-serializable: {e}")
        raw = b""
    else:
        deep = _too_deep(result, raw)
    if deep is not None:
        said = jsondepth.too_deep_value("the step's result", deep, MAX_DEPTH)
        return Failed(
            "ResultTooDeep", f"{said}: return a small summary and store bulk output elsewhere"
        )
    if len(raw) > RESULT_MAX_BYTES:
        return Failed(
            "ResultTooLarge",
            f"the step's result is {len(raw)} bytes of JSON, more than {RESULT_MAX_BYTES}: "
            f"return a small summary and store bulk output elsewhere",
        )
    return Succeeded(raw)


def failed(e: BaseException) -> Failed:
    if isinstance(e, StepError):
        try:
            details = orjson.dumps(e.details)
        except TypeError:
            # the failure must still be reported: details it cannot encode become text
            details = orjson.dumps({k: repr(v) for k, v in e.details.items()})
        return Failed(type(e).__name__, str(e), details, declared=True, mro=mro_names(type(e)))
    return Failed(type(e).__name__, str(e), mro=mro_names(type(e)))


def not_found(a: Assignment) -> Failed:
    return Failed(
        "WorkflowNotFound",
        f"this worker has no step {a.step!r} in workflow {a.workflow!r} v{a.version}",
    )
