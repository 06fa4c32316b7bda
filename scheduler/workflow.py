"""Workflow definitions: named, versioned DAGs of steps that say how they are safe to re-run.

A step must declare its idempotency strategy (the seed notes, 3.1), because
after a crash the engine will run it again and only the step's author knows
whether that is harmless:

* `Idempotent()`: running it twice has the effect of running it once
  (pure, upsert, temp file + atomic rename).
* `DedupeKey()`: the step deduplicates on `ctx.dedupe_key` (`task_id:step`),
  the same on every retry and replay, e.g. as a message id or unique key.
* `Checkpoint()`: the step keeps its own progress marker and resumes from it;
  it is told `ctx.attempt`.
* `NotIdempotent(compensate=fn)`: it must not simply run again; `fn` undoes
  its effects, and the engine compensates before any re-run.

    etl = Workflow("etl", version=1)

    @etl.step(idempotency=Idempotent(), retry=Retry(attempts=5))
    async def collect(ctx: StepContext) -> dict: ...

    @etl.step(after=["collect"], idempotency=NotIdempotent(compensate=refund))
    def charge(ctx: StepContext) -> dict: ...   # sync steps run in a thread

Flow control (scheduler/flow/) is declared here too: how many of a workflow's tasks
(or of a step's attempts) run at once per key value, how fast its tasks start, how
submissions fold into one, and which key's values take turns:

    runbook = Workflow("runbook", version=1,
                       concurrency=Concurrency(key="host", max=2),
                       rate=Rate(key="tenant", limit=10, per="1s", burst=20),
                       fairness="tenant")

    @runbook.step(idempotency=Idempotent(), concurrency=Concurrency(key="warehouse", max=4))
    def load(ctx: StepContext) -> None: ...

Registration validates everything and names the workflow and step at fault.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, NamedTuple, Protocol, TypeVar

import typing_extensions

from apollo11.scheduler import typed
from apollo11.scheduler.childguard import guarded
from apollo11.scheduler.errors import NotFoundError, WorkflowDefinitionError
from apollo11.scheduler.flow import Concurrency as Concurrency
from apollo11.scheduler.flow import Debounce as Debounce
from apollo11.scheduler.flow import FlowSpec, Key, RegisteredLimits, declare
from apollo11.scheduler.flow import Rate as Rate
from apollo11.scheduler.retrypolicy import EXHAUSTED, Exhausted
from apollo11.scheduler.retrypolicy import FINAL as FINAL
from apollo11.scheduler.retrypolicy import Retry as Retry
from apollo11.scheduler.schedules import Schedule
from apollo11.scheduler.steplimits import CpuLimitExceeded as CpuLimitExceeded
from apollo11.scheduler.steplimits import Limits as Limits
from apollo11.scheduler.steplimits import MemoryLimitExceeded as MemoryLimitExceeded
from apollo11.scheduler.steplimits import StepLimitExceeded as StepLimitExceeded


class Strategy(enum.StrEnum):
    IDEMPOTENT = "idempotent"
    DEDUPE_KEY = "dedupe_key"
    CHECKPOINT = "checkpoint"
    NOT_IDEMPOTENT = "not_idempotent"


@dataclass(frozen=True, slots=True)
class Idempotent:
    """Running the step again is harmless (pure, upsert, temp file + atomic rename)."""

    strategy: Literal[Strategy.IDEMPOTENT] = Strategy.IDEMPOTENT
    compensate: None = None


@dataclass(frozen=True, slots=True)
class DedupeKey:
    """The step deduplicates on `ctx.dedupe_key`, stable across retries and replays."""

    strategy: Literal[Strategy.DEDUPE_KEY] = Strategy.DEDUPE_KEY
    compensate: None = None


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The step keeps its own progress marker and resumes from it (`ctx.attempt` says which)."""

    strategy: Literal[Strategy.CHECKPOINT] = Strategy.CHECKPOINT
    compensate: None = None


@dataclass(frozen=True, slots=True)
class NotIdempotent:
    """The step must not simply run again: `compensate` undoes it first."""

    compensate: StepFn | None = None
    strategy: Literal[Strategy.NOT_IDEMPOTENT] = Strategy.NOT_IDEMPOTENT


