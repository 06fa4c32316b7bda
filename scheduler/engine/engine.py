"""The engine: which tasks to decide, when, and acting on the decisions.

It runs on the primary. Every transition is written to the log before it is
acted on (STARTED is durable before a step runs; SUCCEEDED or FAILED after),
so after a crash or a failover the next leader resumes from the log and a
step that SUCCEEDED never runs again.

The loop is event-driven and incremental: the store tells the engine which
tasks a durable batch touched, and only those tasks are decided again. A
decision (`decide`, a pure function) reads one task's in-memory state, so its
cost does not grow with the number of finished tasks (which live in the
archive, untouched). The engine then acts on the actions it names: it starts
attempts in the slots it has (`steps.StepRunner` runs them), arms wake-ups for
retries, and records lost steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, assert_never

from apollo11.scheduler import defaults, metrics, tracing, waits
from apollo11.scheduler.clock import Clock
from apollo11.scheduler.engine import exhaustion
from apollo11.scheduler.engine.decide import (
    Action,
    Adopt,
    CancelAttempt,
    CancelTask,
    Compensate,
    CompensateTask,
    FailLost,
    NoWorkflow,
    PauseTask,
    StartAttempt,
    Stuck,
    WakeAt,
    decide,
)
from apollo11.scheduler.engine.executor import Executor, InProcessExecutor
from apollo11.scheduler.engine.flow import FlowGate, declared_limits
from apollo11.scheduler.engine.flowsubmit import CANCELLER, FlowSubmit
from apollo11.scheduler.engine.intake import (
    DEFAULT_IDEMPOTENCY_TTL_S,
    EventSent,
    Intake,
    SubmitItem,
    Submitted,
)
from apollo11.scheduler.engine.limits import Limits
from apollo11.scheduler.engine.retention import RetentionOptions, RetentionSweep
from apollo11.scheduler.engine.retrypacer import RetryPacer
from apollo11.scheduler.engine.schedules import Schedules
from apollo11.scheduler.engine.steps import Key, StepRunner, lost_payload
from apollo11.scheduler.engine.timers import Timers
from apollo11.scheduler.errors import (
    ApolloError,
    LeaseLostError,
    NotFoundError,
    NotLeaderError,
    OutcomeUnknownError,
)
from apollo11.scheduler.flow import DEFAULT_PRIORITY, Admit, Concurrency, FairQueue, NotYet, Rate
from apollo11.scheduler.log import Draft, Event, EventType
from apollo11.scheduler.retrypace import RetryBudget
from apollo11.scheduler.shell import SHELL_DISABLED, SHELL_WORKFLOW, shell_workflow
from apollo11.scheduler.state import State, StepStatus, Store, TaskState, TaskStatus
from apollo11.scheduler.workflow import Registry, Step, Workflow

log = logging.getLogger(__name__)

DEFAULT_CONCURRENCY = defaults.CONCURRENCY

_STARTED = EventType.STEP_STARTED
# a running step's own events: its runner's end decides the task (Engine._on_events)
_OWN = frozenset({_STARTED, EventType.STEP_SUCCEEDED, EventType.STEP_FAILED})
_EVENT = EventType.EVENT
_LIMIT = EventType.LIMIT
# what may finish a task, or close a parent: its spawned relatives are decided again
_CLOSING = frozenset(
    {
        EventType.STEP_SUCCEEDED,
        EventType.STEP_FAILED,
        EventType.STEP_COMPENSATED,
        EventType.MANUAL_OVERRIDE,
        EventType.TASK_CANCELLED,
        EventType.TASK_COMPENSATING,  # may end the task at once: nothing owed
    }
)
_NOTHING: frozenset[str] = frozenset()
# A retry's wake-up fires at the end of the window of this width holding its time, or
# with the first pass after its time (timers.py): never earlier than its recorded delay.
# With 10 % of steps failing, each retry woke the loop on its own, between the clean
# tasks' passes, and started alone (STARTED batches 97 -> 155 a run, loop turns 640 ->
# 924: docs/bench-history/retries.md); at a few hundred retries a second, 20 ms holds a
# few of them. Late by 20 ms at most: well inside the ±100 ms Retry-After is honoured to.
RETRY_WINDOW_S = 0.02
_NO_LABELS: Mapping[str, str] = MappingProxyType({})  # a step that requires no labels
Group = tuple[str, int, tuple[tuple[str, str], ...]]  # workflow, version, labels


DEFAULT_RETRY_BUDGET = RetryBudget()


def _always() -> bool:
    return True


class Engine:
    """Schedules and runs the steps of every active task on this node."""

    def __init__(
        self,
        store: Store,
        registry: Registry,
        *,
        node_id: str,
        executor: Executor | None = None,
        clock: Clock | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        default_timeout_s: float = 3600.0,
        idempotency_ttl_s: float = DEFAULT_IDEMPOTENCY_TTL_S,
        commit: Callable[[int], Awaitable[None]] | None = None,
        shell_refusal: Callable[[], str | None] | None = None,
        lease_valid: Callable[[], bool] | None = None,
        adopt_grace_s: float = 0.0,
        retry_budget: RetryBudget | None = DEFAULT_RETRY_BUDGET,
        retention: RetentionOptions | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.store = store
        self.registry = registry
        self.node_id = node_id
        self.executor: Executor = executor or InProcessExecutor(threads=concurrency)
        self.clock = clock or Clock()
        self.concurrency = concurrency
        self.default_timeout_s = default_timeout_s
        self.idempotency_ttl_s = idempotency_ttl_s
        # What an acknowledgement waits for beyond local durability: the lease still
        # held and, in synchronous mode, enough standbys (the node supplies it).
        self._commit = commit or _durable_is_enough
        # Is this node still sure it holds the lease? Asked right before a STARTED is
        # written and again right before the attempt begins: a commit check alone leaves
        # loop turns between it and the start, where a paused primary resumes unfenced.
        self._lease_valid = lease_valid or _always
        self._leading = False
        self._draining = False
        self._idle = asyncio.Event()  # set when no step runs (for drain)
        # task id -> step -> what runs for it here (an attempt, a lost step's FAILED
        # being written, a compensation); a task with nothing running has no entry
        self._busy: dict[str, dict[str, asyncio.Task[None]]] = {}
        self._timers = Timers(self.clock, self._woken_up)  # wake-ups: one heap, one sleeper
        self._slots_used = 0
        # waiting for a slot, in priority order (docs/flow-control.md: priority with
        # aging, fairness values in weighted turns, first in first out)
        self._queued: FairQueue[str] = FairQueue()
        self._ready: list[str] = []  # left the queue for a freed slot; decided first
        # the executor had no place for these: (workflow, version, labels) -> tasks,
        # oldest first
        self._unplaced: dict[Group, FairQueue[str]] = {}
        # how many of each group were sent to _ready for slots freed since the last
        # pass: the next freed slot wakes one more, not as many as are free
        self._woken: dict[Group, int] = {}
        self._starting: list[Draft] = []  # STARTED of the steps this pass starts
        self._start_gate: _StartGate | None = None
        self._flushes: set[asyncio.Task[None]] = set()
        self._closing: set[str] = set()  # spawned tasks whose cancel is being written
        self._ending: set[str] = set()  # tasks whose TASK_PAUSED/_COMPENSATING is being written
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._shell: dict[str, Workflow] = {}
        # Why shell tasks may not be submitted or run here now (None: they may).
        self.shell_refusal: Callable[[], str | None] = shell_refusal or _shell_off
        self._waiters: dict[str, list[asyncio.Future[TaskState]]] = {}
        self.problems: dict[str, str] = {}  # task -> why it cannot be scheduled
        self.decisions = 0  # tasks decided, and the time it took (the bench reads these)
        self.decide_seconds = 0.0
        # passes of the loop, and STARTED batches appended (the bench reads these too)
        self.passes = 0
        self.start_batches = 0
        self.steps = StepRunner(
            store=store,
            executor=self.executor,
            clock=self.clock,
            node_id=node_id,
            default_timeout_s=default_timeout_s,
            lease_valid=self._lease_valid,
            committed=self._committed,
            lapsed=self._lease_lapsed,
            ended=self._free_slot,
            compensator=(
                self.executor
                if isinstance(self.executor, InProcessExecutor)
                else InProcessExecutor(threads=min(concurrency, DEFAULT_CONCURRENCY))
            ),
            resolve=self._child_workflow,
            adopt_grace_s=adopt_grace_s,
            # the steps' retry budgets (retrypace.py); None: retries never paced
            pacer=RetryPacer(retry_budget),
        )
        self._intake = Intake(self)
        # the schedules' verbs and their firing: `engine.schedules.create(...)`, ...
        self.schedules = Schedules(self)
        # retention's sweep and the legal holds (docs/retention.md)
        self.retention = RetentionSweep(self, retention or RetentionOptions())
        # flow control: which starts may happen now, the order of those that wait
        self._flow_ports = ports = _FlowPorts(self)
        self.flow = FlowGate(ports)
        self.flow_submit = FlowSubmit(ports)
        self.limits = Limits(ports)  # `apollo11 limits show|set`
        store.add_observer(self._on_events)
        self.executor.watch_capacity(self.capacity_changed)

    # ------------------------------------------------------------ lifecycle

    @property
    def leading(self) -> bool:
        return self._leading

    async def start(self) -> None:
        """Begin scheduling (this node just became primary)."""
        if self._leading:
            return
        self._leading = True
        self._draining = False
        # a new term's budgets start empty: what an earlier term saw is not this one's
        self.steps.pacer.forget()
        self._loop_task = asyncio.create_task(self._loop(), name="apollo11-engine")
        # Every unfinished task needs a decision: steps STARTED by an earlier
        # term (or by this node before it crashed) are lost and get failed.
        self._dirty.update(t.task_id for t in self.store.state.tasks.values() if not t.quiescent)
        self._wake.set()
        self.schedules.start()
        self.retention.start()

    async def stop(self) -> None:
        """Stop starting steps and cancel the running ones without writing anything.

        Used when leadership is lost: the next leader finds those steps
        STARTED without an end and fails them as lost, by the same rules.
        """
        self._leading = False
        await self._timers.stop()
        await self.schedules.stop()
        await self.retention.stop()
        tasks = [
            *(t for steps in self._busy.values() for t in steps.values()),
            *self._flushes,
        ]
        if self._loop_task is not None:
            tasks.append(self._loop_task)
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._busy.clear()
        self._closing.clear()
        self._ending.clear()
        self._slots_used = 0
        self._queued = FairQueue()
        self._unplaced.clear()
        self._woken.clear()
        self._ready.clear()
        # what waited and what ran here is the log's again: a later start re-decides it
        self.flow = FlowGate(self._flow_ports)
        self._loop_task = None

    async def drain(self, within_s: float) -> bool:
        """Start nothing new; wait up to `within_s` for running steps. True if all finished."""
        self._draining = True
        self._idle.clear()
        if self._slots_used:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(within_s):
                    await self._idle.wait()
        return self._slots_used == 0

    def stop_starting(self) -> None:
        """Start nothing new and refuse new writes, without waiting (a switchover of a
        node whose steps run on workers: they outlive it)."""
        self._draining = True

    def resume(self) -> None:
        """Lead on after a drain that was called off (a switchover that did not happen)."""
        self._draining = False
        self._dirty.update(t.task_id for t in self.store.state.tasks.values() if not t.quiescent)
        self._wake.set()

    def check_leading(self) -> None:
        if not self._leading or self._draining:
            raise NotLeaderError("this node is not the primary (or is shutting down)")

    # ---------------------------------------------------------- observing

    def _on_events(self, events: Sequence[Event]) -> None:
        dirty = self._dirty
        busy = self._busy
        for e in events:
            if not e.task_id:
                if e.event_type is _LIMIT and "weights" in e.payload:
                    self._weights_changed()
                if e.event_type is _EVENT:
                    # durable tasks waiting on its key may resolve their wait now
                    waiting = self.store.state.waits.get(str(e.payload.get("key")))
                    if waiting:
                        dirty.update(waiting)
                continue
            if e.event_type in _CLOSING:
                self._relatives(e.task_id)
                if self._leading and self.store.state.schedules:
                    self.schedules.task_ended(e.task_id)
            # The STARTED of a step this engine is running changes nothing to decide:
            # the step is busy, and no other step waits on a start (a large share of
            # all decisions, docs/benchmarks.md). One it is not running (a former
            # primary's) is decided. Its outcome is decided once the runner ends and
            # frees the slot (`_spawn`'s done): decided now, its successor would find
            # the slot still taken and queue for one.
            if e.event_type in _OWN:
                running = busy.get(e.task_id)
                if running is not None and e.step_name in running:
                    continue
            dirty.add(e.task_id)
        if self._waiters:
            for task_id in {e.task_id for e in events} & self._waiters.keys():
                self._check_waiters(task_id)
        if self.store.state.occupancy.active:
            self.flow.on_events(events)
        self._wake.set()

    def _relatives(self, task_id: str) -> None:
        """A spawned task that finished wakes its parent's wait; a parent cancelled or
        returned closes its children (decide applies their policy); a traced task that
        finished has its span emitted."""
        task = self.store.state.tasks.get(task_id)
        if task is None:
            return
        if task.trace is not None and task.quiescent and self._leading:
            _trace_ended(task)  # the event that finished it: once, by the primary
        if task.parent is not None and task.quiescent:
            self._dirty.add(str(task.parent["task_id"]))
        d = task.durable
        if d is not None and (task.cancelled is not None or task.status is TaskStatus.SUCCEEDED):
            self._dirty.update(child for child, _ in waits.spawned(d.checkpoints))

    def _check_waiters(self, task_id: str) -> None:
        if task_id not in self._waiters:
            return
        task = self.store.state.peek(task_id)
        if task is not None and task.quiescent and task_id not in self._busy:
            for fut in self._waiters.pop(task_id):
                if not fut.done():
                    fut.set_result(task)

    def is_busy(self, task_id: str, step: str) -> bool:
        running = self._busy.get(task_id)
        return running is not None and step in running

    async def wait(self, task_id: str) -> TaskState:
        """Wait until a task is finished and nothing of it is running (use asyncio.timeout)."""
        task = self.store.state.peek(task_id)
        if task is None:
            raise NotFoundError(self.store.state.not_found(task_id))
        if task.quiescent:
            return task
        fut: asyncio.Future[TaskState] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(task_id, []).append(fut)
        return await fut

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self.store.log.failure is not None:
                # A failed log takes no event: deciding now would only spin on appends
                # that fail (each lost step written again and again, and counted). The
                # node steps down within moments and stops this engine.
                continue
            t0 = time.perf_counter()
            self.passes += 1
            flow = self.store.state.occupancy.active
            if flow:
                free = min(self.concurrency - self._slots_used, self.executor.free_slots())
                self.flow.release(self.clock.now(), free)  # into _ready: decided first
            # retries whose time has come start with this pass's, not in one of their own
            due = self._timers.take_due(self.clock.now())
            if due:
                self._mark_woken(due)
            dirty, self._dirty = self._dirty, set()
            # Tasks that waited for a slot go first, oldest first: they get the slots
            # just freed. Otherwise a task made dirty by its own events could take the
            # slot, and the waiting task, finding none, would queue again at the back
            # (many more decisions per task when slots are short, docs/benchmarks.md).
            ready, self._ready = self._ready, []
            self._woken.clear()
            dirty.difference_update(ready)
            for task_id in itertools.chain(ready, dirty):
                try:
                    self._decide(task_id)
                except Exception:  # a bug in acting on one task must not stop the others
                    log.exception("scheduling task %s failed", task_id)
            if flow:
                self.flow.pass_ended()
            spent = time.perf_counter() - t0
            self.decisions += len(ready) + len(dirty)
            del ready, dirty  # not held while the loop waits (a restart's pass names every task)
            # A task taken from the queue may not have used its slot (cancelled since,
            # say): hand what is still free to the next ones.
            self._refill_ready()
            if self._ready:
                self._wake.set()
            self.decide_seconds += spent
            metrics.SCHEDULER_LOOP_SECONDS.observe(spent)

    # ----------------------------------------------------------- deciding

    def workflow_for(self, task: TaskState) -> Workflow | None:
        if task.workflow == SHELL_WORKFLOW:
            wf = self._shell.get(task.task_id)
            if wf is None:
                wf = self._shell[task.task_id] = shell_workflow(task.input)
            return wf
        return self.registry.get(task.workflow, task.version)

    def _resolve(self, task: TaskState) -> Workflow | NoWorkflow:
        """The workflow a task runs here, or why there is none."""
        if task.workflow == SHELL_WORKFLOW and (why := self.shell_refusal()):
            return NoWorkflow(why)  # waits, never runs, until a node that allows it leads
        try:
            wf = self.workflow_for(task)
        except ApolloError as e:
            return NoWorkflow(f"its shell workflow is invalid: {e}")
        if wf is None:
            return NoWorkflow(f"workflow {task.workflow!r} v{task.version} is not loaded here")
        return wf

    def _decide(self, task_id: str) -> None:
        if not self._leading:
            return
        task = self.store.state.tasks.get(task_id)
        if task is None:
            return
        if task.quiescent:
            self._shell.pop(task_id, None)
            self.problems.pop(task_id, None)
            if task.flow is not None:
                self.flow.forget(task_id)
            return
        wf = self._resolve(task)
        now = self.clock.now()
        actions = decide(task, wf, self._busy.get(task_id, _NOTHING), now, self.store.state)
        self._act(task, wf, actions, now)

    def _act(
        self, task: TaskState, wf: Workflow | NoWorkflow, actions: list[Action], now: float
    ) -> None:
        """Carry out one decision's actions, in order."""
        task_id = task.task_id
        stuck = False
        for a in actions:
            match a:
                case StartAttempt():
                    assert isinstance(wf, Workflow)
                    if not self._start_step(task, wf, wf.steps[a.step], a.attempt):
                        stuck = True  # waits for a worker: the problem says why
                case Adopt():
                    assert isinstance(wf, Workflow)
                    if self._draining:
                        continue  # stopping: the next primary adopts it
                    key = (task_id, a.step)
                    self._slots_used += 1  # freed by the runner, like an attempt's
                    self._spawn(
                        key,
                        self.steps.adopt(task_id, a.step, wf.steps[a.step], a.attempt),
                        f"step {key}",
                    )
                    if task.cancelled is not None or task.exhausted is not None:
                        # decided again once it is followed: the cancel reaches the worker
                        self._dirty.add(task_id)
                        self._wake.set()
                case WakeAt():
                    self._timers.arm((task_id, a.step), a.at, window_s=_window(task, a.step))
                case CancelAttempt():
                    run = self._busy.get(task_id, {}).get(a.step)
                    self.steps.cancel((task_id, a.step), a.reason, run)
                case FailLost():
                    assert isinstance(wf, Workflow)
                    lost = lost_payload(a)
                    # a herd lost with the last primary is paced like any herd
                    self.steps.pace_loss(task, a.step, wf.steps[a.step].retry, lost)
                    self._spawn(
                        (task_id, a.step),
                        self.steps.fail(task_id, a.step, a.attempt, lost),
                        f"lost {(task_id, a.step)}",
                    )
                    metrics.STEP_OUTCOMES.labels(task.workflow, a.step, "lost").inc()
                    metrics.STEP_FAILURE_CAUSES.labels(task.workflow, a.step, "lost").inc()
                case Compensate():
                    assert isinstance(wf, Workflow)
                    key = (task_id, a.step)
                    self._spawn(
                        key,
                        self.steps.compensate(task_id, a.step, wf.steps[a.step], resume=a.resume),
                        f"compensate {key}",
                    )
                case CancelTask():
                    if task_id not in self._closing:
                        self._closing.add(task_id)
                        closing = asyncio.ensure_future(self._close(task_id, a))
                        self._flushes.add(closing)
                        closing.add_done_callback(self._flushes.discard)
                case PauseTask() | CompensateTask():
                    if task_id not in self._ending:
                        self._ending.add(task_id)
                        ending = asyncio.ensure_future(self._record_end(task.workflow, task_id, a))
                        self._flushes.add(ending)
                        ending.add_done_callback(self._flushes.discard)
                case Stuck():
                    stuck = True
                    self._problem(task_id, a.reason)
                case _:
                    assert_never(a)
        if not stuck:
            self.problems.pop(task_id, None)

    def _woken_up(self, keys: list[Hashable]) -> None:
        """Wake-ups that came due: decide their tasks again (all in the next pass).

        A step's wake-up (a retry's backoff over, a wait's deadline) that comes while
        every slot is taken waits for a slot undecided: its decision could only
        start an attempt, and `_start_step` would queue it for a slot, as here; it is
        decided when it gets one (one decision, not two; a retry under a backlog,
        docs/bench-history/retries.md). Anything else that changed it is an event,
        which decides it anyway. Flow control's wake-ups are always decided."""
        self._mark_woken(keys)
        self._wake.set()

    def _mark_woken(self, keys: list[Hashable]) -> None:
        """`_woken_up` without waking the loop: a pass about to run took them."""
        full = self._slots_used >= self.concurrency and not self._draining
        tasks = self.store.state.tasks
        queued = self._queued
        for k in keys:
            if not isinstance(k, tuple):
                continue
            task_id = k[0]
            if full and k[1] != _FLOW_TIMER and task_id not in self._dirty:
                task = tasks.get(task_id)
                if task is not None and not task.quiescent:
                    if task_id not in queued:
                        self._enqueue(queued, task)
                    continue
            self._dirty.add(task_id)

    async def _close(self, task_id: str, a: CancelTask) -> None:
        """Cancel a spawned task whose parent closed (its TASK_CANCELLED decides it again:
        its running steps are cancelled, its compensations follow, its own children)."""
        try:
            await self._intake.close_child(task_id, operator=a.operator, reason=a.reason)
        except ApolloError as e:
            log.warning("task %s: cannot cancel it with its parent: %s", task_id, e)
            self._decide_again(task_id)
        finally:
            self._closing.discard(task_id)

    async def _record_end(self, workflow: str, task_id: str, a: PauseTask | CompensateTask) -> None:
        """Record what a step's retries running out leads to (engine/exhaustion.py)."""
        try:
            event = await exhaustion.record(self.store, task_id, a)
            if event is not None and await self._committed(event.event_id):
                if isinstance(a, PauseTask):
                    metrics.TASKS_PAUSED.labels(workflow).inc()
                    log.warning(
                        "task %s paused: step %s failed for good (on_exhausted='pause'); "
                        "`apollo11 retry %s` resumes it",
                        task_id,
                        a.step,
                        task_id,
                    )
                else:
                    log.info(
                        "task %s: step %s failed for good, compensating %s",
                        task_id,
                        a.step,
                        ", ".join(a.compensate) or "nothing",
                    )
        except ApolloError as e:
            log.warning("task %s: cannot record what follows its failure: %s", task_id, e)
            self._decide_again(task_id)
        finally:
            self._ending.discard(task_id)

    def _decide_again(self, task_id: str) -> None:
        """A record a decision asked for (a pause, a compensation, a child's cancel) was
        refused by the log: it is still owed, so the task is decided again (a new try)
        after a pause; not never (nothing else may touch the task until a failover), and
        not at once (a log that refuses appends would refuse a tight loop too). Leadership
        lost is no refusal: the next primary decides it."""
        self._timers.arm((task_id, _AGAIN_TIMER), self.clock.now() + AGAIN_S)

    def _child_workflow(self, workflow: str, input: Any, version: int | None) -> Workflow:
        return self._intake.workflow(workflow, input, version)

    def _problem(self, task_id: str, why: str) -> None:
        if self.problems.get(task_id) != why:
            log.warning("task %s cannot be scheduled: %s", task_id, why)
        self.problems[task_id] = why

    # ---------------------------------------------------------- running

    def _spawn(self, key: Key, coro: Awaitable[None], name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        task_id, step = key
        running = self._busy.get(task_id)
        if running is None:
            running = self._busy[task_id] = {}
        running[step] = task

        def done(t: asyncio.Task[None]) -> None:
            now_running = self._busy.get(task_id)
            if now_running is not None and now_running.get(step) is t:
                del now_running[step]
                if not now_running:
                    del self._busy[task_id]
                self.flow.ended(task_id, step)
            self._dirty.add(task_id)
            self._wake.set()
            self._check_waiters(task_id)

        task.add_done_callback(done)

    def _start_step(self, task: TaskState, wf: Workflow, spec: Step, attempt: int) -> bool:
        """Start an attempt, or queue the task for a slot, or hold it under flow control.
        False: the executor has no place for it (the task's problem says why)."""
        if self._draining:
            return True
        task_id = task.task_id
        where = None
        placed = True
        unplaced = False
        admitted: Admit | None = None
        if self._slots_used < self.concurrency:
            if task.flow is not None:
                decision = self.flow.check(task, wf, spec, self.clock.now())
                if isinstance(decision, NotYet):
                    self.flow.hold(task, decision, self.clock.now())  # released in turn
                    return True
                admitted = decision
            if self.executor.free_slots():
                # (every slot taken, the everyday case under a backlog: nothing to try)
                where = self.executor.place(
                    task_id, spec.name, task.workflow, task.version, spec.labels
                )
            if where is None:
                unplaced = True
                why = self.executor.unplaced(task.workflow, task.version, spec.labels)
                if why is not None:  # None: only busy, the everyday case: no problem
                    placed = False
                    self._problem(task_id, f"step {spec.name} waits for a worker: {why}")
        if where is None:
            if unplaced:
                # Decided again when a slot it can use frees or a worker connects, not
                # at every pass: nothing else can change the executor's answer.
                group = (task.workflow, task.version, tuple(sorted(spec.labels.items())))
                waiting = self._unplaced.get(group)
                if waiting is None:
                    waiting = self._unplaced[group] = self._fair_queue()
                if task_id not in waiting:
                    self._enqueue(waiting, task)
            elif task_id not in self._queued:
                self._enqueue(self._queued, task)
            return placed
        self._slots_used += 1
        gate = self._start_gate
        if gate is None:
            # The first start of this pass: the STARTED events of every step this
            # pass starts are appended together, and committed with one wait.
            gate = self._start_gate = _StartGate()
            asyncio.get_running_loop().call_soon(self._flush_starts)
        # The STARTED names the worker: a primary that takes over adopts the attempt
        # instead of failing it as lost.
        payload: dict[str, Any] | None = {"worker": where} if where else None
        if admitted is not None:
            if admitted.tats:  # the rates' new arrival times: the decision is the record
                payload = {**(payload or {}), "tat": dict(admitted.tats)}
            self.flow.began(task, spec, admitted)
        self._starting.append(Draft(EventType.STEP_STARTED, task_id, spec.name, payload, attempt))
        key = (task_id, spec.name)
        self._spawn(
            key, self.steps.run(task_id, spec.name, spec, attempt, gate.waiter()), f"step {key}"
        )
        return True

    def _flush_starts(self) -> None:
        gate, drafts = self._start_gate, self._starting
        self._start_gate, self._starting = None, []
        assert gate is not None
        self.start_batches += 1
        task = asyncio.ensure_future(self._commit_starts(drafts, gate))
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def _commit_starts(self, drafts: list[Draft], gate: _StartGate) -> None:
        """Append STARTED for a pass's steps; the gate says whether they may run."""
        try:
            if not self._lease_valid():
                # Never begin an attempt after the lease lapsed, nor record one.
                self._lease_lapsed(f"{len(drafts)} step(s) not started")
                gate.set_result(False)
                return
            events = await self.store.log.append_many(drafts)
            ok = await self._committed(events[-1].event_id)
        except asyncio.CancelledError:
            gate.cancel()
            raise
        except Exception as e:  # each step waiting on the gate reports it
            gate.set_exception(e)
            return
        gate.set_result(ok)

    def _lease_lapsed(self, what: str) -> None:
        if self._leading:
            log.warning("%s: this node is no longer sure it holds the lease", what)
        self._leading = False  # decide nothing more; the node demotes us

    def _free_slot(self) -> None:
        self._slots_used -= 1
        if not self._slots_used:
            self._idle.set()
        if self._unplaced:
            self._retry_unplaced()
        self._refill_ready()
        self._wake.set()

    def capacity_changed(self) -> None:
        """Slots became free elsewhere (a worker connected): waiting tasks may start."""
        self._retry_unplaced()
        self._refill_ready()
        if self._ready:
            self._wake.set()

    def _retry_unplaced(self) -> None:
        """Decide again first, oldest first, as many tasks the executor had no place for
        as it now has slots for, group by group (workflow, version, labels).

        Slots freed together (a worker's batch of results) call this once each: the
        tasks already woken for the earlier ones count, or each call would wake as
        many as are free, and all but one per slot would find none and queue again
        (1 + 2 + ... + n decisions for n slots; docs/benchmarks.md)."""
        now_ms = int(self.clock.now() * 1000)
        for group in list(self._unplaced):
            order = self._unplaced[group]
            woken = self._woken.get(group, 0)
            labels = dict(group[2]) if group[2] else _NO_LABELS
            n = self.executor.free_for(group[0], group[1], labels) - woken
            if n <= 0:
                continue
            moved = 0
            while moved < n:
                task_id = order.pop(now_ms)
                if task_id is None:
                    break
                self._ready.append(task_id)
                moved += 1
            self._woken[group] = woken + moved
            if not len(order):
                del self._unplaced[group]
        self._wake.set()

    def _refill_ready(self) -> None:
        """Move waiting tasks, oldest first, to be decided first: one per free slot."""
        if not len(self._queued):  # the everyday case with workers: they wait in `_unplaced`
            return
        free = min(self.concurrency - self._slots_used, self.executor.free_slots())
        now_ms = int(self.clock.now() * 1000)
        while len(self._ready) < free:
            task_id = self._queued.pop(now_ms)
            if task_id is None:
                break
            self._ready.append(task_id)

    def _weights_changed(self) -> None:
        weights = self.store.state.occupancy.weights
        self._queued.set_weights(weights)
        for q in self._unplaced.values():
            q.set_weights(weights)

    def _fair_queue(self) -> FairQueue[str]:
        q: FairQueue[str] = FairQueue()
        if self.store.state.occupancy.weights:
            q.set_weights(self.store.state.occupancy.weights)
        return q

    def _enqueue(self, queue: FairQueue[str], task: TaskState) -> None:
        """Wait for a slot, ranked by the task's priority and fairness value."""
        f = task.flow
        if f is None:
            queue.push(task.task_id, at_ms=int(self.clock.now() * 1000))
        else:
            queue.push(
                task.task_id,
                priority=int(f.get("priority", DEFAULT_PRIORITY)),
                fair=str(f.get("fair", "")),
                at_ms=int(self.clock.now() * 1000),
            )

    async def _committed(self, event_id: int) -> bool:
        """Wait for a commit; False when leadership is lost on the way."""
        while True:
            try:
                await self._commit(event_id)
                return True
            except LeaseLostError:
                self._leading = False  # decide nothing more; the node demotes us
                return False
            except OutcomeUnknownError as e:
                if not self._leading:
                    return False
                log.warning("waiting for replication before running a step: %s", e)

    async def wait_commit(self, event_id: int) -> None:
        """Until a write up to `event_id` may be acknowledged (what `commit` says)."""
        await self._commit(event_id)

    def compensation_backlog(self) -> int:
        return sum(
            1
            for steps in self._busy.values()
            for t in steps.values()
            if t.get_name().startswith("compensate")
        )

    def running(self) -> int:
        return self._slots_used

    def in_flight(self) -> int:
        """How many things run here for tasks now: attempts, compensations, lost steps
        being recorded. The testing kit skips time only when each of them waits on the
        clock (scheduler/testing/environment.py)."""
        return sum(len(steps) for steps in self._busy.values())

    def dispatching(self) -> bool:
        """Is work on its way to a STARTED: an event appended and not yet durable (a
        submission's, whose application makes its task dirty), or anything `settled`
        names? Bulk reads give way to it (nodeview/giveway.py)."""
        return self.store.log.writing or not self.settled()

    def settled(self) -> bool:
        """Nothing left to decide or to write now: no task to decide again, no pass
        pending, no STARTED or child's cancel being written, no schedule's firing.
        With `in_flight()`, what says that every task waits (for an event, a timer, a
        slot)."""
        return not (
            self._dirty
            or self._ready
            or self._wake.is_set()
            or self._starting
            or self._start_gate is not None
            or self._flushes
            or not self.schedules.settled()
        )

    # ---------------------------------------------------------- requests

    async def submit(
        self,
        workflow: str,
        input: Any = None,
        *,
        idempotency_key: str | None = None,
        version: int | None = None,
        trace: dict[str, str] | None = None,
        priority: int | None = None,
    ) -> Submitted:
        """Submit a task; the same idempotency key (within its TTL) returns the same task.
        `trace`: its trace context (tracing.task_trace); `priority`: 1 (first) to 5,
        default 3 (docs/flow-control.md)."""
        return await self._intake.submit(
            workflow,
            input,
            idempotency_key=idempotency_key,
            version=version,
            trace=trace,
            priority=priority,
        )

    async def submit_many(self, items: Sequence[SubmitItem]) -> list[Submitted]:
        """Submit many tasks with one append (one fsync) and one replication wait.

        All or nothing: an unknown workflow or a bad key anywhere refuses the
        whole batch (the error names the item) and writes nothing. Idempotency
        keys work as for `submit`, within the batch too: a key given twice
        creates one task.
        """
        return await self._intake.submit_many(items)

    async def send_event(
        self,
        key: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
        sender: str | None = None,
    ) -> EventSent:
        """Record an external event for durable tasks' waits (docs/durable.md); the same
        idempotency key records it once."""
        return await self._intake.send_event(
            key, payload, idempotency_key=idempotency_key, sender=sender
        )

    async def retry_step(
        self, task_id: str, step: str, *, operator: str, reason: str, display: str | None = None
    ) -> Event:
        """Run a failed (or compensated) step again, with a fresh retry budget."""
        return await self._intake.retry_step(
            task_id, step, operator=operator, reason=reason, display=display
        )

    async def skip_step(
        self, task_id: str, step: str, *, operator: str, reason: str, display: str | None = None
    ) -> Event:
        """Mark a step as done without running it; its dependents may run."""
        return await self._intake.skip_step(
            task_id, step, operator=operator, reason=reason, display=display
        )

    async def cancel_task(
        self, task_id: str, *, operator: str, reason: str, display: str | None = None
    ) -> Event:
        """Cancel a task: running steps are cancelled, compensation follows by policy."""
        return await self._intake.cancel_task(
            task_id, operator=operator, reason=reason, display=display
        )

    async def redact_task(
        self, task_id: str, *, operator: str, reason: str, display: str | None = None
    ) -> Event:
        """Remove a finished task's input and outputs: a TASK_REDACTED event."""
        return await self._intake.redact_task(
            task_id, operator=operator, reason=reason, display=display
        )

    def check_submission(self, workflow: str, input: Any) -> Workflow:
        """The workflow a submission names, or the error that refuses it."""
        return self._intake.workflow(workflow, input, None)


def _trace_ended(task: TaskState) -> None:
    """The finished task's span (tracing.py): from its submission to its last event."""
    failed = task.status.value in ("FAILED", "NONDETERMINISTIC", "CANCELLED", "COMPENSATED")
    tracing.task_ended(
        task.trace,
        name=f"task {task.workflow}",
        start_ms=task.submitted_ms,
        end_ms=task.updated_ms,
        attributes={
            "apollo11.task_id": task.task_id,
            "apollo11.workflow": task.workflow,
            "apollo11.version": task.version,
            "apollo11.state": task.status.value,
        },
        error=task.status.value if failed else None,
    )


async def _durable_is_enough(event_id: int) -> None:
    return None


def _shell_off() -> str:
    return SHELL_DISABLED


class _StartGate:
    """The commit of one pass's STARTED events, as each step it starts awaits it.

    One future per step: cancelling one step spares the rest, without a shield
    around a shared future (a shield costs every step a turn of the loop more
    before its attempt begins)."""

    __slots__ = ("_waiters",)

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[bool]] = []

    def waiter(self) -> asyncio.Future[bool]:
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        return fut

    def set_result(self, ok: bool) -> None:
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(ok)

    def set_exception(self, e: Exception) -> None:
        for fut in self._waiters:
            if not fut.done():
                fut.set_exception(e)

    def cancel(self) -> None:
        for fut in self._waiters:
            fut.cancel()


