"""The Workers service: one bidirectional stream per worker process.

The first message must be a Register, read before anything is answered; the
answer is Registered (or the stream ends with a status: FAILED_PRECONDITION
naming the primary on a standby, UNAVAILABLE while there is none,
ALREADY_EXISTS for a name taken by another live worker, PERMISSION_DENIED for a
name the worker's credential may not use (security/worker_names.py),
INVALID_ARGUMENT for a registration that cannot be taken). Then a reader takes
heartbeats and results, and the writer sends what the remote executor queued
for the worker, one message per kind per turn of the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import grpc

from apollo11.scheduler import metrics
from apollo11.scheduler.dispatch.conn import WorkerConn, to_pb
from apollo11.scheduler.dispatch.remote import RefusedError, RemoteExecutor
from apollo11.scheduler.errors import ApolloError, NoLeaderError, NotLeaderError
from apollo11.scheduler.security import WorkerNameRefused, current_principal, worker_name
from apollo11.scheduler.wire import ELECTION_METADATA, LEADER_METADATA
from apollo11.v1 import worker_pb2 as wpb

log = logging.getLogger(__name__)

NAME_MAX = 128
SLOTS_MAX = 10_000
WORKFLOWS_MAX = 1_000
LABELS_MAX = 64
RUNNING_MAX = 2 * SLOTS_MAX  # what a worker still runs from before (slots, and handed-back)


def check_register(r: wpb.Register) -> str | None:
    """What is wrong with a registration (None: nothing), naming the field and limit."""
    if not r.name or len(r.name) > NAME_MAX:
        return f"register.name: 1 to {NAME_MAX} characters, got {len(r.name)}"
    if not r.instance:
        return "register.instance: required (unique per worker process)"
    if not 1 <= r.slots <= SLOTS_MAX:
        return f"register.slots: 1 to {SLOTS_MAX}, got {r.slots}"
    if len(r.workflows) > WORKFLOWS_MAX:
        return f"register.workflows: at most {WORKFLOWS_MAX}, got {len(r.workflows)}"
    if len(r.labels) > LABELS_MAX:
        return f"register.labels: at most {LABELS_MAX}, got {len(r.labels)}"
    for w in r.workflows:
        if not w.name or len(w.name) > NAME_MAX or w.version < 1:
            return (
                f"register.workflows: {w.name[:NAME_MAX]!r} v{w.version} is not a workflow version"
            )
    for k, v in r.labels.items():
        if not k or len(k) > NAME_MAX or len(v) > NAME_MAX:
            return f"register.labels: keys 1 to {NAME_MAX} characters, values up to {NAME_MAX}"
    if len(r.running) > RUNNING_MAX:
        return f"register.running: at most {RUNNING_MAX} attempts, got {len(r.running)}"
    if len(r.version) > NAME_MAX or len(r.instance) > NAME_MAX:
        return f"register.version and register.instance: at most {NAME_MAX} characters"
    return None


class WorkersService:
    def __init__(self, executor: RemoteExecutor, not_leader: Callable[[], ApolloError]) -> None:
        self.executor = executor
        self._not_leader = not_leader

    async def Connect(self, request_iterator: object, context: grpc.aio.ServicerContext) -> None:
        ex = self.executor
        # The Register is read before any answer, a refusal too: grpc.aio's client
        # reports INTERNAL ("Internal error from Core") for a write that meets the
        # stream's end (grpc/grpc#36066), so a standby that refused as the stream
        # opened lost its redirect to a worker still writing its Register.
        first = await context.read()
        if not ex.accepting:
            await _refuse_not_leader(context, self._not_leader())
            return
        if first is grpc.aio.EOF or first.WhichOneof("body") != "register":
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "the first message must be a register"
            )
        reg = first.register
        problem = check_register(reg)
        if problem is not None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        try:
            # bound to the credential: the STARTED records it, and after a failover
            # the attempts it names are adopted from this name's worker only
            name = worker_name(current_principal(), reg.name, default=reg.default_name)
        except WorkerNameRefused as e:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(e))
            return
        if len(name) > NAME_MAX:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"register.name: {name!r} (beneath the credential's name) is longer than "
                f"{NAME_MAX} characters; pass a shorter --name",
            )
        conn = WorkerConn(
            name=name,
            instance=reg.instance,
            slots=reg.slots,
            workflows=frozenset((w.name, w.version) for w in reg.workflows),
            labels=dict(reg.labels),
            address=context.peer(),
            version=reg.version,
            packed_acks=reg.packed_acks,
            packed_assignments=reg.packed_assignments,
        )
        try:
            stale = ex.connect(conn, list(reg.running))
        except RefusedError as e:
            if not ex.accepting:
                await _refuse_not_leader(context, self._not_leader())
                return
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, str(e))
            return
        how = "its stream ended"
        reader = asyncio.create_task(self._read(conn, context), name=f"worker {conn.name} reader")
        try:
            await context.write(
                wpb.DispatchMessage(
                    registered=wpb.Registered(
                        node_id=ex.node_id,
                        term=ex.term,
                        heartbeat_interval_s=ex.heartbeat_interval_s,
                        heartbeat_timeout_s=ex.heartbeat_timeout_s,
                        stale=[to_pb(t) for t in stale],
                        pings=True,
                        packed_results=True,
                        name=conn.name,
                    )
                )
            )
            reader.add_done_callback(lambda _: conn.wake())
            while conn.closed is None and not reader.done():
                await conn.work()
                messages, queued = conn.drain()
                for m in messages:
                    await context.write(m)
                conn.last_sent = time.monotonic()
                if queued:
                    now = time.perf_counter()
                    metrics.observe_all(metrics.DISPATCH_SECONDS, [now - t for t in queued])
            if reader.done() and not reader.cancelled():
                how = reader.result()
        except asyncio.CancelledError:
            how = "its stream was cancelled (the worker process died or disconnected)"
            raise
        finally:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
            closed_by_us = conn.closed
            ex.disconnect(conn, closed_by_us or how)
        if closed_by_us is not None and not ex.accepting:
            await _refuse_not_leader(context, self._not_leader())

    async def _read(self, conn: WorkerConn, context: grpc.aio.ServicerContext) -> str:
        ex = self.executor
        while True:
            msg = await context.read()
            if msg is grpc.aio.EOF:
                return "the worker closed its stream"
            kind = msg.WhichOneof("body")
            if kind == "heartbeat":
                ex.heartbeat(conn, msg.heartbeat)
            elif kind == "results":
                ex.results(conn, msg.results)
            elif kind == "journal":
                ex.journal(conn, msg.journal)
            elif kind == "register":
                log.warning("worker %s registered twice on one stream; ignored", conn.name)


async def _refuse_not_leader(context: grpc.aio.ServicerContext, e: ApolloError) -> None:
    if isinstance(e, NotLeaderError) and e.leader:
        context.set_trailing_metadata(((LEADER_METADATA, e.leader),))
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
    if isinstance(e, NoLeaderError):
        context.set_trailing_metadata(((ELECTION_METADATA, "1"),))
    await context.abort(grpc.StatusCode.UNAVAILABLE, str(e))