Idempotency = Idempotent | DedupeKey | Checkpoint | NotIdempotent


AUTO: Literal["auto"] = "auto"
DEFAULT_TIMEOUT_S = 3600.0
AUTO_MIN_SAMPLES = 20


class FencingToken(NamedTuple):
    """(term, attempt): compares in the order attempts of a step may begin.

    The lease check before an attempt begins and the beginning itself are not
    atomic: a node paused between the two can begin an attempt after a new
    primary began a later one. An external system that keeps the highest token
    it has seen for a step (`dedupe_key`) and rejects lower ones closes that
    window. Shell steps get it as APOLLO11_FENCING_TOKEN, `str(token)`.
    """

    term: int
    attempt: int

    def __str__(self) -> str:
        return f"{self.term}:{self.attempt}"


NO_TOKEN = FencingToken(0, 0)


class Journal(Protocol):
    """A durable main's window on the log (docs/durable.md), handed to its attempt as
    `StepContext.journal` by the engine that runs it. What it reads is the replayed
    state; what it records are the payloads of CHECKPOINT and WAIT events."""

    @property
    def checkpoints(self) -> Sequence[Mapping[str, Any]]:
        """The task's checkpoints, in `seq` order."""

    @property
    def wait(self) -> Mapping[str, Any] | None:
        """The wait registered (a WAIT payload), if any."""

    @property
    def first_event_id(self) -> int:
        """The task's first event (its TASK_SUBMITTED): a wait's default `since`."""

    async def resolve(self, wait: Mapping[str, Any], now_ms: int) -> Mapping[str, Any] | None:
        """What `wait` (a WAIT payload) resolves to now, against the log's events and
        the task's children (`scheduler/waits.py`): the fields its checkpoint records;
        None while it must go on waiting."""

    def now_ms(self) -> int:
        """The engine's clock (a deadline is computed from it once, then recorded)."""

    async def sleep(self, seconds: float) -> None:
        """Sleep on the engine's clock (a ctx.step's backoff between tries)."""

    def plan_child(
        self,
        workflow: str,
        input: Any,
        version: int | None,
        key: str,
        parent: Mapping[str, Any],
    ) -> str:
        """The task id of the child a `ctx.spawn` names: the task already submitted with
        idempotency key `key` by this parent, or a new one, submitted with the record of
        the spawn's checkpoint. Raises an ApolloError when the workflow is not loaded or
        refuses the input."""

    async def record(
        self, checkpoints: Sequence[Mapping[str, Any]], wait: Mapping[str, Any] | None = None
    ) -> None:
        """Append these CHECKPOINTs (a spawn's child's TASK_SUBMITTED before its own),
        then the WAIT if given (which ends the attempt: nothing else is recorded for
        it), and return once they are committed. Raises LeaseLostError when they
        cannot be (the attempt must stop)."""


@dataclass(frozen=True, slots=True)
class StepContext:
    """What a running step is told."""

    task_id: str
    step: str
    attempt: int
    input: Any
    # The results of the steps in this one's `after=` and of no other (ParentResults:
    # reading another is a final ResultNotVisible, not a KeyError retried).
    results: Mapping[str, Any]
    node_id: str
    workflow: str
    version: int
    # The term of the primary that began this attempt, and the attempt: pass it to
    # external systems that can refuse a deposed primary's late attempt.
    # (0, 0) outside an engine (a test calling a step directly).
    fencing_token: FencingToken = NO_TOKEN
    # Where the attempt runs: a worker's --name, or the node's id when embedded.
    worker: str = ""
    # The details of the last `heartbeat()` of the step's previous attempt (None: none),
    # so that an attempt resumes from the progress the one before it reported.
    last_heartbeat: Any = None
    # Where `heartbeat()` reports to (set by whatever runs the attempt).
    beat: Callable[[Any], None] | None = field(default=None, repr=False, compare=False)
    # A durable main's checkpoints and waits (set for `journaled` steps: by the engine
    # when it runs embedded, by the worker's stream on a worker).
    journal: Journal | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.results, ParentResults):
            # frozen: set once here, whoever built the context (engine, worker, a test)
            object.__setattr__(self, "results", ParentResults(self.step, self.results))

    def heartbeat(self, details: Any = None) -> None:
        """Report progress (`details`: JSON-serializable, small). The latest details
        reach the next attempt as `ctx.last_heartbeat` if this one is lost. Safe to
        call from a step's thread."""
        if self.beat is not None:
            self.beat(details)

    @property
    def dedupe_key(self) -> str:
        """Stable across retries, replays and failovers: `task_id:step`."""
        return f"{self.task_id}:{self.step}"

    def guarded(self, argv: Sequence[str]) -> list[str]:
        """`argv` run under the guard shell steps run under: it and all it starts die
        with this node (even by SIGKILL) and when it ends. Start it with
        `start_new_session=True`; to end it early, `await childguard.stop(proc)`
        (`from apollo11.scheduler import childguard`; asyncio) or send the guard SIGTERM."""
        return guarded(argv)


