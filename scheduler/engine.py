"""The workflow engine: decides, from the replayed state, what runs next.

It runs on the primary. Every transition is written to the log before it is
acted on (STARTED is durable before a step runs; SUCCEEDED or FAILED after),
so after a crash or a failover the next leader resumes from the log and a
step that SUCCEEDED never runs again.

The loop is event-driven and incremental: the store tells the engine which
tasks a durable batch touched, and only those tasks are decided again. A
decision reads one task's in-memory state, so its cost does not grow with
the number of finished tasks (which live in the archive, untouched).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import itertools
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from scheduler import metrics
from scheduler.clock import Clock
from scheduler.errors import (
    ApolloError,
    FailedPreconditionError,
    InvalidArgumentError,
    InvalidEventError,
    LeaseLostError,
    NotFoundError,
    NotLeaderError,
    OutcomeUnknownError,
    WorkflowDefinitionError,
)
from scheduler.log.eventlog import Draft
from scheduler.log.record import Event, EventType
from scheduler.replay import DONE, StepState, StepStatus, TaskState, TaskStatus
from scheduler.shell import SHELL_DISABLED, SHELL_WORKFLOW, shell_workflow
from scheduler.store import Store
from scheduler.workflow import (
    AUTO,
    FencingToken,
    Registry,
    Step,
    StepContext,
    StepError,
    StepFn,
    Workflow,
)

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (task_id, step)
ERROR_TEXT_MAX = 1024  # our own error strings are cut (visibly) to stay under the payload cap
DEFAULT_IDEMPOTENCY_TTL_S = 24 * 3600.0
AUTO_REFRESH_SAMPLES = 10  # an `auto` timeout follows new durations within this many


def _always() -> bool:
    return True


class Executor(Protocol):
    """Where step functions run. In-process today; remote workers can plug in here."""

    async def run(
        self, fn: StepFn, ctx: StepContext, *, may_begin: Callable[[], bool] = _always
    ) -> Any:
        """Run `fn`. `may_begin` is asked immediately before `fn` begins (in its thread,
        for a plain function); when it says no, `fn` never begins and LeaseLostError
        is raised: this node is no longer sure it holds the lease."""

    def settle(self, task_id: str, step: str) -> Awaitable[None] | None:
        """Something to await until nothing of this step is still executing (after a
        timeout or a cancel the engine waits on it before the step may run again), or
        None when nothing is (the common case, decided without a coroutine)."""


class InProcessExecutor:
    """Coroutines on the loop; plain functions on a pool of threads of our own.

    A thread cannot be interrupted: when a timeout or a cancel gives up on one,
    it is remembered, and `settle` waits for it to end, so a retry never runs
    beside an attempt that is still going.
    """

    def __init__(self, threads: int = 32) -> None:
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="apollo11-step")
        self._lingering: dict[tuple[str, str], concurrent.futures.Future[Any]] = {}
        self._is_async: dict[StepFn, bool] = {}  # inspect's answer costs ~2 us a call

    async def run(
        self, fn: StepFn, ctx: StepContext, *, may_begin: Callable[[], bool] = _always
    ) -> Any:
        is_async = self._is_async.get(fn)
        if is_async is None:
            is_async = self._is_async[fn] = inspect.iscoroutinefunction(fn)
        if is_async:
            _begin(may_begin, ctx)  # nothing awaits between this check and the step's start
            return await fn(ctx)
        # Checked in the thread: a thread of the pool may begin it well after this line.
        cf = self._pool.submit(_begun, may_begin, fn, ctx)
        try:
            result = await asyncio.wrap_future(cf)
        except asyncio.CancelledError:
            if not cf.done():
                self._lingering[(ctx.task_id, ctx.step)] = cf
            raise
        if inspect.isawaitable(result):
            return await result
        return result

    def settle(self, task_id: str, step: str) -> Awaitable[None] | None:
        cf = self._lingering.pop((task_id, step), None)
        if cf is None or cf.done():
            return None
        log.warning("step %s/%s: waiting for its abandoned thread to end", task_id, step)
        return _quietly(asyncio.wrap_future(cf))


def _begin(may_begin: Callable[[], bool], ctx: StepContext) -> None:
    if not may_begin():
        raise LeaseLostError(
            f"attempt {ctx.attempt} of {ctx.task_id}/{ctx.step} not begun: this node is no "
            f"longer sure it holds the lease"
        )


def _begun(may_begin: Callable[[], bool], fn: StepFn, ctx: StepContext) -> Any:
    _begin(may_begin, ctx)
    return fn(ctx)


async def _quietly(fut: Awaitable[Any]) -> None:
    with contextlib.suppress(BaseException):
        await fut


@dataclass(frozen=True, slots=True)
class Submitted:
    task_id: str
    created: bool  # False when an idempotency key returned an existing task
    event_id: int = 0  # the TASK_SUBMITTED event, when created


def _cut(text: str) -> str:
    return text if len(text) <= ERROR_TEXT_MAX else text[: ERROR_TEXT_MAX - 14] + " …(truncated)"


class SubmitItem(NamedTuple):
    """One task of a `submit_many` batch."""

    workflow: str
    input: Any = None
    idempotency_key: str | None = None
    version: int | None = None


def _submission(wf: Workflow, input: Any, key: str | None) -> dict[str, Any]:
    """The payload of a TASK_SUBMITTED event."""
    payload: dict[str, Any] = {
        "workflow": wf.name,
        "version": wf.version,
        "input": input,
        "steps": wf.deps,
    }
    if key is not None:
        payload["idempotency_key"] = key
    return payload


def _check_key(key: str) -> None:
    if not key or len(key) > 256:
        raise InvalidArgumentError("idempotency_key must be 1 to 256 characters")


_STARTED = EventType.STEP_STARTED


_ids = random.Random()  # seeded from os.urandom: nodes and restarts differ


def new_task_id() -> str:
    """Sortable by submission time, unique without coordination (40 random bits per
    millisecond; not a system call per task, as os.urandom was: 2% of a busy primary)."""
    return f"{time.time_ns() // 1_000_000:012x}-{_ids.getrandbits(40):010x}"


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
        concurrency: int = 32,
        default_timeout_s: float = 3600.0,
        idempotency_ttl_s: float = DEFAULT_IDEMPOTENCY_TTL_S,
        commit: Callable[[int], Awaitable[None]] | None = None,
        shell_refusal: Callable[[], str | None] | None = None,
        lease_valid: Callable[[], bool] | None = None,
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
        self._busy: dict[Key, asyncio.Task[None]] = {}  # a step run, lost-write or compensation
        self._busy_tasks: dict[str, int] = {}  # task id -> how many of those it has
        self._timers: dict[Key, asyncio.Task[None]] = {}
        # why a running step was cancelled by us: the payload of its FAILED event
        self._cancel_why: dict[Key, dict[str, Any]] = {}
        self._slots_used = 0
        self._queued: deque[str] = deque()
        self._ready: list[str] = []  # left the queue for a freed slot; decided first
        self._queued_set: set[str] = set()
        self._timeouts: dict[Key, tuple[int, float]] = {}  # (workflow, step) -> (samples, s)
        self._starting: list[Draft] = []  # STARTED of the steps this pass starts
        self._start_gate: asyncio.Future[bool] | None = None
        self._flushes: set[asyncio.Task[None]] = set()
        self._metric_children: dict[Key, tuple[Any, Any, Any, Any]] = {}
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._inflight_keys: dict[str, asyncio.Future[Submitted]] = {}
        self._shell: dict[str, Workflow] = {}
        # Why shell tasks may not be submitted or run here now (None: they may).
        self.shell_refusal: Callable[[], str | None] = shell_refusal or _shell_off
        self._waiters: dict[str, list[asyncio.Future[TaskState]]] = {}
        self.problems: dict[str, str] = {}  # task -> why it cannot be scheduled
        self.decisions = 0  # tasks decided, and the time it took (the bench reads these)
        self.decide_seconds = 0.0
        store.add_observer(self._on_events)

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
        self._loop_task = asyncio.create_task(self._loop(), name="apollo11-engine")
        # Every unfinished task needs a decision: steps STARTED by an earlier
        # term (or by this node before it crashed) are lost and get failed.
        self._dirty.update(t.task_id for t in self.store.state.tasks.values() if not t.quiescent)
        self._wake.set()

    async def stop(self) -> None:
        """Stop starting steps and cancel the running ones without writing anything.

        Used when leadership is lost: the next leader finds those steps
        STARTED without an end and fails them as lost, by the same rules.
        """
        self._leading = False
        tasks = [*self._busy.values(), *self._timers.values(), *self._flushes]
        if self._loop_task is not None:
            tasks.append(self._loop_task)
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._busy.clear()
        self._busy_tasks.clear()
        self._timers.clear()
        self._slots_used = 0
        self._queued.clear()
        self._queued_set.clear()
        self._ready.clear()
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

    def _check_leading(self) -> None:
        if not self._leading or self._draining:
            raise NotLeaderError("this node is not the primary (or is shutting down)")

    # ---------------------------------------------------------- observing

    def _on_events(self, events: Sequence[Event]) -> None:
        dirty = self._dirty
        busy = self._busy
        for e in events:
            if not e.task_id:
                continue
            # The STARTED of a step this engine is running changes nothing to decide:
            # the step is busy, and no other step waits on a start (a third of all
            # decisions). One it is not running (a former primary's) is decided.
            if e.event_type is _STARTED and (e.task_id, e.step_name) in busy:
                continue
            dirty.add(e.task_id)
        if self._waiters:
            for task_id in {e.task_id for e in events} & self._waiters.keys():
                self._check_waiters(task_id)
        self._wake.set()

    def _check_waiters(self, task_id: str) -> None:
        if task_id not in self._waiters:
            return
        task = self.store.state.peek(task_id)
        if task is not None and task.quiescent and not self._busy_for(task_id):
            for fut in self._waiters.pop(task_id):
                if not fut.done():
                    fut.set_result(task)

    def _busy_for(self, task_id: str) -> bool:
        return task_id in self._busy_tasks

    async def wait(self, task_id: str) -> TaskState:
        """Wait until a task is finished and nothing of it is running (use asyncio.timeout)."""
        task = self.store.state.peek(task_id)
        if task is None:
            raise NotFoundError(f"no task {task_id!r}")
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
            dirty, self._dirty = self._dirty, set()
            # Tasks that waited for a slot go first, oldest first: they get the slots
            # just freed. Otherwise a task made dirty by its own events could take the
            # slot, and the waiting task, finding none, would queue again at the back
            # (measured: 31-59 decisions per five-step task at 512 slots, 16 with
            # slots to spare).
            ready, self._ready = self._ready, []
            dirty.difference_update(ready)
            for task_id in itertools.chain(ready, dirty):
                try:
                    self._decide(task_id)
                except Exception:  # a bug in one task's decision must not stop the others
                    log.exception("scheduling task %s failed", task_id)
            spent = time.perf_counter() - t0
            self.decisions += len(ready) + len(dirty)
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

    def _decide(self, task_id: str) -> None:
        if not self._leading:
            return
        task = self.store.state.tasks.get(task_id)
        if task is None:
            return
        if task.quiescent:
            self._shell.pop(task_id, None)
            self.problems.pop(task_id, None)
            return
        if task.anomalies:
            self._problem(task, f"has anomalies, an operator must look: {task.anomalies[0]}")
            return
        if task.workflow == SHELL_WORKFLOW and (why := self.shell_refusal()):
            self._problem(task, why)  # waits, never runs, until a node that allows it leads
            return
        try:
            wf = self.workflow_for(task)
        except ApolloError as e:
            self._problem(task, f"its shell workflow is invalid: {e}")
            return
        if wf is None:
            self._problem(task, f"workflow {task.workflow!r} v{task.version} is not loaded here")
            return
        self.problems.pop(task_id, None)
        cancelled = task.cancelled is not None
        failed = task.failed_final > 0
        comp = self._needs_compensation(task, wf)
        deps = task.deps
        for name, step in task.steps.items():
            if step.status in DONE and name not in comp:
                continue  # finished (checked against the workflow when it started)
            key = (task_id, name)
            if key in self._busy:
                if cancelled and step.status is StepStatus.STARTED:
                    self._cancel_run(key, "cancelled by operator")
                continue
            spec = wf.steps.get(name)
            if spec is None:
                self._problem(task, f"step {name!r} is not in workflow {wf.name} v{wf.version}")
                return
            status = step.status
            if status is StepStatus.STARTED:
                self._write_lost(task, step, spec, final=cancelled)
            elif status is StepStatus.COMPENSATING:
                self._spawn_compensation(task, step, spec)
            elif name in comp:
                # Dependents that must be compensated go first (reverse topological order).
                if not self._blocked(task, wf, name, comp):
                    self._spawn_compensation(task, step, spec)
            elif cancelled or failed:
                continue  # nothing new starts in a task that is cancelled or has failed
            elif (
                (
                    status is StepStatus.PENDING
                    or (status in (StepStatus.FAILED, StepStatus.COMPENSATED) and not step.final)
                )
                and all(task.steps[d].status in DONE for d in deps[name])
                and self._due(task, step, spec)  # arms a timer when a retry is not due yet
            ):
                self._start_step(task, step, spec)

    def _needs_compensation(self, task: TaskState, wf: Workflow) -> set[str]:
        """Steps whose compensation is owed and not started yet.

        The log says what is owed (a failure of a non-idempotent step, or a
        cancel, records it), so the answer survives a failover and a task that
        still owes a compensation is never archived as finished.
        """
        out: set[str] = set()
        if not task.owed and not wf.compensating_steps:
            return out  # the common case, decided without looking at any step
        for name, step in task.steps.items():
            if step.status is StepStatus.COMPENSATING or step.status is StepStatus.COMPENSATED:
                continue
            if step.owed or (name in wf.compensating_steps and step.status is StepStatus.FAILED):
                out.add(name)
        return out

    def _blocked(self, task: TaskState, wf: Workflow, name: str, comp: set[str]) -> bool:
        """Must this step's compensation wait? Yes while any step downstream of it (not
        only a direct dependent) runs, is about to run, owes a compensation or is
        compensating: dependents are compensated first."""
        seen: set[str] = set()
        stack = list(wf.dependents.get(name, ()))
        while stack:
            d = stack.pop()
            if d in seen:
                continue
            seen.add(d)
            st = task.steps[d].status
            if (
                d in comp
                or st is StepStatus.STARTED
                or st is StepStatus.COMPENSATING
                or (task.task_id, d) in self._busy
            ):
                return True
            stack.extend(wf.dependents.get(d, ()))
        return False

    def _budget(self, step: StepState) -> tuple[int, int]:
        """(attempts that failed on their own, attempts lost to a dying node), counted
        since the last operator retry."""
        base_attempt = base_losses = 0
        if step.override and step.override.get("action") == "retry":
            base_attempt = int(step.override.get("attempt", 0))
            base_losses = int(step.override.get("losses", 0))
        losses = step.losses - base_losses
        return step.attempt - base_attempt - losses, losses

    def _attempts_used(self, step: StepState) -> int:
        return self._budget(step)[0]

    def _due(self, task: TaskState, step: StepState, spec: Step) -> bool:
        """Is a retry's backoff over? Times come from the log, so a new leader agrees."""
        if step.status is StepStatus.PENDING or step.finished_ms is None:
            return True
        delay = spec.retry.delay_s(self._attempts_used(step), f"{task.task_id}:{step.name}")
        due = step.finished_ms / 1000 + delay
        now = self.clock.now()
        if now >= due:
            return True
        key = (task.task_id, step.name)
        if key not in self._timers:
            self._timers[key] = asyncio.create_task(self._wake_at(key, task.task_id, due - now))
        return False

    async def _wake_at(self, key: Key, task_id: str, delay: float) -> None:
        try:
            await self.clock.sleep(delay)
        finally:
            self._timers.pop(key, None)
        self._dirty.add(task_id)
        self._wake.set()

    def _problem(self, task: TaskState, why: str) -> None:
        if self.problems.get(task.task_id) != why:
            log.warning("task %s cannot be scheduled: %s", task.task_id, why)
        self.problems[task.task_id] = why

    # ---------------------------------------------------------- running

    def _spawn(self, key: Key, coro: Awaitable[None], name: str) -> None:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._busy[key] = task
        busy = self._busy_tasks
        busy[key[0]] = busy.get(key[0], 0) + 1

        def done(t: asyncio.Task[None]) -> None:
            if self._busy.get(key) is t:
                del self._busy[key]
            n = busy.get(key[0], 0) - 1
            if n > 0:
                busy[key[0]] = n
            else:
                busy.pop(key[0], None)
            self._dirty.add(key[0])
            self._wake.set()
            self._check_waiters(key[0])

        task.add_done_callback(done)

    def _start_step(self, task: TaskState, step: StepState, spec: Step) -> None:
        if self._draining:
            return
        if self._slots_used >= self.concurrency:
            if task.task_id not in self._queued_set:
                self._queued.append(task.task_id)
                self._queued_set.add(task.task_id)
            return
        self._slots_used += 1
        attempt = step.attempt + 1
        key = (task.task_id, step.name)
        gate = self._start_gate
        if gate is None:
            # The first start of this pass: the STARTED events of every step this
            # pass starts are appended together, and committed with one wait.
            gate = self._start_gate = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(self._flush_starts)
        self._starting.append(Draft(EventType.STEP_STARTED, task.task_id, step.name, None, attempt))
        self._spawn(
            key, self._run_step(task.task_id, step.name, spec, attempt, gate), f"step {key}"
        )

    def _flush_starts(self) -> None:
        gate, drafts = self._start_gate, self._starting
        self._start_gate, self._starting = None, []
        assert gate is not None
        task = asyncio.ensure_future(self._commit_starts(drafts, gate))
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def _commit_starts(self, drafts: list[Draft], gate: asyncio.Future[bool]) -> None:
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
            if not gate.done():
                gate.set_exception(e)
                gate.exception()  # retrieved: no "never retrieved" warning if none waits
            return
        if not gate.done():
            gate.set_result(ok)

    def _lease_lapsed(self, what: str) -> None:
        if self._leading:
            log.warning("%s: this node is no longer sure it holds the lease", what)
        self._leading = False  # decide nothing more; the node demotes us

    def _free_slot(self) -> None:
        self._slots_used -= 1
        if not self._slots_used:
            self._idle.set()
        self._refill_ready()
        self._wake.set()

    def _refill_ready(self) -> None:
        """Move waiting tasks, oldest first, to be decided first: one per free slot."""
        free = self.concurrency - self._slots_used
        while self._queued and len(self._ready) < free:
            task_id = self._queued.popleft()
            self._queued_set.discard(task_id)
            self._ready.append(task_id)

    def _context(
        self, task: TaskState, name: str, attempt: int, wf_deps: Sequence[str]
    ) -> StepContext:
        return StepContext(
            task_id=task.task_id,
            step=name,
            attempt=attempt,
            input=task.input,
            results={d: task.steps[d].result for d in wf_deps},
            node_id=self.node_id,
            workflow=task.workflow,
            version=task.version,
            fencing_token=FencingToken(self.store.log.term, attempt),
        )

    async def _run_step(
        self, task_id: str, name: str, spec: Step, attempt: int, started: asyncio.Future[bool]
    ) -> None:
        key = (task_id, name)
        logw = self.store.log
        try:
            # A step runs only once its STARTED is committed: a new primary that does
            # not know it started could run it a second time. The future is shared by
            # the steps started together: shielded, so cancelling one spares the rest.
            if not await asyncio.shield(started):
                return
            task = self.store.state.tasks[task_id]
            if task.cancelled is not None or task.failed_final:
                # Cancelled (or failed for good) while STARTED was being committed: do
                # not run it; record that, so its compensation (if any) follows.
                stopped: dict[str, Any] = {
                    "error": "cancelled by operator" if task.cancelled else "task failed",
                    "final": True,
                }
                if spec.needs_compensation:
                    stopped["compensate"] = True
                await self._append_failure(task_id, name, attempt, stopped)
                return
            ctx = self._context(task, name, attempt, spec.after)
            timeout = self._timeout_for(task.workflow, name, spec)
            t0 = time.perf_counter()
            error: dict[str, Any] | None = None
            # A bare timer, not asyncio.timeout: at thousands of steps a second the
            # context manager's bookkeeping was a measurable share of the loop.
            timer = asyncio.get_running_loop().call_later(timeout, self._time_out, key, timeout)
            try:
                # Asked again right before the attempt begins: turns of the loop (or a
                # SIGSTOP) may separate the commit's lease check from this line.
                result = await self.executor.run(spec.fn, ctx, may_begin=self._lease_valid)
            except LeaseLostError:
                # Not begun. Its STARTED is committed: the next leader fails it as lost.
                self._lease_lapsed(f"step {task_id}/{name} attempt {attempt} not begun")
                return
            except asyncio.CancelledError:
                error = self._cancel_why.pop(key, None)
                if error is None:
                    raise  # leadership lost: leave it STARTED for the next leader
                current = asyncio.current_task()
                if current is not None:
                    current.uncancel()  # our own cancel, handled here
            except StepError as e:
                error = {"error": _cut(str(e)) or "failed", **e.details}
            except Exception as e:
                error = {"error": _cut(f"{type(e).__name__}: {e}")}
            finally:
                timer.cancel()
            seconds, succeeded, failed, retries = self._step_metrics(task.workflow, name)
            seconds.observe(time.perf_counter() - t0)
            if error is None:
                try:
                    await logw.append(
                        EventType.STEP_SUCCEEDED, task_id, name, {"result": result}, attempt=attempt
                    )
                    succeeded.inc()
                    return
                except InvalidEventError as e:
                    error = {
                        "error": _cut(
                            f"result rejected: {e}. Return a small JSON summary (counts, "
                            f"checksums, a path or URL) and store bulk output elsewhere"
                        ),
                        "final": True,
                    }
            final = error.get("final") or self._attempts_used_after(task_id, name, attempt, spec)
            error["final"] = bool(final)
            if spec.needs_compensation:
                error["compensate"] = True
            await self._append_failure(task_id, name, attempt, error)
            failed.inc()
            if not final:
                retries.inc()
        except ApolloError as e:
            log.error(
                "step %s/%s attempt %d: cannot record its outcome: %s", task_id, name, attempt, e
            )
        finally:
            self._cancel_why.pop(key, None)
            # The slot (and the step's key in _busy) stay taken while an abandoned
            # thread of this attempt still runs: no retry beside it.
            lingering = self.executor.settle(task_id, name)
            if lingering is not None:
                with contextlib.suppress(BaseException):
                    await asyncio.shield(lingering)
            self._free_slot()

    def _timeout_for(self, workflow: str, name: str, spec: Step) -> float:
        """The step's timeout; an `auto` one is recomputed every few new samples, not
        sorted afresh for every start."""
        if spec.timeout != AUTO:
            return float(spec.timeout)
        history = self.store.state.durations.get(workflow, {}).get(name)
        n = len(history) if history else 0
        key = (workflow, name)
        cached = self._timeouts.get(key)
        if cached is not None and 0 <= n - cached[0] < AUTO_REFRESH_SAMPLES:
            return cached[1]
        value = spec.timeout_s(history, self.default_timeout_s)
        self._timeouts[key] = (n, value)
        return value

    def _step_metrics(self, workflow: str, name: str) -> tuple[Any, Any, Any, Any]:
        """The step's labelled metric children (looking them up costs more than using them)."""
        key = (workflow, name)
        found = self._metric_children.get(key)
        if found is None:
            found = self._metric_children[key] = (
                metrics.STEP_SECONDS.labels(workflow, name),
                metrics.STEP_OUTCOMES.labels(workflow, name, "succeeded"),
                metrics.STEP_OUTCOMES.labels(workflow, name, "failed"),
                metrics.STEP_RETRIES.labels(workflow, name),
            )
        return found

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

    def _attempts_used_after(self, task_id: str, name: str, attempt: int, spec: Step) -> bool:
        step = self.store.state.tasks[task_id].steps[name]
        return self._attempts_used(step) >= spec.retry.attempts

    async def _append_failure(
        self, task_id: str, name: str, attempt: int, payload: dict[str, Any]
    ) -> None:
        try:
            await self.store.log.append(
                EventType.STEP_FAILED, task_id, name, payload, attempt=attempt
            )
        except InvalidEventError:
            # Details too big for the cap: keep the essentials.
            slim: dict[str, Any] = {
                k: payload[k]
                for k in ("error", "final", "lost", "timeout", "compensate")
                if k in payload
            }
            await self.store.log.append(EventType.STEP_FAILED, task_id, name, slim, attempt=attempt)

    def _write_lost(self, task: TaskState, step: StepState, spec: Step, *, final: bool) -> None:
        """A step STARTED that nothing here is running: its node died mid-step."""
        attempt = step.attempt
        # This interruption is the step's next loss; it does not use up its retries.
        final = final or self._budget(step)[1] + 1 >= spec.retry.max_lost
        payload: dict[str, Any] = {
            "error": f"lost: attempt {attempt} stopped without an outcome (its node died or "
            f"lost the lease)",
            "lost": True,
            "final": final,
        }
        if spec.needs_compensation:
            payload["compensate"] = True
        key = (task.task_id, step.name)
        self._spawn(
            key, self._append_failure(task.task_id, step.name, attempt, payload), f"lost {key}"
        )
        metrics.STEP_OUTCOMES.labels(task.workflow, step.name, "lost").inc()

    def _time_out(self, key: Key, timeout: float) -> None:
        self._cancel_run(key, {"error": f"timed out after {timeout:g}s", "timeout": True})

    def _cancel_run(self, key: Key, why: str | dict[str, Any]) -> None:
        run = self._busy.get(key)
        if run is not None and key not in self._cancel_why:
            self._cancel_why[key] = {"error": why, "final": True} if isinstance(why, str) else why
            run.cancel()

    def _spawn_compensation(self, task: TaskState, step: StepState, spec: Step) -> None:
        key = (task.task_id, step.name)
        self._spawn(key, self._compensate(task.task_id, step.name, spec), f"compensate {key}")

    async def _compensate(self, task_id: str, name: str, spec: Step) -> None:
        """COMPENSATING, the action (retried with backoff, failures visible), COMPENSATED."""
        logw = self.store.log
        assert spec.compensate is not None
        try:
            task = self.store.state.tasks[task_id]
            step = task.steps[name]
            if step.status is not StepStatus.COMPENSATING:
                await logw.append(EventType.STEP_COMPENSATING, task_id, name, attempt=step.attempt)
                metrics.COMPENSATIONS.labels(task.workflow, name).inc()
            # Like a step, the action runs only once COMPENSATING is committed (also when
            # resuming one: it may be this node's own uncommitted record).
            if not await self._committed(task.last_event_id):
                return
            n = 0
            while True:
                n += 1
                # A compensation sees the step's own result beside its inputs.
                ctx = _with_own_result(
                    self._context(task, name, step.attempt, spec.after), name, step.result
                )
                try:
                    await self.executor.run(spec.compensate, ctx, may_begin=self._lease_valid)
                    break
                except LeaseLostError:
                    self._lease_lapsed(f"compensation of {task_id}/{name} not begun")
                    return
                except Exception as e:
                    await logw.append(
                        EventType.STEP_FAILED,
                        task_id,
                        name,
                        {
                            "error": _cut(f"compensation failed: {type(e).__name__}: {e}"),
                            "compensation": True,
                        },
                        attempt=step.attempt,
                    )
                    await self.clock.sleep(
                        spec.compensation_retry.delay_s(n, f"{task_id}:{name}:c")
                    )
                    await logw.append(
                        EventType.STEP_COMPENSATING, task_id, name, attempt=step.attempt
                    )
            await logw.append(EventType.STEP_COMPENSATED, task_id, name, attempt=step.attempt)
        except ApolloError as e:
            log.error("compensation of %s/%s: cannot record its outcome: %s", task_id, name, e)

    def compensation_backlog(self) -> int:
        return sum(1 for t in self._busy.values() if t.get_name().startswith("compensate"))

    # ---------------------------------------------------------- requests

    async def submit(
        self,
        workflow: str,
        input: Any = None,
        *,
        idempotency_key: str | None = None,
        version: int | None = None,
    ) -> Submitted:
        """Submit a task; the same idempotency key (within its TTL) returns the same task."""
        self._check_leading()
        wf = self._workflow_for(workflow, input, version)
        if idempotency_key is not None:
            _check_key(idempotency_key)
            existing = self._existing(idempotency_key)
            if existing is not None:
                return Submitted(existing, False)
            pending = self._inflight_keys.get(idempotency_key)
            if pending is not None:
                return Submitted((await asyncio.shield(pending)).task_id, False)
        task_id = new_task_id()
        payload = _submission(wf, input, idempotency_key)
        if idempotency_key is not None:
            fut: asyncio.Future[Submitted] = asyncio.get_running_loop().create_future()
            self._inflight_keys[idempotency_key] = fut
        started = time.perf_counter()
        try:
            event = await self.store.log.append(EventType.TASK_SUBMITTED, task_id, payload=payload)
        except BaseException as e:
            if idempotency_key is not None:
                self._inflight_keys.pop(idempotency_key).set_exception(e)
            raise
        result = Submitted(task_id, True, event.event_id)
        if idempotency_key is not None:
            self._inflight_keys.pop(idempotency_key).set_result(result)
        await self._commit(event.event_id)
        metrics.SUBMIT_COMMIT_SECONDS.observe(time.perf_counter() - started)
        return result

    async def submit_many(self, items: Sequence[SubmitItem]) -> list[Submitted]:
        """Submit many tasks with one append (one fsync) and one replication wait.

        All or nothing: an unknown workflow or a bad key anywhere refuses the
        whole batch (the error names the item) and writes nothing. Idempotency
        keys work as for `submit`, within the batch too: a key given twice
        creates one task.
        """
        self._check_leading()
        plans: list[tuple[Workflow, SubmitItem]] = []
        for i, item in enumerate(items):
            try:
                wf = self._workflow_for(item.workflow, item.input, item.version)
                if item.idempotency_key is not None:
                    _check_key(item.idempotency_key)
            except (NotFoundError, InvalidArgumentError, WorkflowDefinitionError) as e:
                raise type(e)(f"tasks[{i}]: {e}") from None
            plans.append((wf, item))
        out: list[Submitted | None] = [None] * len(plans)
        drafts: list[Draft] = []
        owners: list[int] = []  # the item each draft is for
        same_as: dict[int, int] = {}  # item -> the earlier item with its key
        pending: list[tuple[int, asyncio.Future[Submitted]]] = []
        mine: dict[str, int] = {}  # keys this batch creates -> item
        loop = asyncio.get_running_loop()
        for i, (wf, item) in enumerate(plans):
            key = item.idempotency_key
            if key is not None:
                existing = self._existing(key)
                if existing is not None:
                    out[i] = Submitted(existing, False)
                    continue
                if key in mine:
                    same_as[i] = mine[key]
                    continue
                if key in self._inflight_keys:
                    pending.append((i, self._inflight_keys[key]))
                    continue
                mine[key] = i
                self._inflight_keys[key] = loop.create_future()
            payload = _submission(wf, item.input, key)
            drafts.append(Draft(EventType.TASK_SUBMITTED, new_task_id(), payload=payload))
            owners.append(i)
        started = time.perf_counter()
        try:
            events = await self.store.log.append_many(drafts) if drafts else []
        except BaseException as e:
            for key in mine:
                self._inflight_keys.pop(key).set_exception(e)
            raise
        for i, event in zip(owners, events, strict=True):
            out[i] = Submitted(event.task_id, True, event.event_id)
        for key, i in mine.items():
            self._inflight_keys.pop(key).set_result(out[i])  # type: ignore[arg-type]
        for i, j in same_as.items():
            out[i] = Submitted(out[j].task_id, False)  # type: ignore[union-attr]
        if events:
            await self._commit(events[-1].event_id)
            metrics.SUBMIT_COMMIT_SECONDS.observe(time.perf_counter() - started)
        # Keys another submission is writing right now: theirs (if that one fails,
        # so does this call; this batch's own tasks are committed, and a retry with
        # the same keys returns them).
        for i, fut in pending:
            out[i] = Submitted((await asyncio.shield(fut)).task_id, False)
        return out  # type: ignore[return-value]

    def _workflow_for(self, workflow: str, input: Any, version: int | None) -> Workflow:
        if workflow == SHELL_WORKFLOW:
            why = self.shell_refusal()
            if why:
                raise FailedPreconditionError(why)
            return shell_workflow(input)
        found = self.registry.get(workflow, version)
        if found is None:
            known = ", ".join(self.registry.names()) or "none"
            raise NotFoundError(f"unknown workflow {workflow!r} (loaded: {known})")
        return found

    def _existing(self, key: str) -> str | None:
        task = self.store.state.task_for_key(key)
        if task is None or self.clock.now() - task.submitted_ms / 1000 > self.idempotency_ttl_s:
            return None
        return task.task_id

    def _task_and_step(self, task_id: str, step: str) -> tuple[TaskState, StepState]:
        task = self.store.state.peek(task_id)
        if task is None:
            raise NotFoundError(f"no task {task_id!r}")
        s = task.steps.get(step)
        if s is None:
            raise NotFoundError(
                f"task {task_id!r} has no step {step!r} (steps: {', '.join(task.steps)})"
            )
        return task, s

    async def retry_step(
        self, task_id: str, step: str, *, operator: str, reason: str, display: str | None = None
    ) -> Event:
        """Run a failed (or compensated) step again, with a fresh retry budget."""
        self._check_leading()
        task, s = self._task_and_step(task_id, step)
        _require_reason(operator, reason)
        if task.cancelled is not None:
            raise FailedPreconditionError(f"task {task_id} is cancelled")
        if (
            s.status not in (StepStatus.FAILED, StepStatus.COMPENSATED)
            or (task_id, step) in self._busy
        ):
            raise FailedPreconditionError(
                f"step {step} is {s.status.value}; only a FAILED or COMPENSATED step that is "
                f"not running or compensating can be retried"
            )
        wf = self.workflow_for(task)
        if (
            wf is not None
            and step in wf.steps
            and wf.steps[step].needs_compensation
            and s.status is StepStatus.FAILED
        ):
            raise FailedPreconditionError(
                f"step {step} is not idempotent and its compensation has not completed yet; "
                f"retry it once it is COMPENSATED"
            )
        return await self._override(task_id, step, "retry", operator, reason, display)

    async def skip_step(
        self, task_id: str, step: str, *, operator: str, reason: str, display: str | None = None
    ) -> Event:
        """Mark a step as done without running it; its dependents may run."""
        self._check_leading()
        task, s = self._task_and_step(task_id, step)
        _require_reason(operator, reason)
        if task.cancelled is not None:
            raise FailedPreconditionError(f"task {task_id} is cancelled")
        if (
            s.status
            in (
                StepStatus.STARTED,
                StepStatus.COMPENSATING,
                StepStatus.SUCCEEDED,
                StepStatus.SKIPPED,
            )
            or (task_id, step) in self._busy
        ):
            raise FailedPreconditionError(f"step {step} is {s.status.value} and cannot be skipped")
        return await self._override(task_id, step, "skip", operator, reason, display)

    async def _override(
        self,
        task_id: str,
        step: str,
        action: str,
        operator: str,
        reason: str,
        display: str | None,
    ) -> Event:
        event = await self.store.log.append(
            EventType.MANUAL_OVERRIDE,
            task_id,
            step,
            _shown_as({"action": action, "operator": operator, "reason": reason}, display),
        )
        await self._commit(event.event_id)
        return event

    async def cancel_task(
        self, task_id: str, *, operator: str, reason: str, display: str | None = None
    ) -> Event:
        """Cancel a task: running steps are cancelled, compensation follows by policy."""
        self._check_leading()
        task = self.store.state.peek(task_id)
        if task is None:
            raise NotFoundError(f"no task {task_id!r}")
        _require_reason(operator, reason)
        if task.status in (TaskStatus.SUCCEEDED, TaskStatus.CANCELLED):
            raise FailedPreconditionError(f"task {task_id} is already {task.status.value}")
        payload = _shown_as({"operator": operator, "reason": reason}, display)
        wf = self.workflow_for(task)
        if wf is not None and wf.compensate_on_cancel:
            # Record what the cancel owes: succeeded steps that declared a compensation.
            owed = [
                n
                for n, st in task.steps.items()
                if st.status is StepStatus.SUCCEEDED
                and n in wf.steps
                and wf.steps[n].needs_compensation
            ]
            if owed:
                payload["compensate"] = owed
        event = await self.store.log.append(EventType.TASK_CANCELLED, task_id, payload=payload)
        await self._commit(event.event_id)
        return event

    def running(self) -> int:
        return self._slots_used


async def _durable_is_enough(event_id: int) -> None:
    return None


def _shown_as(payload: dict[str, Any], display: str | None) -> dict[str, Any]:
    """The payload's "operator" is the authenticated principal; a display name the
    caller typed goes beside it (as "as"), never in its place."""
    name = (display or "").strip()
    if name and name != payload["operator"]:
        payload["as"] = name[:128]
    return payload


def _shell_off() -> str:
    return SHELL_DISABLED


def _require_reason(operator: str, reason: str) -> None:
    if not operator.strip():
        raise InvalidArgumentError("operator must name who is acting")
    if not reason.strip():
        raise InvalidArgumentError("reason must say why (it is kept in the audit log)")


def _with_own_result(ctx: StepContext, name: str, result: Any) -> StepContext:
    return StepContext(
        task_id=ctx.task_id,
        step=ctx.step,
        attempt=ctx.attempt,
        input=ctx.input,
        results={**ctx.results, name: result},
        node_id=ctx.node_id,
        workflow=ctx.workflow,
        version=ctx.version,
        fencing_token=ctx.fencing_token,
    )
