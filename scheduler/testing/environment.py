"""`WorkflowEnvironment`: a workflow's test, on the real engine, store and log, in
process, on a temporary directory, with a clock that moves when the test says so.

    async with WorkflowEnvironment(workflows=[approval]) as env:
        h = await env.submit(approval, {"id": "A1"})
        await env.advance(timedelta(days=2))     # the wait's deadline is 3 days off
        await env.fail_over()                     # a new engine takes over from the log
        await env.send_event("approval:A1", {"by": "ana"})
        assert (await h.result())["state"] == "shipped"

Time (scheduler/testing/virtualclock.py) moves by `advance` only, except while
the test awaits `h.result()`: then, whenever every task waits, it skips to the
next timer, as Temporal's time-skipping test server does, so a thirty-day sleep
returns at once. "Every task waits" is the engine's word (`Engine.settled`: no
decision or write pending; `Engine.in_flight`: each attempt in flight sleeps on
the clock), seen three loop turns running with the log unmoved.

`fail_over()` is what a standby's promotion does: the primary's engine stops
without writing (its running attempts are lost, as a dead node's are), its data
directory is copied as log shipping would have (byte for byte), and a new node
opens the copy (snapshot plus replay), writes its TERM_STARTED and leads: a step
that succeeded never runs again. It waits first for the old primary to be at
rest (every task waiting) unless told `at_rest=False`.

`WorkflowEnvironment(workers=N)` runs steps remotely, on N workers of the real
worker code over the engine's Workers stream (scheduler/testing/workers.py);
`kill_worker()` kills one mid-step, `start_worker()` starts another.

Calls that let the engine work (`advance`, `fail_over`, `result`) return once it
is at rest, or raise TimeoutError after `timeout` real seconds naming what still
runs. `submit` and `send_event` return once recorded, as the client's do.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterable
from datetime import datetime, timedelta
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, Generic, TypeVar, overload

from apollo11.scheduler import waits
from apollo11.scheduler.client import (
    EventView,
    SentEvent,
    TaskCancelled,
    TaskFailed,
    TaskView,
    task_result,
)
from apollo11.scheduler.engine import Engine, InProcessExecutor
from apollo11.scheduler.errors import FailedPreconditionError, NotFoundError, StalledError
from apollo11.scheduler.log import EventType, FsyncPolicy, LogConfig
from apollo11.scheduler.state import Store, StoreConfig, TaskState, TaskStatus
from apollo11.scheduler.testing.replaycheck import replay_check
from apollo11.scheduler.testing.views import event_view, task_view
from apollo11.scheduler.testing.virtualclock import START, VirtualClock
from apollo11.scheduler.testing.workers import HEARTBEAT_TIMEOUT_S, Workers
from apollo11.scheduler.workflow import InputT, Registry, ResultT, Workflow

R = TypeVar("R")

DEFAULT_TIMEOUT_S = 30.0  # real seconds a call may wait for the engine to be at rest
# No fsync: a test is about its workflow's logic, not the disk (tests/conftest.py's too).
STORE = StoreConfig(log=LogConfig(fsync=FsyncPolicy.UNSAFE_NEVER))
_CALM_TURNS = 3  # loop turns in a row at rest, the log unmoved, before it counts
_FAILED = (TaskStatus.FAILED, TaskStatus.NONDETERMINISTIC, TaskStatus.COMPENSATED)


class TaskHandle(Generic[R]):
    """A task submitted in a `WorkflowEnvironment`: its result, its view, its history.
    It outlives failovers (it names the task, not an engine). Typed as the client's
    handle is: by the workflow's `result=` model when submitted as a Workflow that
    declares one (its `result()` is then an instance of it), Any otherwise."""

    def __init__(
        self,
        env: WorkflowEnvironment,
        task_id: str,
        workflow: str,
        model: type[R] | None = None,
    ) -> None:
        self._env = env
        self.task_id = task_id
        self.workflow = workflow
        self.model = model

    def __repr__(self) -> str:
        return f"TaskHandle({self.task_id!r}, workflow={self.workflow!r})"

    async def result(self, *, timeout: float = DEFAULT_TIMEOUT_S) -> R:  # noqa: ASYNC109
        """Run the environment until the task finishes, skipping time whenever every
        task waits; its result as the client's handle gives it (an instance of the
        workflow's `result=` model, or a durable task's main's, or each step's by
        name). Raises TaskFailed or TaskCancelled as the client does; StalledError when
        nothing due can ever finish it (it waits for an event nobody sent);
        TimeoutError after `timeout` real seconds."""
        view = await self._env._finished(self.task_id, within_s=timeout)
        if view.state == "CANCELLED":
            raise TaskCancelled(view)
        if view.state in ("FAILED", "NONDETERMINISTIC", "COMPENSATED"):
            raise TaskFailed(view)
        return task_result(view, self.model)  # type: ignore[no-any-return]

    async def task(self) -> TaskView:
        """The task now, as the client's `task()` shows it."""
        return self._env.task(self.task_id)