StepFn = Callable[[StepContext], Any] | Callable[[StepContext], Awaitable[Any]]
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Step:
    name: str
    fn: StepFn
    after: tuple[str, ...]
    idempotency: Idempotency | None
    retry: Retry
    timeout: float | Literal["auto"]
    compensation_retry: Retry
    # With remote execution: only a worker started with these labels (`--labels k=v`)
    # runs it (a GPU, a region, a licence). Embedded nodes ignore them.
    labels: Mapping[str, str] = field(default_factory=dict)
    # Its attempt gets a `ctx.journal` (embedded, or on a worker through its stream): a
    # durable main, which records checkpoints as it goes (docs/durable.md).
    journaled: bool = False
    # Its compensation when it is not its idempotency's (a durable main's: it undoes
    # the NotIdempotent ctx.steps that succeeded, last first).
    compensation: StepFn | None = None
    # At most `max` of its attempts run at once per key value (scheduler/flow/).
    concurrency: tuple[Concurrency, ...] = ()
    # Memory and CPU seconds of each attempt, enforced on a worker, in a child process
    # of the attempt's own (scheduler/steplimits.py); a node refuses to run it itself.
    limits: Limits | None = None

    @property
    def compensate(self) -> StepFn | None:
        if self.compensation is not None:
            return self.compensation
        return None if self.idempotency is None else self.idempotency.compensate

    @property
    def needs_compensation(self) -> bool:
        return isinstance(self.idempotency, NotIdempotent)

    def timeout_s(
        self, history: Sequence[int] | None, default_s: float = DEFAULT_TIMEOUT_S
    ) -> float:
        """Seconds before the step is failed: fixed, or twice the P99 of past durations."""
        if self.timeout != AUTO:
            return float(self.timeout)
        if not history or len(history) < AUTO_MIN_SAMPLES:
            return default_s
        ordered = sorted(history)
        p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
        return max(1.0, 2 * p99 / 1000)


async def call_step(fn: StepFn, ctx: StepContext) -> Any:
    """Run a step function: coroutines on the loop, plain functions in a thread."""
    if inspect.iscoroutinefunction(fn):
        return await fn(ctx)
    result = await asyncio.to_thread(fn, ctx)
    if inspect.isawaitable(result):
        return await result
    return result


class StepError(Exception):
    """Raise from a step to fail it with structured details in the FAILED event.

    `final=True`: no retry follows, whatever the policy. `retry_after`: seconds; the
    next attempt begins no earlier than that long after the failure (the log's time),
    as a server's `Retry-After` asks, and no earlier than the rule's backoff either.
    Both travel in `details`, which a worker sends as they are."""

    def __init__(self, message: str, *, retry_after: float | None = None, **details: Any) -> None:
        super().__init__(message)
        if retry_after is not None:
            details["retry_after"] = retry_after
        self.details = details


class ResultNotVisible(StepError, KeyError):
    """A step read `ctx.results[name]` of a step not in its `after=`. Final: no
    attempt would see it (a KeyError still catches it)."""

    def __init__(self, step: str, name: str, after: Sequence[str]) -> None:
        super().__init__(
            f"step {step!r} read ctx.results[{name!r}], but ctx.results holds only the "
            f"results of the steps in its after={sorted(after)!r}: add {name!r} to the "
            f"step's after= to read its result",
            final=True,
        )

    def __str__(self) -> str:  # KeyError's would quote the message
        return str(self.args[0])


