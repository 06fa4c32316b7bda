"""One connected worker, as the primary sees it: what it registered, the slots it
has taken, and what is waiting to be sent to it.

Messages to a worker are batched per turn of the loop: assignments, cancels and
result acknowledgements queue here, and the stream's writer sends each kind as one
message (`drain`). Assignments and acknowledgements are built in place, inside the
message that will carry them (`add`): building one and copying it into its batch
cost three times as much, at thousands a second (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from apollo11.scheduler.engine import AttemptToken, Key
from apollo11.v1 import worker_pb2 as wpb

ASSIGN_BATCH_BYTES = 1 << 20
ASSIGNMENT_OVERHEAD_BYTES = 256  # an assignment's fields beside its JSON, at most


@dataclass(eq=False)
class WorkerConn:
    name: str
    instance: str
    slots: int
    workflows: frozenset[tuple[str, int]]
    labels: dict[str, str]
    address: str
    version: str
    packed_acks: bool = False  # it reads Acks.accepted_event_ids (worker.proto)
    packed_assignments: bool = False  # it reads Assign's columns (worker.proto)
    connected_at: float = field(default_factory=time.time)
    last_seen: float = field(default_factory=time.monotonic)
    held: set[Key] = field(default_factory=set)  # slots taken (placed, running, cancelling)
    closed: str | None = None  # why it is gone
    assigned: int = 0  # attempts sent over this connection
    # assignments not yet sent, in messages of at most about ASSIGN_BATCH_BYTES
    _assign: list[wpb.DispatchMessage] = field(default_factory=list)
    _assign_size: int = 0  # an estimate of the last message's bytes
    _columns: _Columns | None = None  # plain assignments of the last message, not yet in it
    _assigned_at: list[float] = field(default_factory=list)
    _cancel: list[wpb.CancelAttempt] = field(default_factory=list)
    _acks: wpb.DispatchMessage | None = None
    # accepted results of attempts STARTED in _accepted_term, sent packed (packed_acks)
    _accepted: list[int] = field(default_factory=list)
    _accepted_term: int = 0
    _replies: list[wpb.JournalReply] = field(default_factory=list)  # durable mains' journals
    last_sent: float = field(default_factory=time.monotonic)  # the writer's last write
    _ping: bool = False
    _waiter: asyncio.Future[None] | None = None  # the writer, waiting for work

    @property
    def free(self) -> int:
        return self.slots - len(self.held)

    def assign(self, token: AttemptToken, size: int, **fields: Any) -> None:
        """Queue an assignment (`fields`: wpb.Assignment's, but its token); `size`: the
        bytes of its JSON fields, which bound a message (a worker's receive limit)."""
        a = self._message(size).assign.assignments.add(**fields)
        a.token.term = token.term
        a.token.event_id = token.event_id
        self._queued()

    def assign_plain(
        self,
        token: AttemptToken,
        size: int,
        node_id: str,
        task_id: str,
        step: str,
        attempt: int,
        workflow: str,
        version: int,
        input_json: bytes,
        results_json: bytes,
        timeout_s: float,
    ) -> None:
        """Queue a plain assignment (no durable journal, trace or heartbeat details):
        in columns to a worker that reads them (packed_assignments), else as `assign`."""
        if not self.packed_assignments:
            self.assign(
                token,
                size,
                node_id=node_id,
                task_id=task_id,
                step=step,
                attempt=attempt,
                workflow=workflow,
                version=version,
                input_json=input_json,
                results_json=results_json,
                timeout_s=timeout_s,
            )
            return
        self._message(size)
        c = self._columns
        if c is None:
            c = self._columns = _Columns(node_id)
        c.terms.append(token.term)
        c.event_ids.append(token.event_id)
        c.task_ids.append(task_id)
        c.steps.append(step)
        c.attempts.append(attempt)
        c.workflows.append(workflow)
        c.versions.append(version)
        c.inputs.append(input_json)
        c.results.append(results_json)
        c.timeouts.append(timeout_s)
        self._queued()

    def _message(self, size: int) -> wpb.DispatchMessage:
        """The Assign message an assignment of `size` bytes goes in."""
        size += ASSIGNMENT_OVERHEAD_BYTES
        if not self._assign or self._assign_size + size > ASSIGN_BATCH_BYTES:
            self._flush_columns()
            self._assign.append(wpb.DispatchMessage(assign=wpb.Assign()))
            self._assign_size = 0
        self._assign_size += size
        return self._assign[-1]

    def _flush_columns(self) -> None:
        """The last message's columns into it (each column set with one call)."""
        c = self._columns
        if c is not None:
            c.into(self._assign[-1].assign)
            self._columns = None

    def _queued(self) -> None:
        self._assigned_at.append(time.perf_counter())
        self.assigned += 1
        self.wake()

    def cancel(self, token: AttemptToken, reason: str) -> None:
        self._cancel.append(wpb.CancelAttempt(token=to_pb(token), reason=reason))
        self.wake()

    def ack(self, token: AttemptToken, accepted: bool, reason: str = "") -> None:
        if accepted and self.packed_acks:
            # the everyday case: an event id in a packed field, no message of its own
            accepted_ = self._accepted
            if not accepted_:
                self._accepted_term = token.term
                accepted_.append(token.event_id)
                self.wake()
                return
            if token.term == self._accepted_term:
                accepted_.append(token.event_id)
                return  # woken by the first
        if self._acks is None:
            self._acks = wpb.DispatchMessage(acks=wpb.Acks())
        a = self._acks.acks.acks.add(accepted=accepted, reason=reason)
        a.token.term = token.term
        a.token.event_id = token.event_id
        self.wake()

    def ping(self) -> None:
        """Send something (an empty Acks when nothing else is queued): the worker
        takes a stream it hears nothing on for a few intervals for a dead primary."""
        self._ping = True
        self.wake()

    def reply(self, r: wpb.JournalReply) -> None:
        self._replies.append(r)
        self.wake()

    def take_over(self, old: WorkerConn) -> set[AttemptToken]:
        """This is `old`'s process on a new stream: take its slots and what was still
        queued for it. Returns the tokens of the assignments not yet sent."""
        self.held |= old.held
        old._flush_columns()
        self._flush_columns()
        if not self._assign:  # its next assignments go in the old stream's last message
            self._assign_size = old._assign_size
        self._assign = old._assign + self._assign
        for event_id in old._accepted:  # through ack: its term may not be this one's
            self.ack(AttemptToken(old._accepted_term, event_id), True)
        old._accepted = []
        self._assigned_at = old._assigned_at + self._assigned_at
        self._cancel = old._cancel + self._cancel
        if old._acks is not None:
            if self._acks is not None:
                old._acks.acks.acks.extend(self._acks.acks.acks)
            self._acks = old._acks
        old.held = set()
        old._assign, old._assigned_at, old._cancel, old._acks = [], [], [], None
        if self._assign or self._cancel or self._acks is not None or self._accepted:
            self.wake()
        return {t for m in self._assign for t in tokens(m.assign)}

    def close(self, why: str) -> None:
        if self.closed is None:
            self.closed = why
        self.wake()

    def drain(self) -> tuple[list[wpb.DispatchMessage], list[float]]:
        """What to send now, one message per kind, and when each assignment was queued."""
        # bounded messages (assign): a batch of big inputs stays under the worker's
        # receive limit (ASSIGN_BATCH_BYTES, well below gRPC's 4 MiB default)
        self._flush_columns()
        out, queued = self._assign, self._assigned_at
        self._assign, self._assigned_at = [], []
        for c in self._cancel:
            out.append(wpb.DispatchMessage(cancel=c))
        self._cancel = []
        if self._accepted:
            if self._acks is None:
                self._acks = wpb.DispatchMessage(acks=wpb.Acks())
            packed = self._acks.acks
            packed.accepted_term = self._accepted_term
            packed.accepted_event_ids.extend(self._accepted)
            self._accepted = []
        if self._acks is not None:
            out.append(self._acks)
            self._acks = None
        for r in self._replies:
            out.append(wpb.DispatchMessage(journal=r))
        self._replies = []
        if self._ping and not out:
            out.append(wpb.DispatchMessage(acks=wpb.Acks()))
        self._ping = False
        return out, queued

    def wake(self) -> None:
        """Make `work` return (something was queued, the stream closed or its reader
        ended)."""
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def work(self) -> None:
        """Until there is something to send, or the connection is closed (`wake`).
        One future per wait, woken by the first message queued: cheaper, at thousands
        of messages a second, than an Event and a task to wait on it."""
        if (
            self._assign
            or self._cancel
            or self._acks is not None
            or self._accepted
            or self._replies
            or self._ping
            or self.closed is not None
        ):
            return
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None


class _Columns:
    """Plain assignments of one message, a list a column until it is sent."""

    __slots__ = (
        "attempts",
        "event_ids",
        "inputs",
        "node_id",
        "results",
        "steps",
        "task_ids",
        "terms",
        "timeouts",
        "versions",
        "workflows",
    )

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self.terms: list[int] = []
        self.event_ids: list[int] = []
        self.task_ids: list[str] = []
        self.steps: list[str] = []
        self.attempts: list[int] = []
        self.workflows: list[str] = []
        self.versions: list[int] = []
        self.inputs: list[bytes] = []
        self.results: list[bytes] = []
        self.timeouts: list[float] = []

    def into(self, m: wpb.Assign) -> None:
        m.node_id = self.node_id
        m.terms.extend(self.terms)
        m.event_ids.extend(self.event_ids)
        m.task_ids.extend(self.task_ids)
        m.steps.extend(self.steps)
        m.attempts.extend(self.attempts)
        m.workflows.extend(self.workflows)
        m.versions.extend(self.versions)
        m.inputs_json.extend(self.inputs)
        m.results_json.extend(self.results)
        m.timeouts_s.extend(self.timeouts)


def tokens(m: wpb.Assign) -> list[AttemptToken]:
    """The tokens of every assignment of an Assign, whole or in columns."""
    return [
        *(from_pb(a.token) for a in m.assignments),
        *(AttemptToken(t, e) for t, e in zip(m.terms, m.event_ids, strict=True)),
    ]


def to_pb(token: AttemptToken) -> wpb.AttemptToken:
    return wpb.AttemptToken(term=token.term, event_id=token.event_id)


def from_pb(token: wpb.AttemptToken) -> AttemptToken:
    return AttemptToken(token.term, token.event_id)