class _FlowPorts:
    """What flow control needs of the engine: the gate (engine/flow.py), submissions
    (engine/flowsubmit.py) and runtime limits (engine/limits.py), each a `Host`."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    @property
    def store(self) -> Store:
        return self._engine.store

    @property
    def registry(self) -> Registry:
        return self._engine.registry

    @property
    def state(self) -> State:
        return self._engine.store.state

    def now_ms(self) -> int:
        return int(self._engine.clock.now() * 1000)

    def runs(self, task_id: str) -> bool:
        return task_id in self._engine._busy

    def release(self, task_ids: Iterable[str]) -> None:
        self._engine._ready.extend(task_ids)

    def wake_at(self, task_id: str, at_s: float) -> None:
        self._engine._timers.arm((task_id, _FLOW_TIMER), at_s)

    def max_of(self, workflow: Workflow, limit_id: str) -> int:
        return self._engine.flow.max_for(workflow, limit_id)

    def holds_back(self, task_id: str, on: bool) -> None:
        self._engine.flow.freeze(task_id, on)

    async def cancel(self, task_id: str, reason: str) -> None:
        await self._engine.cancel_task(task_id, operator=CANCELLER, reason=reason)

    def declared(self) -> Mapping[str, Concurrency | Rate]:
        out: dict[str, Concurrency | Rate] = {}
        for wf in self._engine.registry.all():  # by name, then version: the newest wins
            out.update(declared_limits(wf))
        return out

    def running(self, limit_id: str, value: str) -> int:
        return self._engine.flow.count((limit_id, value))

    def queued(self) -> Mapping[tuple[str, str], int]:
        gate = self._engine.flow
        return {k: gate.queued(k) for k in gate.waiting_keys()}

    def check_leading(self) -> None:
        self._engine.check_leading()

    async def wait_commit(self, event_id: int) -> None:
        await self._engine.wait_commit(event_id)


_FLOW_TIMER = "\x00flow"  # a timer key's step part that no step can be named
_AGAIN_TIMER = "\x00again"  # the same, for a record the log refused (`_decide_again`)
AGAIN_S = 1.0


def _window(task: TaskState, step: str) -> float:
    """The window a step's wake-up is coalesced in: a retry's backoff, RETRY_WINDOW_S;
    a durable main's wait (a sleep, an event's deadline) fires at its own time."""
    st = task.steps.get(step)
    return 0.0 if st is None or st.status is StepStatus.WAITING else RETRY_WINDOW_S