class WorkflowEnvironment:
    """The engine, its store and log, in process, on a virtual clock.

    `workflows`: Workflow objects, modules (or their dotted names) whose top-level
    workflows are loaded, as `--workflows` does. `start`: the clock's first time.
    `directory`: where the nodes keep their data (default: a temporary directory,
    removed at the end). `concurrency`: the engine's slots (each worker's, with
    `workers`). `workers`: run steps on this many workers (the real worker code, in
    this process, over the engine's Workers stream) instead of in the engine's own
    slots; 0 (the default): embedded."""

    def __init__(
        self,
        *,
        workflows: Iterable[Workflow | ModuleType | str] = (),
        start: datetime | float = START,
        directory: str | Path | None = None,
        concurrency: int = 8,
        workers: int = 0,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if workers < 0:
            raise ValueError(f"workers= is how many workers run steps (0: none), got {workers}")
        self.registry = Registry()
        for w in workflows:
            self.register(w)
        self.clock = VirtualClock(start.timestamp() if isinstance(start, datetime) else start)
        self.timeout = timeout
        self._concurrency = concurrency
        self._given_dir = Path(directory) if directory is not None else None
        self._root: Path | None = None
        self._nodes = 0
        self._store: Store | None = None
        self._engine: Engine | None = None
        self._executor: InProcessExecutor | None = None
        self._workers = (
            Workers(self.registry, count=workers, slots=concurrency) if workers else None
        )

    # ------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> WorkflowEnvironment:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Open the first node's store and lead (what `async with` does)."""
        if self._root is not None:
            raise FailedPreconditionError("this WorkflowEnvironment is started already")
        if self._given_dir is not None:
            self._given_dir.mkdir(parents=True, exist_ok=True)
            self._root = self._given_dir
        else:
            self._root = Path(tempfile.mkdtemp(prefix="apollo11-env-"))
        if self._workers is not None:
            await self._workers.open()
        await self._lead()
        if self._workers is not None:
            for _ in range(self._workers.count):
                await self._workers.start(None, self.timeout)

    async def close(self) -> None:
        """Stop the engine, close the store; remove the data unless `directory` was given."""
        await self._step_down()
        if self._workers is not None:
            await self._workers.close()
        root, self._root = self._root, None
        if root is not None and self._given_dir is None:
            await asyncio.to_thread(shutil.rmtree, root, True)

    @property
    def node_id(self) -> str:
        """The node that leads now: node-1, then node-2 after a failover, ..."""
        return f"node-{self._nodes}"

    @property
    def engine(self) -> Engine:
        """The leading node's engine (for what the kit does not say itself)."""
        if self._engine is None:
            raise FailedPreconditionError(
                "the environment is not running: use `async with WorkflowEnvironment(...) "
                "as env:` (or `await env.start()`)"
            )
        return self._engine

    @property
    def store(self) -> Store:
        """The leading node's store: its log and the state folded from it."""
        self.engine  # noqa: B018  (the same error when not running)
        assert self._store is not None
        return self._store

    def register(self, workflow: Workflow | ModuleType | str) -> None:
        """Load a workflow, or every workflow of a module (or its dotted name)."""
        if isinstance(workflow, Workflow):
            self.registry.register(workflow)
        elif isinstance(workflow, ModuleType):
            self.registry.load_module(workflow.__name__)
        elif isinstance(workflow, str):
            self.registry.load_module(workflow)
        else:
            raise TypeError(
                f"workflows= takes Workflow objects and modules (or their names), got "
                f"{type(workflow).__name__} {workflow!r}"
            )

    async def _lead(self) -> None:
        assert self._root is not None
        previous = self._root / self.node_id if self._nodes else None
        leader = self.node_id if self._nodes else ""  # the last term's, as a node records it
        self._nodes += 1
        here = self._root / self.node_id
        if previous is not None:  # what log shipping gave the standby: the same bytes
            await asyncio.to_thread(shutil.copytree, previous, here)
        store = Store.open(here, config=STORE, instance_id=self.node_id, clock=self.clock.now_ms)
        store.log.term = store.log.last_term + 1
        began = "failover" if previous is not None else "bootstrap"
        # a node's payload (node/leading.py); no client address: nothing listens here
        await store.log.append(
            EventType.TERM_STARTED,
            "",
            payload={"node_id": self.node_id, "address": "", "began": began, "previous": leader},
        )
        executor = InProcessExecutor(threads=self._concurrency)
        remote = None if self._workers is None else self._workers.executor(self.node_id)
        engine = Engine(
            store,
            self.registry,
            node_id=self.node_id,
            executor=executor if remote is None else remote,
            clock=self.clock,
            concurrency=self._concurrency,
            # as a node's: an adopted attempt outlasts its worker's time to report it
            adopt_grace_s=HEARTBEAT_TIMEOUT_S + 1.0,
        )
        self._store, self._engine, self._executor = store, engine, executor
        await engine.start()
        if self._workers is not None:
            await self._workers.lead(store.log.term, store, self.node_id, self.timeout)

    async def _step_down(self) -> None:
        engine, store, executor = self._engine, self._store, self._executor
        self._engine = self._store = self._executor = None
        if engine is not None:
            await engine.stop()  # first, as a node's: nothing is decided once workers go
        if self._workers is not None:
            await self._workers.step_down(f"{self.node_id} stopped being the primary")
        if store is not None:
            await store.close()
        if executor is not None:
            executor.close()

    # ----------------------------------------------------------- the verbs

    @overload
    async def submit(
        self,
        workflow: Workflow[InputT, ResultT],
        input: InputT | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> TaskHandle[ResultT]: ...

    @overload
    async def submit(
        self, workflow: str, input: Any = None, *, idempotency_key: str | None = None
    ) -> TaskHandle[Any]: ...

    async def submit(
        self,
        workflow: Workflow[Any, Any] | str,
        input: Any = None,
        *,
        idempotency_key: str | None = None,
    ) -> TaskHandle[Any]:
        """Submit a task of `workflow` (a Workflow, loaded here if it is not yet: the
        handle is typed by its `result=` model; or the name of a loaded one: untyped);
        `input` is JSON or an instance of its `input=` model. Returns once recorded."""
        model: Any = None
        if isinstance(workflow, Workflow):
            if self.registry.get(workflow.name, workflow.version) is not workflow:
                self.registry.register(workflow)
            name, version, model = workflow.name, workflow.version, workflow.result
        elif isinstance(workflow, str):
            name, version = workflow, None
            if self.registry.get(name) is None:
                known = ", ".join(self.registry.names()) or "none"
                raise NotFoundError(
                    f"unknown workflow {name!r} (loaded: {known}): pass the Workflow "
                    f"itself, or load it with WorkflowEnvironment(workflows=[...])"
                )
        else:
            hint = " (the function under @main: pass its DurableWorkflow)"
            raise TypeError(
                f"submit takes a Workflow or a loaded workflow's name, got "
                f"{type(workflow).__name__} {getattr(workflow, '__name__', workflow)!r}"
                + (hint if callable(workflow) else "")
            )
        if hasattr(input, "model_dump") and not isinstance(input, type):
            input = input.model_dump(mode="json", by_alias=True)  # as the client sends it
        sub = await self.engine.submit(
            name, input, idempotency_key=idempotency_key, version=version
        )
        return TaskHandle(self, sub.task_id, name, model)

    async def send_event(
        self, key: str, payload: Any = None, *, idempotency_key: str | None = None
    ) -> SentEvent:
        """Record an external event for durable tasks' waits; returns once recorded."""
        sent = await self.engine.send_event(key, payload, idempotency_key=idempotency_key)
        return SentEvent(event_id=sent.event_id, created=sent.created)

    async def advance(self, by: timedelta | float) -> None:
        """Let the engine come to rest, then move the clock on by `by` (seconds, or a
        timedelta), stopping at each timer due on the way for the engine to act on it
        (a retry due in an hour runs at that hour, and its own backoff counts from
        there), and come to rest again."""
        seconds = by.total_seconds() if isinstance(by, timedelta) else float(by)
        if seconds < 0:
            raise ValueError(f"time only moves forward: advance({by!r}) would go back")
        await self._settle()
        target = self.clock.now() + seconds
        while (due := self.clock.next_due()) is not None and due <= target:
            self.clock.skip_to(due)
            await self._settle()
        self.clock.skip_to(target)
        await self._settle()

    async def fail_over(self, *, at_rest: bool = True) -> str:
        """A standby takes over from the log: the primary stops (when every task waits,
        unless `at_rest` is False: then its running attempts are lost, and retried by
        their declarations), a new node opens a copy of its data and leads. Returns
        what happened, e.g. "node-2 took over in term 2: replayed 9 events"."""
        if at_rest:
            await self._settle()
        self.engine  # noqa: B018  (not running: say so before stopping anything)
        await self._step_down()
        await self._lead()
        assert self._store is not None
        rec = self._store.recovery
        return (
            f"{self.node_id} took over in term {self._store.log.term}: replayed "
            f"{rec.replayed} events"
            + (f" after the snapshot at event {rec.snapshot}" if rec.snapshot is not None else "")
        )

    async def kill_worker(self, name: str | None = None) -> str:
        """Kill a worker as its process dies (`name`, or the one running the most
        attempts): its stream is cut, and the attempts it ran are failed as lost at
        once and retried by their declarations (a thread's step runs on to its end
        here, its result thrown away). Returns what happened, e.g. "killed w1: 1
        attempt(s) lost"."""
        workers = self._need_workers("kill_worker")
        name, lost = await workers.kill(name)
        return f"killed {name}: {lost} attempt(s) lost"

    async def start_worker(self, name: str | None = None) -> str:
        """Start a worker (named `name`, or the next free w1, w2, ...); returns its name
        once the primary has registered it."""
        return await self._need_workers("start_worker").start(name, self.timeout)

    @property
    def workers(self) -> list[str]:
        """The live workers' names ([] when steps run embedded)."""
        return [] if self._workers is None else self._workers.names

    def _need_workers(self, call: str) -> Workers:
        self.engine  # noqa: B018  (not running: say so first)
        if self._workers is None:
            raise FailedPreconditionError(
                f"{call}: steps run embedded in this environment; give "
                f"WorkflowEnvironment(workers=1) (or more) to run them on workers"
            )
        return self._workers

    def task(self, task_id: str) -> TaskView:
        """A task now, as the client's `task()` shows it."""
        t = self.store.state.peek(task_id)
        if t is None:
            raise NotFoundError(f"no task {task_id!r} in this environment")
        return task_view(
            t, as_of=self.store.log.next_id - 1, blocked=self.engine.problems.get(task_id)
        )

    async def history(self, task: TaskHandle[Any] | str) -> list[EventView]:
        """The task's events in log order, as the client's `events()` gives them."""
        task_id = task.task_id if isinstance(task, TaskHandle) else task
        self.task(task_id)  # NotFoundError for a task this log does not hold
        return [event_view(e) for e in self.store.log.read() if e.task_id == task_id]

    async def replay_check(self) -> str:
        """Replay the whole log from its first event and assert that the fold gives the
        state the engine holds; then replay every durable run against the code loaded
        here (a `ctx.*` call that differs from its checkpoint fails). Returns what was
        checked; raises AssertionError naming the first difference."""
        await self._settle()
        return await replay_check(self.store, self.registry)

    # ------------------------------------------------------- at rest, skipping

    async def _finished(self, task_id: str, *, within_s: float) -> TaskView:
        """Run until the task is finished and nothing of it runs, skipping time whenever
        every task waits."""
        async with _within(within_s, lambda: self._report(f"waiting for task {task_id}")):
            while True:
                await self._settle(limit=False)
                t = self.store.state.peek(task_id)
                if t is None:
                    raise NotFoundError(f"no task {task_id!r} in this environment")
                if t.quiescent:
                    return self.task(task_id)
                due = self.clock.next_due()
                if due is None:
                    raise StalledError(self._stalled(t))
                self.clock.skip_to(due)

    def _at_rest(self) -> bool:
        engine = self.engine
        return engine.settled() and engine.in_flight() <= self.clock.sleepers_at_work()

    async def _settle(self, *, limit: bool = True) -> None:
        """Until every task waits (an event, a timer, a slot), seen `_CALM_TURNS` loop
        turns in a row with the log unmoved."""
        async with _within(self.timeout if limit else None, lambda: self._report("settling")):
            calm, mark = 0, -1
            while calm < _CALM_TURNS:
                resting = self._at_rest()
                now = self.store.log.next_id
                calm = calm + 1 if resting and now == mark else 0
                mark = now
                # at work: a step may run in a thread, let it have the interpreter
                await asyncio.sleep(0 if resting else 0.001)

    def _report(self, doing: str) -> str:
        engine = self._engine
        if engine is None:
            return f"{doing}: the environment stopped"
        running = engine.in_flight()
        return (
            f"{doing}: {running} step(s) still running, "
            f"{self.clock.sleepers_at_work()} of them sleeping on the clock; "
            f"engine settled: {engine.settled()} (a step that never returns? raise "
            f"WorkflowEnvironment(timeout=...) for slow steps)"
        )

    def _stalled(self, t: TaskState) -> str:
        where = f"task {t.task_id} ({t.workflow}) is {t.status.value}"
        problem = self.engine.problems.get(t.task_id)
        if problem:
            return f"{where} and cannot go on: {problem}"
        wait = t.durable.wait if t.durable is not None else None
        if wait is not None:
            what = []
            for p in waits.parts(wait):
                if p.get("kind") == "event":
                    what.append(f"event {p.get('key')!r}")
                elif p.get("kind") == "child":
                    what.append(f"child task {p.get('task_id')}")
                else:
                    what.append(str(p.get("kind")))
            return (
                f"{where}: it waits for {' and '.join(what)} with no deadline, and no timer "
                f"is armed that could change that: send it first "
                f"(await env.send_event(key, payload)), then await the result"
            )
        return f"{where}, every task waits and no timer is armed: nothing will move it on"


@contextlib.asynccontextmanager
async def _within(seconds: float | None, why: Callable[[], str]) -> AsyncIterator[None]:
    try:
        async with asyncio.timeout(seconds):
            yield
    except TimeoutError as e:
        raise TimeoutError(f"{why()} after {seconds} s") from e
