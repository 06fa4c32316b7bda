"""The worker's one module that knows the protobuf messages (worker.proto).

Records in, messages out, and back; plus the stub, so that the rest of the worker
opens a stream without seeing the generated code.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import grpc

from apollo11.scheduler.worker._records import (
    Ack,
    Acks,
    Assign,
    Assignment,
    Cancel,
    Cancelled,
    Dispatch,
    Durable,
    Failed,
    JournalAnswer,
    Registration,
    Result,
    Running,
    Succeeded,
    Token,
)
from apollo11.v1 import worker_pb2 as pb
from apollo11.v1 import worker_pb2_grpc as pbg

WorkerMessage = pb.WorkerMessage
DispatchMessage = pb.DispatchMessage


def open_stream(
    channel: grpc.aio.Channel, metadata: Sequence[tuple[str, str]] | None
) -> grpc.aio.StreamStreamCall[Any, Any]:
    """A Workers.Connect call to write to and read from (no request iterator)."""
    call: grpc.aio.StreamStreamCall[Any, Any] = pbg.WorkersStub(channel).Connect(metadata=metadata)
    return call


def _token(t: Token) -> pb.AttemptToken:
    return pb.AttemptToken(term=t.term, event_id=t.event_id)


def token_of(m: pb.AttemptToken) -> Token:
    return Token(m.term, m.event_id)


def _running(r: Running) -> pb.RunningAttempt:
    return pb.RunningAttempt(
        token=_token(r.token),
        task_id=r.task_id,
        step=r.step,
        attempt=r.attempt,
        heartbeat_json=r.heartbeat_json,
    )


def register(
    *,
    name: str,
    instance: str,
    slots: int,
    workflows: Iterable[tuple[str, int]],
    labels: Mapping[str, str],
    running: Iterable[Running],
    version: str,
    default_name: bool = False,
) -> pb.WorkerMessage:
    return pb.WorkerMessage(
        register=pb.Register(
            name=name,
            instance=instance,
            slots=slots,
            workflows=[pb.WorkflowRef(name=n, version=v) for n, v in workflows],
            labels=dict(labels),
            running=[_running(r) for r in running],
            version=version,
            packed_acks=True,
            packed_assignments=True,
            default_name=default_name,
        )
    )


def heartbeat(running: Iterable[Running]) -> pb.WorkerMessage:
    return pb.WorkerMessage(heartbeat=pb.WorkerHeartbeat(running=[_running(r) for r in running]))


def _fill(m: pb.StepResult, r: Result) -> None:
    """Write `r` into `m`, a message already in its batch (built in place: building one
    and copying it into the batch costs three times as much)."""
    m.token.term, m.token.event_id = r.token
    m.task_id, m.step, m.attempt, m.seconds = r.task_id, r.step, r.attempt, r.seconds
    match r.outcome:
        case Succeeded(result_json=body):
            m.result_json = body
        case Failed() as f:
            m.failure.error_type = f.error_type
            m.failure.message = f.message
            m.failure.details_json = f.details_json
            m.failure.declared = f.declared
            m.failure.mro.extend(f.mro)
        case Cancelled():
            m.cancelled = True


RESULTS_BATCH_BYTES = 4 * 1024 * 1024  # per message, well below a node's 16 MiB limit
RESULT_OVERHEAD_BYTES = 1024  # a result's fields beside its payloads, at most (ids are capped)


def _size(r: Result) -> int:
    match r.outcome:
        case Succeeded(result_json=body):
            return RESULT_OVERHEAD_BYTES + len(body)
        case Failed() as f:
            return RESULT_OVERHEAD_BYTES + len(f.message.encode()) + len(f.details_json)
    return RESULT_OVERHEAD_BYTES


def results(batch: Iterable[Result], *, packed: bool = False) -> list[pb.WorkerMessage]:
    """The results as messages of bounded size (none for an empty batch). `packed`:
    the primary reads succeeded results in columns (Registered.packed_results)."""
    out: list[pb.WorkerMessage] = []
    size = 0
    columns: _Columns | None = None
    for r in batch:
        n = _size(r)
        if not out or (size and size + n > RESULTS_BATCH_BYTES):
            if columns is not None:
                columns.into(out[-1].results)
                columns = None
            out.append(pb.WorkerMessage(results=pb.Results()))
            size = 0
        outcome = r.outcome
        if packed and type(outcome) is Succeeded:
            if columns is None:
                columns = _Columns()
            columns.add(r, outcome.result_json)
        else:
            _fill(out[-1].results.results.add(), r)
        size += n
    if columns is not None:
        columns.into(out[-1].results)
    return out


class _Columns:
    """Succeeded results, a list a column, set into their message with one call each:
    a message a result costs several times as much to build, and to read."""

    __slots__ = ("attempts", "bodies", "event_ids", "seconds", "steps", "task_ids", "terms")

    def __init__(self) -> None:
        self.terms: list[int] = []
        self.event_ids: list[int] = []
        self.task_ids: list[str] = []
        self.steps: list[str] = []
        self.attempts: list[int] = []
        self.bodies: list[bytes] = []
        self.seconds: list[float] = []

    def add(self, r: Result, body: bytes) -> None:
        term, event_id = r.token
        self.terms.append(term)
        self.event_ids.append(event_id)
        self.task_ids.append(r.task_id)
        self.steps.append(r.step)
        self.attempts.append(r.attempt)
        self.bodies.append(body)
        self.seconds.append(r.seconds)

    def into(self, m: pb.Results) -> None:
        m.ok_terms.extend(self.terms)
        m.ok_event_ids.extend(self.event_ids)
        m.ok_task_ids.extend(self.task_ids)
        m.ok_steps.extend(self.steps)
        m.ok_attempts.extend(self.attempts)
        m.ok_results_json.extend(self.bodies)
        m.ok_seconds.extend(self.seconds)


def journal_request(
    request_id: int,
    a: Assignment,
    *,
    record: tuple[bytes, bytes, bytes] | None = None,
    resolve: bytes | None = None,
) -> pb.WorkerMessage:
    """A durable main's journal request: `record` (checkpoints, wait, children; JSON)
    or `resolve` (a WAIT payload, JSON)."""
    m = pb.JournalRequest(id=request_id, token=_token(a.token), task_id=a.task_id, step=a.step)
    if record is not None:
        checkpoints, wait, children = record
        m.record.CopyFrom(
            pb.JournalRecord(checkpoints_json=checkpoints, wait_json=wait, children_json=children)
        )
    elif resolve is not None:
        m.resolve_wait_json = resolve
    return pb.WorkerMessage(journal=m)


def _durable(m: pb.Assignment) -> Durable | None:
    if not m.HasField("durable"):
        return None
    d = m.durable
    return Durable(d.checkpoints_json, d.wait_json, d.first_event_id, d.now_ms)


def _assignment(m: pb.Assignment) -> Assignment:
    return Assignment(
        token=token_of(m.token),
        task_id=m.task_id,
        step=m.step,
        attempt=m.attempt,
        workflow=m.workflow,
        version=m.version,
        input_json=m.input_json,
        results_json=m.results_json,
        timeout_s=m.timeout_s,
        last_heartbeat_json=m.last_heartbeat_json,
        node_id=m.node_id,
        durable=_durable(m),
        traceparent=m.traceparent,
    )


def _plain(m: pb.Assign) -> list[Assignment]:
    """The assignments sent in columns (Assign's plain attempts)."""
    columns = (
        m.terms,
        m.event_ids,
        m.task_ids,
        m.steps,
        m.attempts,
        m.workflows,
        m.versions,
        m.inputs_json,
        m.results_json,
        m.timeouts_s,
    )
    n = len(m.terms)
    if any(len(c) != n for c in columns):
        raise ProtocolError(
            "an Assign whose columns differ in length: " + ", ".join(str(len(c)) for c in columns)
        )
    node_id = m.node_id
    out: list[Assignment] = []
    for row in zip(*columns, strict=True):
        term, event_id, task_id, step, attempt, workflow, version, inp, deps, timeout_s = row
        out.append(
            Assignment(
                token=Token(term, event_id),
                task_id=task_id,
                step=step,
                attempt=attempt,
                workflow=workflow,
                version=version,
                input_json=inp,
                results_json=deps,
                timeout_s=timeout_s,
                last_heartbeat_json=b"",
                node_id=node_id,
                durable=None,
                traceparent="",
            )
        )
    return out


class ProtocolError(Exception):
    """The primary sent something this worker does not understand."""


def registration(m: pb.DispatchMessage) -> Registration:
    """The first message of a stream, which must be Registered."""
    if m.WhichOneof("body") != "registered":
        raise ProtocolError(f"expected Registered first, got {m.WhichOneof('body')}")
    r = m.registered
    return Registration(
        node_id=r.node_id,
        term=r.term,
        heartbeat_interval_s=r.heartbeat_interval_s,
        heartbeat_timeout_s=r.heartbeat_timeout_s,
        stale=frozenset(token_of(t) for t in r.stale),
        pings=r.pings,
        packed_results=r.packed_results,
        name=r.name,
    )


def dispatch(m: pb.DispatchMessage) -> Dispatch | None:
    """Any later message: assignments, a cancel, acknowledgements; None: one this
    worker does not know (a newer primary's), to be ignored, not to end the stream."""
    body = m.WhichOneof("body")
    if body == "assign":
        return Assign((*(_assignment(a) for a in m.assign.assignments), *_plain(m.assign)))
    if body == "cancel":
        return Cancel(token_of(m.cancel.token), m.cancel.reason)
    if body == "acks":
        acks = m.acks
        term = acks.accepted_term
        return Acks(
            (
                # the accepted first: a refusal beside one is of a copy sent again
                *(Ack(Token(term, e), True, "") for e in acks.accepted_event_ids),
                *(Ack(token_of(a.token), a.accepted, a.reason) for a in acks.acks),
            )
        )
    if body == "journal":
        j = m.journal
        return JournalAnswer(j.id, j.error, j.retry, j.resolution_json, j.children_json, j.now_ms)
    if body == "registered":
        raise ProtocolError("a second Registered on one stream")
    return None