class ParentResults(dict[str, Any]):
    """`ctx.results`: the results of a step's direct parents (its `after=`), a plain
    dict (JSON, pickle) whose missing keys raise ResultNotVisible."""

    __slots__ = ("_step",)

    def __init__(self, step: str, results: Mapping[str, Any]) -> None:
        super().__init__(results)
        self._step = step

    def __missing__(self, name: str) -> Any:
        raise ResultNotVisible(self._step, name, list(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return (ParentResults, (self._step, dict(self)))


# A workflow's input and result types: its `input=` and `result=` models, Any when it
# declares none (the defaults, PEP 696: `Workflow("etl")` is a Workflow[Any, Any]).
# What a client's submit(workflow, input) takes and what its handle's result() gives.
InputT = typing_extensions.TypeVar("InputT", default=Any)
ResultT = typing_extensions.TypeVar("ResultT", default=Any)


@dataclass
class Workflow(Generic[InputT, ResultT]):
    """A named, versioned DAG of steps.

    Typed by its models: `Workflow("invoice", input=InvoiceInput,
    result=InvoiceResult)` is a `Workflow[InvoiceInput, InvoiceResult]`, and a
    client's `submit(invoice, InvoiceInput(...))` returns a handle whose `result()`
    is an `InvoiceResult`.

    `compensate_on_cancel`: when the task is cancelled, the steps that
    declared a compensation action and had succeeded are compensated,
    dependents first.
    """

    name: str
    version: int = 1
    description: str = ""
    compensate_on_cancel: bool = True
    steps: dict[str, Step] = field(default_factory=dict)
    _errors: list[str] = field(default_factory=list)
    # A pydantic model the input must fit (scheduler/typed.py): checked at submit,
    # and each step's ctx.input is an instance of it. None: any JSON.
    input: type[InputT] | None = None
    # A pydantic model the task's result must fit (scheduler/typed.py): the one final
    # step's, checked before it can succeed and recorded as the model's JSON. None:
    # any JSON.
    result: type[ResultT] | None = None
    # Flow control (scheduler/flow/): one declaration or a list; checked at registration.
    concurrency: Concurrency | Sequence[Concurrency] | None = None
    rate: Rate | Sequence[Rate] | None = None
    debounce: Debounce | None = None
    # The key whose values take turns for slots (a tenant): a path or a function.
    fairness: Key | None = None
    # What a step failing for good does to the task when its Retry says nothing
    # (on_exhausted=None): "fail", "pause" or "compensate" (scheduler/retrypolicy.py).
    on_exhausted: Exhausted | None = None

    def step(
        self,
        *,
        name: str | None = None,
        after: Sequence[str] = (),
        idempotency: Idempotency | None = None,
        retry: Retry | None = None,
        timeout: float | Literal["auto"] = AUTO,
        compensation_retry: Retry | None = None,
        labels: Mapping[str, str] | None = None,
        concurrency: Concurrency | Sequence[Concurrency] | None = None,
        limits: Limits | None = None,
    ) -> Callable[[F], F]:
        """Decorator adding a step. Validation happens at registration."""
        # one or a list, kept as given: what is not a Concurrency is refused at
        # registration, naming the step (a decorator's error would name no workflow)
        held: tuple[Any, ...] = ()
        if isinstance(concurrency, list | tuple):
            held = tuple(concurrency)
        elif concurrency is not None:
            held = (concurrency,)

        def add(f: F) -> F:
            self.add_step(
                Step(
                    name=name or str(getattr(f, "__name__", "")),
                    fn=f,
                    after=tuple(after),
                    idempotency=idempotency,
                    retry=retry or Retry(),
                    timeout=timeout,
                    compensation_retry=compensation_retry
                    or Retry(attempts=1_000_000, max_backoff_s=300),
                    labels=dict(labels or {}),
                    concurrency=held,
                    limits=limits,
                )
            )
            return f

        return add

    def add_step(self, step: Step) -> None:
        if step.name in self.steps:
            self._errors.append(f"step {step.name!r} is defined twice")
        self.steps[step.name] = self._typed(step)

    def runnable(self, name: str) -> StepFn:
        """Step `name`'s function as a registered workflow runs it: under the workflow's
        models, even ones set after its steps (a step's own process imports the module
        and never registers the workflow)."""
        return self._typed(self.steps[name]).fn

    def _typed(self, step: Step) -> Step:
        """`step` under the workflow's models: given the input model, its result
        checked (typing a typed step again changes nothing). Done as each step is added
        because a step's own process finds it in its module, never registered; done
        again at registration for a model set after the steps."""
        if self.input is not None and typed.is_model(self.input):
            step = typed.typed(step, self.input)
        if self.result is not None and typed.is_model(self.result):
            step = self._result_checked(step)
        return step

    def _result_checked(self, step: Step) -> Step:
        # every step is wrapped, not just the final one: which step ends the DAG is
        # known only once all are added, and a step's process never registers it
        fn = typed.result_checked(step.fn, functools.partial(self.fit_result, step.name))
        return step if fn is step.fn else dataclasses.replace(step, fn=fn)

    def fit_result(self, step: str, out: Any) -> Any:
        """What step `step` returned, as the log keeps it: the result model's JSON when
        the workflow declares one and `step` ends it (no step depends on it); `out` as
        it is otherwise. Raises StepError naming each field at fault, which fails the
        attempt: a result that does not fit is never recorded."""
        if self.result is None or step not in self.final_steps():
            return out
        fitted, wrong = typed.result_json(self.result, out)
        if wrong is not None:
            raise StepError(wrong)
        return fitted

    def check_input(self, raw: Any) -> None:
        """Refuse an input that does not fit the workflow's model (InvalidArgumentError
        naming the fields); any input when it declares none."""
        if self.input is not None:
            typed.check_input(self.input, raw)

    def input_schema(self) -> dict[str, Any] | None:
        """The input model's JSON Schema; None for an untyped workflow."""
        return None if self.input is None else typed.schema(self.input)

    def result_schema(self) -> dict[str, Any] | None:
        """The result model's JSON Schema; None when the workflow declares none."""
        return None if self.result is None else typed.schema(self.result)

    def final_steps(self) -> list[str]:
        """The steps no other step depends on: with a result model, exactly one, whose
        result is the task's."""
        needed = {d for s in self.steps.values() for d in s.after}
        return [name for name in self.steps if name not in needed]

    @property
    def deps(self) -> dict[str, list[str]]:
        return {s.name: list(s.after) for s in self.steps.values()}

    @functools.cached_property
    def compensating_steps(self) -> frozenset[str]:
        """Steps that declared a compensation (computed once, after registration)."""
        return frozenset(s.name for s in self.steps.values() if s.needs_compensation)

    @functools.cached_property
    def flow(self) -> FlowSpec:
        """Its flow control, each limit with its id (the one registration checked)."""
        return self._declare_flow()[0]

    def _declare_flow(self) -> tuple[FlowSpec, list[str]]:
        return declare(
            self.name,
            concurrency=self.concurrency,
            rate=self.rate,
            debounce=self.debounce,
            fairness=self.fairness,
            steps={s.name: s.concurrency for s in self.steps.values() if s.concurrency},
        )

    @functools.cached_property
    def dependents(self) -> dict[str, list[str]]:
        """step -> the steps that directly depend on it (computed once, after registration)."""
        return dependents(self.deps)

    def validate(self) -> None:
        """Raise WorkflowDefinitionError naming the workflow and the step at fault."""
        where = f"workflow {self.name!r} v{self.version}"
        problems = list(self._errors)
        if not self.name:
            problems.append("it has no name")
        if self.version < 1:
            problems.append(f"version must be 1 or more, got {self.version}")
        if not self.steps:
            problems.append("it has no steps")
        if self.input is not None and not typed.is_model(self.input):
            problems.append(f"input= must be a pydantic model class, got {self.input!r}")
        if self.result is not None and not typed.is_model(self.result):
            problems.append(f"result= must be a pydantic model class, got {self.result!r}")
        elif self.result is not None and len(finals := self.final_steps()) > 1:
            problems.append(
                f"result= is the result of the one step that ends the workflow, but "
                f"{len(finals)} do ({', '.join(map(repr, finals))}): add a step after them "
                f"that returns the task's result"
            )
        if self.on_exhausted is not None and self.on_exhausted not in EXHAUSTED:
            problems.append(
                f"on_exhausted must be one of {', '.join(map(repr, EXHAUSTED))} or None, "
                f"got {self.on_exhausted!r}"
            )
        # a model set after some steps were added: those are typed here, at registration
        for name, step in list(self.steps.items()):
            self.steps[name] = self._typed(self._exhausting(step))
        for s in self.steps.values():
            if not s.name:
                problems.append("a step has no name")
            if s.idempotency is None:
                problems.append(
                    f"step {s.name!r} does not declare how it is safe to run again: pass "
                    f"idempotency=Idempotent(), DedupeKey(), Checkpoint() or "
                    f"NotIdempotent(compensate=...)"
                )
            elif isinstance(s.idempotency, NotIdempotent) and s.idempotency.compensate is None:
                problems.append(
                    f"step {s.name!r} is not idempotent and names no compensation action"
                )
            for d in s.after:
                if d not in self.steps:
                    problems.append(f"step {s.name!r} depends on unknown step {d!r}")
                if d == s.name:
                    problems.append(f"step {s.name!r} depends on itself")
            if s.timeout != AUTO and (not isinstance(s.timeout, int | float) or s.timeout <= 0):
                problems.append(f"step {s.name!r} timeout must be seconds > 0 or 'auto'")
            if not callable(s.fn):
                problems.append(f"step {s.name!r} is not callable")
            problems += _retry_problems(s)
            problems += _limits_problems(s)
        flow, wrong = self._declare_flow()
        problems += wrong
        if not problems:
            cycle = find_cycle(self.deps)
            if cycle:
                problems.append(f"steps form a cycle: {' -> '.join(cycle)}")
        if problems:
            raise WorkflowDefinitionError(f"{where}: " + "; ".join(problems))
        # the spec just checked is the one submissions use, even if `flow` was read before
        self.__dict__["flow"] = flow

    def topo_order(self) -> list[str]:
        return topo_order(self.deps)

    def _exhausting(self, step: Step) -> Step:
        """`step` with the workflow's `on_exhausted` where its retry says none: what its
        failures are judged by on every node (a rule in `on` inherits its policy's)."""
        default = self.on_exhausted
        policy = step.retry
        if default not in EXHAUSTED or not isinstance(policy, Retry) or policy.on_exhausted:
            return step
        return dataclasses.replace(step, retry=dataclasses.replace(policy, on_exhausted=default))


def _retry_problems(s: Step) -> list[str]:
    """What is wrong with a step's retry policies, each naming the step."""
    out: list[str] = []
    for what, policy in (("retry", s.retry), ("compensation_retry", s.compensation_retry)):
        if not isinstance(policy, Retry):
            out.append(f"step {s.name!r} {what} must be a Retry, got {policy!r}")
        else:
            out += [f"step {s.name!r} {what}: {p}" for p in policy.problems()]
    return out


def _limits_problems(s: Step) -> list[str]:
    """What is wrong with a step's limits, each naming the step."""
    if s.limits is None:
        return []
    if not isinstance(s.limits, Limits):
        return [f"step {s.name!r} limits must be a Limits(memory=..., cpu_s=...), got {s.limits!r}"]
    out = [f"step {s.name!r} {p}" for p in s.limits.problems()]
    if s.journaled:
        out.append(f"step {s.name!r} is a durable main, which runs on its worker's loop: no limits")
    return out


def flow_record(wf: Workflow, input: Any, *, priority: int, now_ms: int) -> dict[str, Any] | None:
    """TASK_SUBMITTED's `"flow"` for a submission of `input` (its raw JSON) to `wf` at
    log time `now_ms` (scheduler/flow/spec.py); None when `wf` declares no flow control
    and `priority` is the default, 3. Raises InvalidArgumentError naming the field: a
    priority outside 1 to 5, a key the input gives no usable value for."""
    return wf.flow.record(input, priority=priority, now_ms=now_ms)


def find_cycle(deps: Mapping[str, Sequence[str]]) -> list[str] | None:
    """A cycle in the dependency graph as a list of step names, or None."""
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for d in deps.get(n, ()):
            if state.get(d) == 1:
                return [*stack[stack.index(d) :], d]
            if d in deps and d not in state:
                found = visit(d)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for name in deps:
        if name not in state:
            found = visit(name)
            if found:
                return found
    return None


def topo_order(deps: Mapping[str, Sequence[str]]) -> list[str]:
    """Steps in an order where each comes after everything it depends on."""
    order: list[str] = []
    seen: set[str] = set()

    def visit(n: str) -> None:
        if n in seen:
            return
        seen.add(n)
        for d in deps.get(n, ()):
            visit(d)
        order.append(n)

    for name in deps:
        visit(name)
    return order


def dependents(deps: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """step -> the steps that directly depend on it."""
    out: dict[str, list[str]] = {n: [] for n in deps}
    for n, ds in deps.items():
        for d in ds:
            out.setdefault(d, []).append(n)
    return out


_OLD_ROOTS = frozenset({"scheduler", "replicator", "lease"})


class Registry:
    """The workflows a node can run, by name and version."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, int], Workflow] = {}
        self._latest: dict[str, Workflow] = {}
        # Schedules declared beside the workflows (schedules/declared.py), by id.
        self.schedules: dict[str, Schedule] = {}
        # Flow-control limits by id (scheduler/flow/): a global name has one max.
        self._limits = RegisteredLimits()

    def register(self, wf: Workflow) -> Workflow:
        wf.validate()
        key = (wf.name, wf.version)
        where = f"workflow {wf.name!r} v{wf.version}"
        if key in self._by_key and self._by_key[key] is not wf:
            raise WorkflowDefinitionError(
                f"{where} is registered twice; bump the version when its steps change"
            )
        clashes = self._limits.conflicts(where, wf.flow)
        if clashes:
            raise WorkflowDefinitionError(f"{where}: " + "; ".join(clashes))
        self._limits.add(where, wf.flow)
        self._by_key[key] = wf
        if wf.name not in self._latest or self._latest[wf.name].version < wf.version:
            self._latest[wf.name] = wf
        return wf

    def get(self, name: str, version: int | None = None) -> Workflow | None:
        if version is None:
            return self._latest.get(name)
        return self._by_key.get((name, version))

    def require(self, name: str, version: int | None = None) -> Workflow:
        """`get`, or NotFoundError naming what is loaded (a submission, DescribeWorkflow)."""
        found = self.get(name, version)
        if found is None:
            which = f"{name!r}" + (f" v{version}" if version else "")
            known = ", ".join(self.names()) or "none"
            raise NotFoundError(f"unknown workflow {which} (loaded: {known})")
        return found

    def names(self) -> list[str]:
        return sorted(self._latest)

    def needs_worker(self, name: str, version: int, step: str) -> bool:
        """Does the step declare limits, which only a worker enforces?"""
        wf = self._by_key.get((name, version))
        found = None if wf is None else wf.steps.get(step)
        return found is not None and found.limits is not None

    def limited_steps(self) -> list[str]:
        """Every step that declares limits, as `workflow 'x' v1 step 'y'`."""
        return [
            f"workflow {wf.name!r} v{wf.version} step {s.name!r}"
            for wf in self.all()
            for s in wf.steps.values()
            if s.limits is not None
        ]

    def all(self) -> list[Workflow]:
        """Every registered workflow, each of its versions, by name then version (what a
        worker tells the primary it can run)."""
        return [self._by_key[k] for k in sorted(self._by_key)]

    def load_module(self, module_name: str) -> list[Workflow]:
        """Import a module and register every Workflow defined at its top level."""
        import importlib

        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            hint = ""
            if module_name.split(".")[0] in _OLD_ROOTS:
                # Apollo-11's own modules moved under one import root (apollo11.*).
                hint = f" (Apollo-11's modules are under apollo11.: apollo11.{module_name}?)"
            raise WorkflowDefinitionError(
                f"cannot import workflow module {module_name!r}: {e}{hint}"
            ) from e
        found = [v for v in vars(module).values() if isinstance(v, Workflow)]
        declared = [v for v in vars(module).values() if isinstance(v, Schedule)]
        if not found and not declared:
            raise WorkflowDefinitionError(f"module {module_name!r} defines no Workflow")
        for s in declared:
            known = self.schedules.get(s.schedule_id)
            if known is not None and known is not s:
                raise WorkflowDefinitionError(
                    f"schedule {s.schedule_id!r} is declared twice ({module_name} and before)"
                )
            self.schedules[s.schedule_id] = s
        return [self.register(wf) for wf in found]
