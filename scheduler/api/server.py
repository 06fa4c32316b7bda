"""The gRPC server inside the node: Scheduler and Cluster services, health, reflection.

Every error a request can cause is mapped to the right status with a message
naming the field and the limit; nothing a request carries can crash the node
or leave half an event behind (the log either appends a whole record or
nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
import orjson
from google.protobuf.descriptor import ServiceDescriptor
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from apollo11.scheduler import tracing
from apollo11.scheduler.api import codec
from apollo11.scheduler.api.decode import Undecodable, add_service
from apollo11.scheduler.api.flowlimits import LimitCalls, priority
from apollo11.scheduler.api.knownsources import KnownSources
from apollo11.scheduler.api.limits import Admission, WatchSlots, server_options
from apollo11.scheduler.api.schedules import ScheduleCalls, scheduled_tasks
from apollo11.scheduler.clock import Clock
from apollo11.scheduler.engine import Engine, SubmitItem
from apollo11.scheduler.errors import (
    AlreadyExistsError,
    ApolloError,
    BucketError,
    CorruptObjectError,
    FailedPreconditionError,
    InvalidArgumentError,
    InvalidEventError,
    LogClosedError,
    LogFailedError,
    NodeUnavailableError,
    NoLeaderError,
    NotFoundError,
    NotLeaderError,
    OutcomeUnknownError,
    ResourceExhaustedError,
    StaleTermError,
)
from apollo11.scheduler.log import Event
from apollo11.scheduler.nodeview import (
    ActionKind,
    GiveWay,
    NodeView,
    blocked,
    check_depth,
    dispatching,
    leading_engine,
    on_engine,
    operator_action,
    optional,
    read_events,
    required,
    task_as_of,
    task_now,
    waiting,
)
from apollo11.scheduler.security import (
    Authenticator,
    AuthInterceptor,
    KeyPair,
    Principals,
    current_principal,
    read_pem,
    server_credentials,
)
from apollo11.scheduler.shell import SHELL_WORKFLOW
from apollo11.scheduler.state import State, Store, Summary, TaskState
from apollo11.scheduler.taskname import ListedNames
from apollo11.scheduler.wire import LEADER_METADATA
from apollo11.v1 import scheduler_pb2 as pb
from apollo11.v1 import scheduler_pb2_grpc as pbg

if TYPE_CHECKING:
    from apollo11.scheduler.config import NodeSettings

log = logging.getLogger(__name__)

MAX_PAGE = 1000
DEFAULT_PAGE = 50
MAX_EVENTS = 10_000
MAX_TASKS_READ = 256  # GetTasks
ROWS_A_TURN = 100  # ListTasks: rows made into messages between two turns of the loop
MAX_SUBMIT_BATCH = 1000
DEFAULT_EVENTS = 100
WATCH_PAGE = 256  # events of a task's history read between two turns of the event loop
# How often a quiet WatchTask stream looks whether its credential was revoked.
WATCH_RECHECK_S = 2.0

R = TypeVar("R")


def _status_for(e: Exception) -> grpc.StatusCode:
    if isinstance(e, NotFoundError):
        return grpc.StatusCode.NOT_FOUND
    if isinstance(e, AlreadyExistsError):
        return grpc.StatusCode.ALREADY_EXISTS
    if isinstance(e, InvalidArgumentError | InvalidEventError):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(e, NotLeaderError) and not e.leader:
        # No primary to send the caller to yet (an election, a promotion under way):
        # "try again", which clients retry; FAILED_PRECONDITION they do not.
        return grpc.StatusCode.UNAVAILABLE
    if isinstance(e, FailedPreconditionError | StaleTermError):
        return grpc.StatusCode.FAILED_PRECONDITION
    if isinstance(
        e,
        LogFailedError
        | LogClosedError
        | OutcomeUnknownError
        | NoLeaderError
        | NodeUnavailableError,
    ):
        return grpc.StatusCode.UNAVAILABLE
    if isinstance(e, ResourceExhaustedError):
        return grpc.StatusCode.RESOURCE_EXHAUSTED
    # old history read from the archive's bucket: damaged (never skipped), or unreachable
    if isinstance(e, CorruptObjectError):
        return grpc.StatusCode.DATA_LOSS
    if isinstance(e, BucketError):
        return grpc.StatusCode.UNAVAILABLE
    return grpc.StatusCode.INTERNAL


async def _abort(context: grpc.aio.ServicerContext, e: Exception) -> None:
    if isinstance(e, NotLeaderError) and e.leader:
        context.set_trailing_metadata(((LEADER_METADATA, e.leader),))
    if isinstance(e, ResourceExhaustedError) and e.retry_after_ms:
        # gRPC's own retry-pushback hint: a client with a retry policy waits this long
        context.set_trailing_metadata((("grpc-retry-pushback-ms", str(e.retry_after_ms)),))
    code = _status_for(e)
    message = str(e)
    if code is grpc.StatusCode.INTERNAL:
        log.exception("internal error serving a request")
        # Never an empty status: name what failed (the traceback is in the node's log).
        what = f"{type(e).__name__}: {message}" if message else type(e).__name__
        message = f"internal error ({what}); see the node's log"
    await context.abort(code, message)


def rpc(
    fn: Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[R]],
) -> Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[R]]:
    """Map our errors to gRPC statuses (unexpected ones to INTERNAL, logged)."""

    @functools.wraps(fn)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> R:
        try:
            if isinstance(request, Undecodable):
                raise InvalidArgumentError(request.describe())
            return await fn(self, request, context)
        except (ApolloError, ValueError) as e:
            await _abort(context, e)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            await _abort(context, e)
        raise AssertionError("unreachable: abort raises")

    return wrapper


def _not_shell(workflow: str, name: str) -> str:
    if workflow == SHELL_WORKFLOW:
        raise InvalidArgumentError(
            f"{name} 'shell' is submitted with SubmitShell (role operator, and only where "
            f"the nodes allow shell steps)"
        )
    return workflow


def _json(text: str, name: str, limit: int, depth: int) -> Any:
    """JSON text a client sent: at most `limit` bytes and `depth` levels deep."""
    if len(text.encode()) > limit:
        raise InvalidArgumentError(
            f"{name} is {len(text.encode())} bytes, over the {limit}-byte limit "
            f"(submit_max_bytes): pass a reference (a path, a URL) to large inputs"
        )
    if not text:
        return None
    check_depth(text, name, depth)
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise InvalidArgumentError(f"{name} is not valid JSON: {e}") from None


class SchedulerService(pbg.SchedulerServicer):
    def __init__(
        self,
        node: NodeView,
        watchers: Watchers,
        watch_slots: WatchSlots,
        admission: Admission,
        clock: Clock,
    ) -> None:
        self.node = node
        self.watchers = watchers
        self.watch_slots = watch_slots
        self.admission = admission
        self._names = ListedNames()
        self.schedules = ScheduleCalls(node, clock, self._json, lambda: self._state)
        self.limits = LimitCalls(node)
        # An export's reads, a task or a page at a time, give way to dispatch.
        self._task_reads = GiveWay(lambda: dispatching(node))
        self._pages_listed = GiveWay(lambda: dispatching(node))
        self._rows_made = GiveWay(lambda: dispatching(node))  # a listed page's messages

    def _store(self) -> Store:
        store = self.node.store
        if store is None:
            # Between closing and reopening its store (a divergent tail cut, a snapshot
            # installed): a moment's wait, not an internal error.
            raise NodeUnavailableError(
                f"{self.node.settings.node_id} is reopening its log (rejoining the "
                f"cluster); retry in a moment or ask another node"
            )
        return store

    @property
    def _state(self) -> Any:
        return self._store().state

    def _engine(self) -> Engine:
        return leading_engine(self.node)

    def _json(self, text: str, name: str) -> Any:
        """A JSON field of a request, within the node's limits."""
        cap = self._store().log.config.submit_max_bytes
        return _json(text, name, cap, self.node.settings.json_max_depth)

    @rpc
    async def SubmitTask(
        self, request: pb.SubmitTaskRequest, context: grpc.aio.ServicerContext
    ) -> pb.SubmitTaskResponse:
        workflow = _not_shell(required(request.workflow, "workflow"), "workflow")
        data = self._json(request.input_json, "input_json")
        key = optional(request.idempotency_key, "idempotency_key")
        rank = priority(request.priority, "priority")
        engine = self._engine()
        with self.admission.admit(1), _traced(context, "SubmitTask") as span:
            sub = await engine.submit(
                workflow,
                data,
                idempotency_key=key,
                version=request.version or None,
                trace=tracing.task_trace(span),
                priority=rank,
            )
            _tag(span, workflow, sub.task_id)
        return pb.SubmitTaskResponse(
            task_id=sub.task_id, created=sub.created, event_id=sub.event_id
        )

    @rpc
    async def SubmitTasks(
        self, request: pb.SubmitTasksRequest, context: grpc.aio.ServicerContext
    ) -> pb.SubmitTasksResponse:
        n = len(request.tasks)
        if not 1 <= n <= MAX_SUBMIT_BATCH:
            raise InvalidArgumentError(f"tasks has {n} items; send 1 to {MAX_SUBMIT_BATCH}")
        engine = self._engine()
        with self.admission.admit(n), _traced(context, "SubmitTasks") as span:
            items = []
            for i, t in enumerate(request.tasks):
                items.append(
                    SubmitItem(
                        _not_shell(
                            required(t.workflow, f"tasks[{i}].workflow"), f"tasks[{i}].workflow"
                        ),
                        self._json(t.input_json, f"tasks[{i}].input_json"),
                        optional(t.idempotency_key, f"tasks[{i}].idempotency_key"),
                        t.version or None,
                        tracing.task_trace(span),
                        priority(t.priority, f"tasks[{i}].priority"),
                    )
                )
            subs = await engine.submit_many(items)
        return pb.SubmitTasksResponse(
            tasks=[
                pb.SubmitTaskResponse(task_id=s.task_id, created=s.created, event_id=s.event_id)
                for s in subs
            ]
        )

    @rpc
    async def SubmitShell(
        self, request: pb.SubmitShellRequest, context: grpc.aio.ServicerContext
    ) -> pb.SubmitTaskResponse:
        engine = self._engine()
        why = engine.shell_refusal()
        if why:  # before the document is even read: nothing of it is looked at
            raise FailedPreconditionError(why)
        dag = self._json(required(request.dag_json, "dag_json", 10**9), "dag_json")
        key = optional(request.idempotency_key, "idempotency_key")
        with self.admission.admit(1), _traced(context, "SubmitShell") as span:
            sub = await engine.submit(
                "shell", dag, idempotency_key=key, trace=tracing.task_trace(span)
            )
            _tag(span, "shell", sub.task_id)
        return pb.SubmitTaskResponse(
            task_id=sub.task_id, created=sub.created, event_id=sub.event_id
        )

    async def _task(self, task_id: str) -> TaskState:
        return await task_now(self._store(), required(task_id, "task_id"))

    @rpc
    async def GetTask(
        self, request: pb.GetTaskRequest, context: grpc.aio.ServicerContext
    ) -> pb.Task:
        if not request.as_of_event_id:
            return self._task_pb(await self._task(request.task_id))
        at = request.as_of_event_id
        task_id = required(request.task_id, "task_id")
        return codec.task_to_pb(await task_as_of(self.node, task_id, at), at)

    def _task_pb(self, task: TaskState) -> pb.Task:
        why = blocked(self.node, task.task_id)
        held = waiting(self.node, task.task_id)
        state = self._state
        return codec.task_to_pb(task, state.last_event_id, why, held, state.holds.get(task.task_id))

    @rpc
    async def GetTasks(
        self, request: pb.GetTasksRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetTasksResponse:
        """Tasks with their events, a turn of the event loop between two: an export's
        reads cost the node one call for up to 256 tasks (a GetTask and a GetEvents a
        task spent three times the handlers' own work in gRPC's, a profile showed), and
        each task's read waits while the primary dispatches (nodeview/giveway.py)."""
        ids = list(request.task_ids)
        if len(ids) > MAX_TASKS_READ:
            raise InvalidArgumentError(
                f"task_ids has {len(ids)} ids, over the limit of {MAX_TASKS_READ}"
            )
        for i, task_id in enumerate(ids):
            required(task_id, f"task_ids[{i}]")
        store = self._store()
        budget = MAX_EVENTS
        out = pb.GetTasksResponse()
        for i, task_id in enumerate(ids):
            if i:
                await asyncio.sleep(0)
            async with self._task_reads.slice():
                budget = await self._read_task(store, out, task_id, budget)
        return out

    async def _read_task(
        self, store: Store, out: pb.GetTasksResponse, task_id: str, budget: int
    ) -> int:
        """GetTasks' item for one task, its events within `budget`: what is left of it."""
        try:
            task = await task_now(store, task_id)
        except NotFoundError:
            out.tasks.add(task_id=task_id)
            return budget
        item = out.tasks.add(task_id=task_id, found=True, task=self._task_pb(task))
        if not budget:  # the rest of the events: GetEvents
            item.next_event_id = task.first_event_id
            return budget
        page = await read_events(store, task, 0, 0, budget)
        item.events.extend(codec.event_to_pb(e) for e in page.events)
        item.next_event_id = page.next_id
        item.bucket_before = page.bucket_before
        item.gone_before = page.gone_before
        return budget - len(page.events)

    @rpc
    async def ListTasks(
        self, request: pb.ListTasksRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTasksResponse:
        size = request.page_size or DEFAULT_PAGE
        if size > MAX_PAGE:
            raise InvalidArgumentError(f"page_size is {size}, over the limit of {MAX_PAGE}")
        if request.state and request.state not in codec.TASK_STATE_NAME:
            raise InvalidArgumentError(f"state {request.state} is not a known task state")
        want_state = codec.task_state_filter(request.state)
        token = request.page_token
        if token and not token.startswith("before:"):
            raise InvalidArgumentError("page_token is not one this server issued")
        before = token.removeprefix("before:") if token else None
        state = self._state  # the page's rows and their names from one state
        async with self._pages_listed.slice():
            page, after = self._list_rows(state, request, want_state, before, size)
        out = pb.ListTasksResponse(next_page_token=f"before:{after}" if after else "")
        # A page of 1,000 rows made into messages at once held the loop ~4 ms, what an
        # export's listing added to a submission's p99: a turn of the loop between rows.
        for i in range(0, len(page), ROWS_A_TURN):
            if i:
                await asyncio.sleep(0)
            async with self._rows_made.slice():
                self._add_rows(out, page[i : i + ROWS_A_TURN], state)
        return out

    def _list_rows(
        self,
        state: State,
        request: pb.ListTasksRequest,
        want_state: str | None,
        before: str | None,
        size: int,
    ) -> tuple[list[Summary], str | None]:
        if request.held:  # the legal holds: few, each read where it lives
            page, after = state.list_named(
                list(state.holds), want_state, request.workflow, before, size
            )
        elif request.schedule:
            fired = scheduled_tasks(state, request.schedule)
            page, after = state.list_named(fired, want_state, request.workflow, before, size)
        else:
            page, after = state.list_filtered(want_state, request.workflow, before, size)
        return page, after

    def _add_rows(self, out: pb.ListTasksResponse, rows: list[Summary], state: State) -> None:
        names = self._names.of(rows, state.peek)
        add = out.tasks.add
        for s in rows:
            add(
                task_id=s.task_id,
                workflow=s.workflow,
                state=codec.TASK_STATE[s.status.value],
                submitted_ms=s.submitted_ms,
                updated_ms=s.updated_ms,
                steps_done=s.done,
                steps_total=s.total,
                name=names.get(s.task_id, s.workflow),
            )

    async def _task_events(self, task: TaskState) -> AsyncIterator[Event]:
        """The task's history a page at a time, so that a task with a long one does not
        hold the event loop while all of it is read."""
        start = 0
        while True:
            page = await read_events(self._store(), task, start, 0, WATCH_PAGE)
            for e in page.events:
                yield e
            start = page.next_id
            if not start:
                return
            await asyncio.sleep(0)

    async def WatchTask(
        self, request: pb.WatchTaskRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.Event]:
        try:
            if isinstance(request, Undecodable):
                raise InvalidArgumentError(request.describe())
            task = await self._task(request.task_id)
            self.watch_slots.take()
        except ApolloError as err:
            await _abort(context, err)
            return
        # Given back when the RPC ends, however it ends: after a client's cancel the
        # generator can be left at a yield, its finally run only when it is collected.
        context.add_done_callback(lambda _: self.watch_slots.give_back())
        queue: asyncio.Queue[Event] = asyncio.Queue()
        self.watchers.add(task.task_id, queue)  # before reading history: no gap
        caller = current_principal()
        try:
            last = 0
            try:
                async for past in self._task_events(task):
                    yield codec.event_to_pb(past)
                    last = past.event_id
            except ApolloError as err:  # its older history from a damaged or absent bucket
                await _abort(context, err)
                return
            while True:
                current = self._state.peek(task.task_id)
                if current is None or current.quiescent:
                    return
                try:
                    async with asyncio.timeout(WATCH_RECHECK_S):
                        new = await queue.get()
                except TimeoutError:
                    new = None
                principals = self.node.principals
                if principals is not None and not principals.in_force(caller):
                    await context.abort(
                        grpc.StatusCode.UNAUTHENTICATED,
                        f"the credential of {caller.name!r} this stream was opened with was "
                        f"revoked (tokens file reloaded)",
                    )
                if new is not None and new.event_id > last:
                    yield codec.event_to_pb(new)
                    last = new.event_id
        finally:
            self.watchers.remove(task.task_id, queue)

    @rpc
    async def GetEvents(
        self, request: pb.GetEventsRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetEventsResponse:
        store = self._store()
        limit = request.limit or DEFAULT_EVENTS
        if limit > MAX_EVENTS:
            raise InvalidArgumentError(f"limit is {limit}, over the limit of {MAX_EVENTS}")
        if request.to_event_id and request.to_event_id < request.from_event_id:
            raise InvalidArgumentError("to_event_id must not be below from_event_id")
        task = await self._task(request.task_id) if request.task_id else None
        page = await read_events(store, task, request.from_event_id, request.to_event_id, limit)
        return pb.GetEventsResponse(
            events=[codec.event_to_pb(e) for e in page.events],
            next_event_id=page.next_id,
            durable_event_id=page.durable,
            bucket_before=page.bucket_before,
            gone_before=page.gone_before,
        )

    async def _act(
        self,
        kind: ActionKind,
        r: pb.StepActionRequest | pb.CancelTaskRequest | pb.RedactTaskRequest,
    ) -> pb.ActionResponse:
        step = r.step if isinstance(r, pb.StepActionRequest) else ""
        act = operator_action(kind, r.task_id, step=step, reason=r.reason, display=r.operator)
        event = await on_engine(self._engine(), act, operator=current_principal().name)
        return pb.ActionResponse(event_id=event.event_id)

    @rpc
    async def RetryStep(
        self, request: pb.StepActionRequest, context: grpc.aio.ServicerContext
    ) -> pb.ActionResponse:
        return await self._act("retry", request)

    @rpc
    async def SkipStep(
        self, request: pb.StepActionRequest, context: grpc.aio.ServicerContext
    ) -> pb.ActionResponse:
        return await self._act("skip", request)

    @rpc
    async def CancelTask(
        self, request: pb.CancelTaskRequest, context: grpc.aio.ServicerContext
    ) -> pb.ActionResponse:
        return await self._act("cancel", request)

    async def _hold(self, r: pb.HoldTaskRequest, *, held: bool) -> pb.ActionResponse:
        task_id = required(r.task_id, "task_id")
        event = await self._engine().retention.hold(
            task_id, operator=current_principal().name, reason=r.reason, held=held
        )
        return pb.ActionResponse(event_id=event.event_id)

    @rpc
    async def HoldTask(
        self, request: pb.HoldTaskRequest, context: grpc.aio.ServicerContext
    ) -> pb.ActionResponse:
        return await self._hold(request, held=True)

    @rpc
    async def ReleaseTask(
        self, request: pb.HoldTaskRequest, context: grpc.aio.ServicerContext
    ) -> pb.ActionResponse:
        return await self._hold(request, held=False)

    @rpc
    async def RedactTask(
        self, request: pb.RedactTaskRequest, context: grpc.aio.ServicerContext
    ) -> pb.ActionResponse:
        return await self._act("redact", request)

    @rpc
    async def SendEvent(
        self, request: pb.SendEventRequest, context: grpc.aio.ServicerContext
    ) -> pb.SendEventResponse:
        key = required(request.key, "key")
        data = self._json(request.payload_json, "payload_json")
        idem = optional(request.idempotency_key, "idempotency_key")
        engine = self._engine()
        with self.admission.admit(1):
            sent = await engine.send_event(
                key, data, idempotency_key=idem, sender=current_principal().name
            )
        return pb.SendEventResponse(event_id=sent.event_id, created=sent.created)

    @rpc
    async def ListWorkflows(
        self, request: pb.ListWorkflowsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListWorkflowsResponse:
        engine = self.node.engine
        loaded = engine.registry.all() if engine is not None else []
        return pb.ListWorkflowsResponse(workflows=[codec.workflow_to_pb(wf) for wf in loaded])

    @rpc
    async def DescribeWorkflow(
        self, request: pb.DescribeWorkflowRequest, context: grpc.aio.ServicerContext
    ) -> pb.WorkflowInfo:
        engine = self.node.engine
        if engine is None:
            raise NotFoundError(f"unknown workflow {request.name!r} (loaded: none)")
        return codec.workflow_to_pb(engine.registry.require(request.name, request.version or None))

    # Schedules: api/schedules.py does the work.

    @rpc
    async def CreateSchedule(
        self, request: pb.CreateScheduleRequest, context: grpc.aio.ServicerContext
    ) -> pb.Schedule:
        return await self.schedules.create(request)

    @rpc
    async def UpdateSchedule(
        self, request: pb.UpdateScheduleRequest, context: grpc.aio.ServicerContext
    ) -> pb.Schedule:
        return await self.schedules.update(request)

    @rpc
    async def PauseSchedule(
        self, request: pb.PauseScheduleRequest, context: grpc.aio.ServicerContext
    ) -> pb.Schedule:
        return await self.schedules.pause(request)

    @rpc
    async def UnpauseSchedule(
        self, request: pb.UnpauseScheduleRequest, context: grpc.aio.ServicerContext
    ) -> pb.Schedule:
        return await self.schedules.unpause(request)

    @rpc
    async def TriggerSchedule(
        self, request: pb.TriggerScheduleRequest, context: grpc.aio.ServicerContext
    ) -> pb.TriggerScheduleResponse:
        return await self.schedules.trigger(request)

    @rpc
    async def BackfillSchedule(
        self, request: pb.BackfillScheduleRequest, context: grpc.aio.ServicerContext
    ) -> pb.BackfillScheduleResponse:
        return await self.schedules.backfill(request)

    @rpc
    async def DeleteSchedule(
        self, request: pb.DeleteScheduleRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteScheduleResponse:
        return await self.schedules.delete(request)

    @rpc
    async def ListSchedules(
        self, request: pb.ListSchedulesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSchedulesResponse:
        return self.schedules.listed(request)

    @rpc
    async def DescribeSchedule(
        self, request: pb.DescribeScheduleRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeScheduleResponse:
        return self.schedules.describe(request)

    # Flow control: api/flowlimits.py does the work, on the primary.

    @rpc
    async def SetLimit(
        self, request: pb.SetLimitRequest, context: grpc.aio.ServicerContext
    ) -> pb.SetLimitResponse:
        return await self.limits.set(request)

    @rpc
    async def ListLimits(
        self, request: pb.ListLimitsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListLimitsResponse:
        return self.limits.listed(request)


def _traced(context: grpc.aio.ServicerContext, name: str) -> Any:
    """The submission's span (tracing.py), the child of the client's traceparent."""
    if not tracing.on():
        return contextlib.nullcontext(None)
    return tracing.submit_span(context.invocation_metadata(), f"apollo11.{name}")


def _tag(span: Any, workflow: str, task_id: str) -> None:
    if span is not None:
        span.set_attribute("apollo11.workflow", workflow)
        span.set_attribute("apollo11.task_id", task_id)


class ClusterService(pbg.ClusterServicer):
    def __init__(self, node: NodeView) -> None:
        self.node = node

    @rpc
    async def GetStatus(
        self, request: pb.GetStatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.ClusterStatus:
        s = self.node.status()
        msg = pb.ClusterStatus(
            node_id=s.node_id,
            role=s.role,
            term=s.term,
            last_event_id=s.last_event_id,
            applied_event_id=s.applied_event_id,
            recovery=s.recovery,
            running_steps=s.running_steps,
            active_tasks=s.active_tasks,
            security=s.security,
            notice=s.notice,
            members=[pb.Member(**dataclasses.asdict(m)) for m in s.members],
            execution=s.execution,
            terms_started=s.terms_started,
            workers=[
                pb.WorkerInfo(
                    name=w.name,
                    address=w.address,
                    slots=w.slots,
                    slots_used=w.slots_used,
                    workflows=list(w.workflows),
                    labels=dict(w.labels),
                    last_heartbeat_s_ago=w.last_heartbeat_s_ago,
                    attempts_running=w.attempts_running,
                    connected_s_ago=w.connected_s_ago,
                    version=w.version,
                )
                for w in s.workers
            ],
        )
        if s.leader is not None:
            leader = s.leader
            msg.leader.CopyFrom(
                pb.LeaderInfo(node_id=leader.node_id, address=leader.address, term=leader.term)
            )
        if s.lease is not None:
            msg.lease.CopyFrom(pb.LeaseInfo(ttl_s=s.lease.ttl_s, remaining_s=s.lease.remaining_s))
        return msg

    @rpc
    async def GetHistory(
        self, request: pb.GetHistoryRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetHistoryResponse:
        return pb.GetHistoryResponse(
            terms=[pb.TermInfo(**dataclasses.asdict(t)) for t in self.node.history()]
        )

    @rpc
    async def Switchover(
        self, request: pb.SwitchoverRequest, context: grpc.aio.ServicerContext
    ) -> pb.SwitchoverResponse:
        to = optional(request.to, "to")
        target, last, sentence = await self.node.switchover(to, operator=current_principal().name)
        return pb.SwitchoverResponse(
            from_node=self.node.status().node_id,
            to_node=target,
            last_event_id=last,
            sentence=sentence,
        )


class Watchers:
    """Queues of WatchTask streams, fed by the store as batches become durable."""

    def __init__(self) -> None:
        self._by_task: dict[str, list[asyncio.Queue[Event]]] = {}

    def add(self, task_id: str, q: asyncio.Queue[Event]) -> None:
        self._by_task.setdefault(task_id, []).append(q)

    def remove(self, task_id: str, q: asyncio.Queue[Event]) -> None:
        qs = self._by_task.get(task_id)
        if qs is not None:
            with contextlib.suppress(ValueError):
                qs.remove(q)
            if not qs:
                del self._by_task[task_id]

    def __call__(self, events: Sequence[Event]) -> None:
        if not self._by_task:
            return
        for e in events:
            qs = self._by_task.get(e.task_id)
            if qs:
                for q in qs:
                    q.put_nowait(e)


SERVICES = ("apollo11.v1.Scheduler", "apollo11.v1.Cluster", "apollo11.v1.Replication")


def _server(
    authenticate: Authenticator | None,
    settings: NodeSettings,
    max_connections: int,
    known: KnownSources | None,
) -> grpc.aio.Server:
    admitted = None if known is None else known.begin
    return grpc.aio.server(
        options=[*server_options(settings, max_connections), ("grpc.so_reuseport", 0)],
        # Authentication off (loopback): no interceptor at all, nothing on the hot path.
        interceptors=None
        if authenticate is None
        else [AuthInterceptor(authenticate, admitted=admitted)],
    )


class ApiServer:
    """grpc.aio server with our services, the standard health service and reflection.

    With --peer-listen, the Replication service has a server of its own on that
    port, which only takes callers with a certificate of the cluster CA; without
    it, replication shares the public port (loopback clusters).
    """

    def __init__(
        self,
        node: NodeView,
        principals: Principals | None = None,
        *,
        extra: Sequence[tuple[ServiceDescriptor, object]] = (),
        clock: Clock | None = None,
    ) -> None:
        """`extra`: more services on the public port (the node's Workers service);
        `clock`: the node's (what a schedule's next times are counted from)."""
        self.node = node
        s = node.settings
        self.watchers = Watchers()
        self.watch_slots = WatchSlots(s.max_watch_streams)
        # who proved who they are lately, on either port: spared when SYNs are shed
        # (none without authentication: nobody could prove anything, and the shedder
        # keeps its lower ceiling for everyone)
        self.known: KnownSources | None = None
        public_auth = None
        if principals is not None:
            public_auth = Authenticator(principals, mtls=s.client_ca is not None)
            self.known = KnownSources(welcome_s=s.grpc_welcome_s)
        self.server = _server(public_auth, s, s.max_connections, self.known)
        services = pb.DESCRIPTOR.services_by_name
        admission = Admission(
            s.max_pending_writes,
            s.max_tasks_in_memory,
            lambda: len(node.store.state.tasks) if node.store is not None else 0,
        )
        scheduler = SchedulerService(
            node, self.watchers, self.watch_slots, admission, clock or Clock()
        )
        add_service(self.server, services["Scheduler"], scheduler)
        add_service(self.server, services["Cluster"], ClusterService(node))
        for descriptor, servicer in extra:
            add_service(self.server, descriptor, servicer)
        from apollo11.replicator import ReplicationService
        from apollo11.v1 import replication_pb2_grpc as rpbg

        self.peer: grpc.aio.Server | None = None
        if s.peer_listen:
            self.peer = _server(
                Authenticator(None, peer=True, mtls=s.peer_tls),
                s,
                s.peer_max_connections,
                self.known,
            )
            rpbg.add_ReplicationServicer_to_server(ReplicationService(node), self.peer)
        else:
            rpbg.add_ReplicationServicer_to_server(ReplicationService(node), self.server)
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        names = (
            *SERVICES,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        )
        reflection.enable_server_reflection(names, self.server)
        self.port = 0
        self.peer_port = 0

    async def start(self, listen: str) -> int:
        s = self.node.settings
        if s.tls_cert is not None and s.tls_key is not None:
            client_ca = None if s.client_ca is None else read_pem(s.client_ca, "--client-ca")
            creds = server_credentials(KeyPair.load(s.tls_cert, s.tls_key, "--tls"), client_ca)
            self.port = self.server.add_secure_port(listen, creds)
        else:
            self.port = self.server.add_insecure_port(listen)
        if self.port == 0:
            raise OSError(f"cannot listen on {listen}")
        if self.peer is not None:
            assert s.peer_listen is not None
            if s.peer_cert is not None and s.peer_key is not None and s.peer_ca is not None:
                pair = KeyPair.load(s.peer_cert, s.peer_key, "--peer")
                ca = read_pem(s.peer_ca, "--peer-ca")
                self.peer_port = self.peer.add_secure_port(
                    s.peer_listen, server_credentials(pair, ca)
                )
            else:
                self.peer_port = self.peer.add_insecure_port(s.peer_listen)
            if self.peer_port == 0:
                raise OSError(f"cannot listen on {s.peer_listen}")
            await self.peer.start()
        await self.server.start()
        await self._set_health(health_pb2.HealthCheckResponse.SERVING)
        assert self.node.store is not None
        self.node.store.add_observer(self.watchers)
        return self.port

    async def _set_health(self, status: Any) -> None:
        for name in ("", *SERVICES):
            await self.health.set(name, status)

    async def stop(self, grace_s: float) -> None:
        """Refuse new RPCs, let the ones in flight finish (up to grace_s)."""
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        if self.peer is not None:
            await self.peer.stop(grace_s)
        await self.server.stop(grace_s)
