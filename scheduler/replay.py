"""Replay: the state of every task as a fold over the event log.

`apply(state, event)` is deterministic: no I/O, no clocks, time comes from the
event. The same log gives the same state on every machine, which is what
lets a standby take over and an auditor reconstruct any past moment.

`apply` updates `state` in place and returns it: copying the state per event
would cost more than everything else replay does. Nothing but `apply`
mutates a State.

Transitions the step state machine does not allow are facts too (the log is
the truth), so they are applied as far as they make sense and flagged as
anomalies on the task, never silently accepted and never raised. An event
type replay does not know is different: that log cannot be understood, and
`apply` raises.
"""

from __future__ import annotations

import bisect
import heapq
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from apollo11.scheduler import waits as _waits
from apollo11.scheduler.errors import ReplayError
from apollo11.scheduler.log.record import Event, EventType
from apollo11.scheduler.taskstatus import StepStatus as StepStatus
from apollo11.scheduler.taskstatus import TaskStatus as TaskStatus

DURATION_HISTORY = 100  # per (workflow, step): what `timeout="auto"` looks at
MAX_STATE_ANOMALIES = 1000


TERMINAL = frozenset(
    {
        TaskStatus.SUCCEEDED,
        TaskStatus.FAILED,
        TaskStatus.CANCELLED,
        TaskStatus.NONDETERMINISTIC,
    }
)


DONE = frozenset({StepStatus.SUCCEEDED, StepStatus.SKIPPED})  # dependents may run
BUSY = frozenset({StepStatus.STARTED, StepStatus.COMPENSATING})  # something is executing

# Local aliases: replay compares statuses hundreds of thousands of times a second.
_PENDING = StepStatus.PENDING
_STARTED = StepStatus.STARTED
_SUCCEEDED = StepStatus.SUCCEEDED
_FAILED = StepStatus.FAILED
_COMPENSATING = StepStatus.COMPENSATING
_COMPENSATED = StepStatus.COMPENSATED
_WAITING = StepStatus.WAITING
_T_CANCELLED = TaskStatus.CANCELLED
_T_FAILED = TaskStatus.FAILED
_T_SUCCEEDED = TaskStatus.SUCCEEDED
_T_RUNNING = TaskStatus.RUNNING
_T_PENDING = TaskStatus.PENDING
_T_WAITING = TaskStatus.WAITING
_T_NONDETERMINISTIC = TaskStatus.NONDETERMINISTIC


class StepState:
    """One step of one task. A plain class, not a dataclass: a task creates one per
    step at submission, and setting only `name` (the rest are class defaults until
    first written) makes that 5x cheaper, which replay speed is made of."""

    status: StepStatus = StepStatus.PENDING
    attempt: int = 0
    started_ms: int | None = None
    finished_ms: int | None = None
    result: Any = None
    error: str | None = None
    final: bool = False  # failed, and no automatic retry will follow (kept through compensation)
    lost: bool = False  # the last failure was a node dying mid-step
    losses: int = 0  # attempts interrupted by a node dying (they do not use up retries)
    compensations: int = 0
    compensation_error: str | None = None
    owed: bool = False  # a compensation is owed (recorded by the engine, cleared by COMPENSATED)
    override: dict[str, Any] | None = None  # the last operator action
    anomaly: str | None = None
    # The current (or last) attempt: where it runs (a worker's name; None: embedded)
    # and its token, the term and event id of its STARTED. A worker's result counts
    # only for the current token.
    worker: str | None = None
    started_term: int = 0
    started_event: int = 0
    heartbeat: Any = None  # the last heartbeat details a lost attempt reported
    waits: int = 0  # attempts that ended in a WAIT (a durable main): they use no retries

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"StepState({self.name!r}, {self.status.value}, attempt={self.attempt})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StepState) and _step_dict(self) == _step_dict(other)

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StepState:
        s = cls(sys.intern(d["name"]))
        for key, value in d.items():
            if key in _STEP_FIELDS and value != getattr(cls, key):
                setattr(s, key, value)
        s.status = StepStatus(d.get("status", "PENDING"))
        return s


class DurableState:
    """What the log holds of a durable task (docs/durable.md): its checkpoints, in
    `seq` order (the CHECKPOINT payloads), the wait in force (a WAIT payload) and the
    last non-determinism report. `matched` is derived, never serialized: the first
    EVENT with the wait's key at or after its `since` (recomputed by `reindex`)."""

    __slots__ = ("checkpoints", "matched", "nondeterminism", "wait")

    def __init__(
        self,
        checkpoints: list[dict[str, Any]] | None = None,
        wait: dict[str, Any] | None = None,
        nondeterminism: dict[str, Any] | None = None,
    ) -> None:
        self.checkpoints: list[dict[str, Any]] = checkpoints if checkpoints is not None else []
        self.wait = wait
        self.nondeterminism = nondeterminism
        self.matched: int | None = None

    def __repr__(self) -> str:
        return f"DurableState({len(self.checkpoints)} checkpoints, wait={self.wait!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DurableState) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def to_dict(self) -> dict[str, Any]:
        return {
            "checkpoints": self.checkpoints,
            "wait": self.wait,
            "nondeterminism": self.nondeterminism,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DurableState:
        return cls(
            [dict(c) for c in d.get("checkpoints") or ()],
            _interned(d["wait"]) if d.get("wait") else None,
            d.get("nondeterminism"),
        )


def _interned(payload: Mapping[str, Any]) -> dict[str, Any]:
    """A copy whose short strings are shared: a wait's kind, name and input hash are
    the same for every task waiting at that point of a workflow."""
    return {
        k: sys.intern(v) if isinstance(v, str) and len(v) <= 64 else v for k, v in payload.items()
    }


@dataclass(slots=True)
class TaskState:
    task_id: str
    workflow: str
    version: int
    input: Any
    deps: dict[str, list[str]]  # step -> the steps it needs; insertion order = declaration order
    steps: dict[str, StepState]
    status: TaskStatus = TaskStatus.PENDING
    submitted_ms: int = 0
    updated_ms: int = 0
    first_event_id: int = 0
    last_event_id: int = 0
    idempotency_key: str | None = None
    cancelled: dict[str, Any] | None = None
    done: int = 0  # steps SUCCEEDED or SKIPPED
    busy: int = 0  # steps STARTED or COMPENSATING
    failed_final: int = 0  # steps marked final: failed with no automatic retry left
    owed: int = 0  # steps whose compensation is owed and not done yet
    touched: bool = False  # any step event seen
    anomalies: list[str] = field(default_factory=list)
    # Every event of this task, in order: its history is read by id, not by scanning
    # the log between its first and last event (other tasks' events, maybe millions).
    # None for tasks from snapshots written before this was kept.
    event_ids: list[int] | None = None
    durable: DurableState | None = None  # a durable task's checkpoints and wait, once it has one
    # A spawned task's parent: {"task_id", "seq" (the spawn's position), "close" (the
    # parent-close policy: "cancel" or "abandon")}; None for a task submitted by a client.
    parent: dict[str, Any] | None = None
    # Its trace context (scheduler/tracing.py): {"traceparent", "parent"}; None: untraced.
    trace: dict[str, Any] | None = None

    @property
    def quiescent(self) -> bool:
        """Terminal, nothing running, no compensation owed: only an operator can change it."""
        return self.status in TERMINAL and self.busy == 0 and self.owed == 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "workflow": self.workflow,
            "version": self.version,
            "input": self.input,
            "deps": self.deps,
            "steps": [_step_dict(s) for s in self.steps.values()],
            "status": self.status.value,
            "submitted_ms": self.submitted_ms,
            "updated_ms": self.updated_ms,
            "first_event_id": self.first_event_id,
            "last_event_id": self.last_event_id,
            "idempotency_key": self.idempotency_key,
            "cancelled": self.cancelled,
            "done": self.done,
            "busy": self.busy,
            "failed_final": self.failed_final,
            "owed": self.owed,
            "touched": self.touched,
            "anomalies": self.anomalies,
            "event_ids": self.event_ids,
            # only when present: DAG tasks' dicts, snapshots and golden files stay as they were
            **({"durable": self.durable.to_dict()} if self.durable is not None else {}),
            **({"parent": self.parent} if self.parent is not None else {}),
            **({"trace": self.trace} if self.trace is not None else {}),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TaskState:
        fields = dict(d)
        fields["deps"] = shared_deps(fields["deps"])
        fields["workflow"] = sys.intern(fields["workflow"])
        steps = [StepState.from_dict(s) for s in fields.pop("steps")]
        durable = fields.pop("durable", None)
        t = cls(steps={s.name: s for s in steps}, **fields)
        if durable is not None:
            t.durable = DurableState.from_dict(durable)
        t.status = TaskStatus(t.status)
        return t


_STEP_FIELDS = frozenset(
    {
        "attempt",
        "started_ms",
        "finished_ms",
        "result",
        "error",
        "final",
        "lost",
        "losses",
        "compensations",
        "compensation_error",
        "owed",
        "override",
        "anomaly",
        "worker",
        "started_term",
        "started_event",
        "heartbeat",
        "waits",
    }
)
# Kept in a task's dict (a snapshot, an archive record) only when set: the embedded
# attempts' dicts, snapshots and golden files stay as they were.
_STEP_OPTIONAL = ("worker", "started_term", "started_event", "heartbeat")


def _step_dict(s: StepState) -> dict[str, Any]:
    d = {
        "name": s.name,
        "status": s.status.value,
        "attempt": s.attempt,
        "started_ms": s.started_ms,
        "finished_ms": s.finished_ms,
        "result": s.result,
        "error": s.error,
        "final": s.final,
        "lost": s.lost,
        "losses": s.losses,
        "compensations": s.compensations,
        "compensation_error": s.compensation_error,
        "owed": s.owed,
        "override": s.override,
        "anomaly": s.anomaly,
    }
    if s.worker is not None or s.heartbeat is not None:
        for key in _STEP_OPTIONAL:
            d[key] = getattr(s, key)
    if s.waits:
        d["waits"] = s.waits
    return d


class Summary(NamedTuple):
    """A task in one line, for listings."""

    task_id: str
    workflow: str
    status: TaskStatus
    submitted_ms: int
    updated_ms: int
    done: int
    total: int


def summarize(t: TaskState) -> Summary:
    return Summary(
        t.task_id, t.workflow, t.status, t.submitted_ms, t.updated_ms, t.done, len(t.steps)
    )


_DEPS: dict[tuple[tuple[str, tuple[str, ...]], ...], dict[str, list[str]]] = {}
_DEPS_MAX = 10_000  # distinct DAG shapes kept (a shell DAG may be one of a kind)


def shared_deps(deps: dict[str, list[str]]) -> dict[str, list[str]]:
    """One dict per DAG shape, shared by every task of that shape: every task of a
    workflow version has the same, and nothing changes a task's deps once submitted
    (a sleeping durable task's state is mostly such constants: docs/benchmarks.md)."""
    key = tuple((name, tuple(after)) for name, after in deps.items())
    found = _DEPS.get(key)
    if found is None:
        if len(_DEPS) >= _DEPS_MAX:
            return deps
        found = _DEPS[key] = deps
    return found


def outcome(t: TaskState) -> dict[str, Any]:
    """A finished task as its parent sees it: {"status", "result", "error"}. The result
    is a durable task's main's, or each step's by name (as the client's `result`);
    the error, the first failed step's, or the cancel's reason."""
    status = t.status.value
    result: Any = None
    if status == "SUCCEEDED":
        if t.durable is not None and list(t.steps) == ["main"]:
            result = t.steps["main"].result
        else:
            result = {name: s.result for name, s in t.steps.items()}
    error = None
    if t.cancelled is not None:
        error = str(t.cancelled.get("reason") or "cancelled")
    else:
        error = next((s.error for s in t.steps.values() if s.status is _FAILED and s.error), None)
    return {"status": status, "result": result, "error": error}


class TaskStore:
    """Where tasks that are not in memory live (the snapshot archive).

    Replay only needs `get`: a task evicted from memory comes back when an
    event names it again. The store is immutable derived data, so reading it
    does not break determinism.
    """

    def get(self, task_id: str) -> TaskState | None:
        raise NotImplementedError

    def __contains__(self, task_id: str) -> bool:
        raise NotImplementedError

    def iter_tasks(self) -> Iterator[TaskState]:
        raise NotImplementedError

    def task_for_key(self, key: str) -> TaskState | None:
        """The newest archived task submitted with idempotency key `key`."""
        raise NotImplementedError

    def summaries_before(self, before: str | None) -> Iterator[tuple[str, int, Summary]]:
        """(task_id, -rank, summary), newest task id first; ranks from 1, newest copy
        first; a task may come several times (see State.list_summaries)."""
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError


LIST_SCAN_LIMIT = 20_000  # tasks one listing call looks at, at most (~40 ms on the loop)


def _row_key(row: tuple[str, int, Summary]) -> tuple[str, int]:
    return row[0], row[1]


@dataclass(slots=True)
class State:
    """Everything the log says, as of `last_event_id`."""

    tasks: dict[str, TaskState] = field(default_factory=dict)  # in memory
    last_event_id: int = 0
    term: int = 0
    terms: list[tuple[int, int]] = field(default_factory=list)  # (term, its first event id)
    # idempotency key -> task id, for the tasks in memory (the archive indexes the rest)
    idempotency: dict[str, str] = field(default_factory=dict)
    # workflow -> step -> recent durations in ms, newest last (what timeout="auto" reads)
    durations: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    anomalies: list[str] = field(default_factory=list)  # about events naming no known task
    archive: TaskStore | None = None
    # External events (EVENT records): key -> [(event_id, payload)] in log order, and
    # idempotency key -> the event it recorded (a duplicate is recorded once).
    events: dict[str, list[tuple[int, Any]]] = field(default_factory=dict)
    event_keys: dict[str, int] = field(default_factory=dict)
    # an event idempotency key's end (ms, the log's clock: the EVENT's time plus the TTL it
    # recorded); gone from event_keys then, at the next EVENT. None: kept (older logs).
    event_key_expires: dict[str, int] = field(default_factory=dict)
    # Derived (rebuilt by load_events): (expires, key), earliest first
    event_key_heap: list[tuple[int, str]] = field(default_factory=list, compare=False)
    # Derived (not serialized; `reindex` rebuilds it): event key -> the tasks waiting on it.
    waits: dict[str, set[str]] = field(default_factory=dict)

    def first_event(self, key: str, since: int) -> tuple[int, Any] | None:
        """The first event with `key` at or after event id `since`: (event_id, payload)."""
        refs = self.events.get(key)
        if not refs:
            return None
        i = bisect.bisect_left(refs, since, key=_ref_id)
        return refs[i] if i < len(refs) else None

    def events_dict(self) -> dict[str, Any]:
        """The event index as JSON (snapshots, `to_dict`); {} when there is none."""
        if not self.events:
            return {}
        out: dict[str, Any] = {
            "by_key": {k: [list(r) for r in v] for k, v in sorted(self.events.items())},
            "keys": dict(sorted(self.event_keys.items())),
        }
        if self.event_key_expires:
            out["expires"] = dict(sorted(self.event_key_expires.items()))
        return {"events": out}

    def load_events(self, d: Mapping[str, Any] | None) -> None:
        """Restore what `events_dict` wrote (its "events" entry)."""
        if not d:
            return
        self.events = {k: [(int(i), p) for i, p in v] for k, v in d["by_key"].items()}
        self.event_keys = {k: int(v) for k, v in d["keys"].items()}
        self.event_key_expires = {k: int(v) for k, v in (d.get("expires") or {}).items()}
        self.event_key_heap = sorted((v, k) for k, v in self.event_key_expires.items())

    def task(self, task_id: str) -> TaskState | None:
        """The task, from memory or (faulted back in) from the archive."""
        t = self.tasks.get(task_id)
        if t is None and self.archive is not None:
            t = self.archive.get(task_id)
            if t is not None:
                self.tasks[task_id] = t
        return t

    def peek(self, task_id: str) -> TaskState | None:
        """Read a task without bringing it back into memory."""
        t = self.tasks.get(task_id)
        if t is None and self.archive is not None:
            t = self.archive.get(task_id)
        return t

    def iter_tasks(self) -> Iterator[TaskState]:
        """Every task once, memory first (memory is newer than the archive)."""
        yield from self.tasks.values()
        if self.archive is not None:
            for t in self.archive.iter_tasks():
                if t.task_id not in self.tasks:
                    yield t

    def list_summaries(
        self,
        match: Callable[[Summary], bool] | None = None,
        before: str | None = None,
        limit: int = 50,
        scan_limit: int = LIST_SCAN_LIMIT,
        archived: bool = True,
    ) -> tuple[list[Summary], str | None]:
        """Up to `limit` tasks that `match`, newest first, with task ids below `before`;
        and where the next page starts (None: nothing more).

        Task ids sort by submission time, and the archive keeps its summaries in
        that order, so a page reads about `limit` summaries, not the history. A
        filter that matches rarely would read far: at most `scan_limit` tasks are
        looked at, and the page then ends early (maybe empty) with a position to
        go on from. `archived=False` leaves the archive out: what is there is
        finished (a task that changed since is in memory), so a filter on PENDING or
        RUNNING need not read it.
        """
        mem = sorted(
            (
                (t.task_id, 0, summarize(t))
                for t in self.tasks.values()
                if before is None or t.task_id < before
            ),
            key=_row_key,
            reverse=True,
        )
        rows: Iterator[tuple[str, int, Summary]] = iter(mem)
        if self.archive is not None and archived:
            rows = heapq.merge(
                rows, self.archive.summaries_before(before), key=_row_key, reverse=True
            )
        out: list[Summary] = []
        last: str | None = None
        scanned = 0
        for task_id, _, s in rows:
            if task_id == last:
                continue  # an older copy of a task already seen (memory, newer chunks first)
            last = task_id
            if match is None or match(s):
                if len(out) == limit:
                    return out, out[-1].task_id
                out.append(s)
            scanned += 1
            if scanned >= scan_limit:
                return out, task_id
        return out, None

    def list_filtered(
        self,
        status: str | None,
        workflow: str,
        before: str | None,
        limit: int,
        *,
        prefix: str = "",
        since_ms: int | None = None,
        until_ms: int | None = None,
    ) -> tuple[list[Summary], str | None]:
        """list_summaries by task state (a TaskStatus value), workflow, task id prefix
        and submission time (since inclusive, until exclusive), each empty or None for
        any: what ListTasks and the tasks page show."""

        def match(s: Summary) -> bool:
            return (
                (not status or s.status.value == status)
                and (not workflow or s.workflow == workflow)
                and (not prefix or s.task_id.startswith(prefix))
                and (since_ms is None or s.submitted_ms >= since_ms)
                and (until_ms is None or s.submitted_ms < until_ms)
            )

        filtered = status or workflow or prefix or since_ms is not None or until_ms is not None
        return self.list_summaries(
            match if filtered else None,
            before,
            limit,
            archived=not status or TaskStatus(status) in TERMINAL,
        )

    def task_for_key(self, key: str) -> TaskState | None:
        """The newest task submitted with idempotency key `key`, wherever it lives."""
        task_id = self.idempotency.get(key)
        if task_id is not None:
            return self.peek(task_id)
        t = self.archive.task_for_key(key) if self.archive is not None else None
        return None if t is None else self.tasks.get(t.task_id, t)

    def all_keys(self) -> dict[str, str]:
        """Every idempotency key and its newest task (memory and archive; for audits
        and tests: it reads the whole archive)."""
        newest: dict[str, TaskState] = {}
        for t in self.iter_tasks():
            k = t.idempotency_key
            if k and (k not in newest or newest[k].first_event_id < t.first_event_id):
                newest[k] = t
        out = {k: t.task_id for k, t in newest.items()}
        out.update(self.idempotency)
        return out

    def count_tasks(self) -> int:
        if self.archive is None:
            return len(self.tasks)
        return sum(1 for _ in self.iter_tasks())

    def to_dict(self) -> dict[str, Any]:
        """The logical state: equal for equal logs, wherever the tasks live."""
        return {
            "last_event_id": self.last_event_id,
            "term": self.term,
            "terms": [list(t) for t in self.terms],
            "idempotency": dict(sorted(self.all_keys().items())),
            "durations": {
                wf: {st: h[-DURATION_HISTORY:] for st, h in sorted(per.items())}
                for wf, per in sorted(self.durations.items())
            },
            "anomalies": list(self.anomalies),
            "tasks": {t.task_id: t.to_dict() for t in sorted(self.iter_tasks(), key=_by_id)},
            **self.events_dict(),
        }


def _by_id(t: TaskState) -> str:
    return t.task_id


def _ref_id(ref: tuple[int, Any]) -> int:
    return ref[0]


def reindex(state: State) -> State:
    """Rebuild what replay derives and snapshots do not carry: which tasks wait on
    which event key, and the event each such wait has matched."""
    state.waits = {}
    for task in state.tasks.values():
        d = task.durable
        if d is None:
            continue
        d.matched = None
        w = d.wait
        if w is not None and task.cancelled is None:
            _index_wait(state, task, w)
    return state


# ------------------------------------------------------------------- apply


def apply(state: State, event: Event) -> State:
    """Fold one event into the state (in place) and return it."""
    try:
        handler = _HANDLERS[event.event_type]
    except KeyError:
        raise ReplayError(
            f"event {event.event_id} has unknown type {event.event_type!r}; "
            f"this log needs a newer Apollo-11"
        ) from None
    handler(state, event)
    state.last_event_id = event.event_id
    if event.term > state.term:
        state.term = event.term
    return state


def apply_all(state: State, events: Iterable[Event]) -> State:
    handlers = _HANDLERS
    term = state.term
    last = state.last_event_id
    try:
        for event in events:
            handler = handlers.get(event.event_type)
            if handler is None:
                apply(state, event)  # raises with the message
            handler(state, event)  # type: ignore[misc]
            last = event.event_id
            if event.term > term:
                term = event.term
    finally:
        state.last_event_id = last
        state.term = term
    return state


def replay(events: Iterable[Event], state: State | None = None) -> State:
    return apply_all(state if state is not None else State(), events)


def _state_anomaly(state: State, event: Event, what: str) -> None:
    if len(state.anomalies) < MAX_STATE_ANOMALIES:
        state.anomalies.append(f"event {event.event_id}: {what}")


def _task_for(state: State, event: Event) -> TaskState | None:
    task = state.task(event.task_id)
    if task is None:
        _state_anomaly(state, event, f"{event.event_type.name} for unknown task {event.task_id!r}")
        return None
    task.last_event_id = event.event_id
    task.updated_ms = event.timestamp
    if task.event_ids is not None:
        task.event_ids.append(event.event_id)
    return task


def _flag(task: TaskState, step: StepState | None, event: Event, what: str) -> None:
    note = f"event {event.event_id}: {what}"
    task.anomalies.append(note)
    if step is not None:
        step.anomaly = note


def _move(task: TaskState, step: StepState, to: StepStatus) -> None:
    """Change a step's status, keeping the task's counters and status right."""
    was = step.status
    if was in DONE:
        task.done -= 1
    elif was in BUSY:
        task.busy -= 1
    step.status = to
    task.touched = True
    if to in DONE:
        task.done += 1
    elif to in BUSY:
        task.busy += 1
    # _derive, inlined: this runs for nearly every event.
    if task.cancelled is not None:
        task.status = _T_CANCELLED
    elif task.failed_final:
        task.status = _T_FAILED if task.durable is None else _failed_status(task)
    elif task.done == len(task.steps):
        task.status = _T_SUCCEEDED
    elif task.durable is not None and task.durable.wait is not None and not task.busy:
        task.status = _T_WAITING
    else:
        task.status = _T_RUNNING


def _failed_status(task: TaskState) -> TaskStatus:
    d = task.durable
    return _T_NONDETERMINISTIC if d is not None and d.nondeterminism is not None else _T_FAILED


def _derive(task: TaskState) -> None:
    if task.cancelled is not None:
        task.status = _T_CANCELLED
    elif task.failed_final:
        task.status = _failed_status(task)
    elif task.done == len(task.steps):
        task.status = _T_SUCCEEDED
    elif task.durable is not None and task.durable.wait is not None and not task.busy:
        task.status = _T_WAITING
    elif task.touched:
        task.status = _T_RUNNING
    else:
        task.status = _T_PENDING


def _on_submitted(state: State, event: Event) -> None:
    p = event.payload
    if event.task_id in state.tasks or (
        state.archive is not None and event.task_id in state.archive
    ):
        _state_anomaly(state, event, f"task {event.task_id!r} submitted twice")
        return
    deps: dict[str, list[str]] = shared_deps(p.get("steps") or {})
    key = p.get("idempotency_key")
    task = TaskState(
        task_id=event.task_id,
        workflow=sys.intern(str(p.get("workflow", ""))),
        version=int(p.get("version", 1)),
        input=p.get("input"),
        deps=deps,
        steps={name: StepState(name) for name in deps},
        submitted_ms=event.timestamp,
        updated_ms=event.timestamp,
        first_event_id=event.event_id,
        last_event_id=event.event_id,
        idempotency_key=key,
        event_ids=[event.event_id],
    )
    parent = p.get("parent")
    if parent is not None:
        task.parent = dict(parent)
    traced = p.get("trace")
    if traced is not None:
        task.trace = dict(traced)
    _derive(task)
    state.tasks[event.task_id] = task
    if key:
        state.idempotency[key] = event.task_id


def _lookup(state: State, event: Event) -> tuple[TaskState, StepState] | None:
    task = state.tasks.get(event.task_id) or state.task(event.task_id)
    if task is None:
        _state_anomaly(state, event, f"{event.event_type.name} for unknown task {event.task_id!r}")
        return None
    task.last_event_id = event.event_id
    task.updated_ms = event.timestamp
    if task.event_ids is not None:
        task.event_ids.append(event.event_id)
    step = task.steps.get(event.step_name)
    if step is None:
        _flag(task, None, event, f"{event.event_type.name} for unknown step {event.step_name!r}")
        return None
    return task, step


def _on_started(state: State, event: Event) -> None:
    found = _lookup(state, event)
    if found is None:
        return
    task, step = found
    was = step.status
    if (
        was is not _PENDING
        and was is not _FAILED
        and was is not _COMPENSATED
        and was is not _WAITING
    ):
        if was is _STARTED:
            _flag(task, step, event, f"step {step.name} started again without an end")
        elif was is _COMPENSATING:
            _flag(task, step, event, f"step {step.name} re-run before its compensation completed")
        else:
            _flag(task, step, event, f"step {step.name} started again after it {was.value}")
    if event.attempt <= step.attempt:
        _flag(task, step, event, f"step {step.name} attempt {event.attempt} is not new")
    step.attempt = event.attempt
    step.started_ms = event.timestamp
    p = event.payload
    step.worker = p.get("worker") if p else None
    step.started_term = event.term
    step.started_event = event.event_id
    step.finished_ms = None
    step.error = None
    step.lost = False
    _clear_final(task, step)
    if task.durable is not None:
        task.durable.nondeterminism = None
    _move(task, step, _STARTED)


def _on_succeeded(state: State, event: Event) -> None:
    found = _lookup(state, event)
    if found is None:
        return
    task, step = found
    if step.status is not _STARTED or event.attempt != step.attempt:
        if step.status is _COMPENSATED:
            # The seed's rule: after compensation a step must be STARTED again.
            _flag(
                task,
                step,
                event,
                f"step {step.name} succeeded after compensation without a new start",
            )
            return
        _flag(
            task,
            step,
            event,
            f"step {step.name} attempt {event.attempt} succeeded while "
            f"{step.status.value} at attempt {step.attempt}",
        )
        if step.status is not _STARTED:
            return
    ts = event.timestamp
    step.finished_ms = ts
    step.result = event.payload.get("result")
    started = step.started_ms
    if started is not None:
        per_step = state.durations.get(task.workflow)
        if per_step is None:
            per_step = state.durations[task.workflow] = {}
        hist = per_step.get(step.name)
        if hist is None:
            hist = per_step[step.name] = []
        hist.append(ts - started if ts > started else 0)
        if len(hist) > 2 * DURATION_HISTORY:
            del hist[:DURATION_HISTORY]  # amortized: trim rarely, keep at least the last 100
    _move(task, step, _SUCCEEDED)


def _owe(task: TaskState, step: StepState) -> None:
    if not step.owed:
        step.owed = True
        task.owed += 1


def _settle(task: TaskState, step: StepState) -> None:
    if step.owed:
        step.owed = False
        task.owed -= 1


def _clear_final(task: TaskState, step: StepState) -> None:
    if step.final:
        step.final = False
        task.failed_final -= 1


def _on_failed(state: State, event: Event) -> None:
    found = _lookup(state, event)
    if found is None:
        return
    task, step = found
    p = event.payload
    error = str(p.get("error", "")) or "failed"
    if step.status is StepStatus.COMPENSATING and p.get("compensation"):
        # A compensation attempt failed; it will be retried and stays visible.
        step.compensation_error = error
        return
    if step.status is not StepStatus.STARTED:
        _flag(task, step, event, f"step {step.name} failed while {step.status.value}")
    step.finished_ms = event.timestamp
    step.error = error
    step.lost = bool(p.get("lost", False))
    if step.lost:
        step.losses += 1
    if "heartbeat" in p:
        step.heartbeat = p["heartbeat"]
    if p.get("final", False) and not step.final:
        step.final = True
        task.failed_final += 1
    if p.get("compensate", False):
        _owe(task, step)
    if "nondeterminism" in p:
        _durable(task).nondeterminism = p["nondeterminism"]
    _move(task, step, StepStatus.FAILED)


def _on_compensating(state: State, event: Event) -> None:
    found = _lookup(state, event)
    if found is None:
        return
    task, step = found
    if step.status is StepStatus.COMPENSATING:
        step.compensations += 1  # a retry of a failed compensation
        return
    if step.status not in (
        StepStatus.SUCCEEDED,
        StepStatus.FAILED,
        StepStatus.STARTED,
        StepStatus.WAITING,  # a cancelled durable main undoing its ctx.steps
    ):
        _flag(task, step, event, f"step {step.name} compensating while {step.status.value}")
    step.compensations += 1
    step.compensation_error = None
    _move(task, step, StepStatus.COMPENSATING)


def _on_compensated(state: State, event: Event) -> None:
    found = _lookup(state, event)
    if found is None:
        return
    task, step = found
    if step.status is not StepStatus.COMPENSATING:
        _flag(task, step, event, f"step {step.name} compensated while {step.status.value}")
    step.compensation_error = None
    step.finished_ms = event.timestamp
    _settle(task, step)
    _move(task, step, StepStatus.COMPENSATED)


def _on_override(state: State, event: Event) -> None:
    found = _lookup(state, event)
    if found is None:
        return
    task, step = found
    p = event.payload
    action = p.get("action")
    step.override = {
        "action": action,
        "operator": p.get("operator"),
        "reason": p.get("reason"),
        "event_id": event.event_id,
        "attempt": step.attempt,  # retry budgets count from here
        "losses": step.losses,
    }
    if step.waits:  # a durable main's: its budget counts from here too
        step.override["waits"] = step.waits
    if "as" in p:  # the display name typed beside the authenticated operator
        step.override["as"] = p["as"]
    _clear_final(task, step)
    if action == "skip":
        if step.status in BUSY:
            _flag(task, step, event, f"step {step.name} skipped while {step.status.value}")
        _settle(task, step)  # the operator takes over whatever compensation was owed
        if task.durable is not None and task.durable.wait is not None:
            _unindex_wait(state, task)
            task.durable.wait = None  # skipping a waiting main ends its wait
        _move(task, step, StepStatus.SKIPPED)
    elif action == "retry":
        if step.status in BUSY:
            _flag(task, step, event, f"step {step.name} retried while {step.status.value}")
        step.error = None
        _move(task, step, StepStatus.PENDING)
    else:
        _flag(task, step, event, f"unknown manual override {action!r}")


def _on_cancelled(state: State, event: Event) -> None:
    task = _task_for(state, event)
    if task is None:
        return
    p = event.payload
    task.cancelled = {
        "operator": p.get("operator"),
        "reason": p.get("reason"),
        "event_id": event.event_id,
    }
    if "as" in p:
        task.cancelled["as"] = p["as"]
    for name in p.get("compensate", ()):
        step = task.steps.get(name)
        if step is None:
            _flag(task, None, event, f"cancel owes compensation of unknown step {name!r}")
        elif step.status is not StepStatus.COMPENSATED:
            _owe(task, step)
    if task.durable is not None and task.durable.wait is not None:
        _unindex_wait(state, task)  # the wait stays on the task (shown), matches nothing more
    _derive(task)


def _on_term_started(state: State, event: Event) -> None:
    if state.terms and event.term <= state.terms[-1][0]:
        _state_anomaly(state, event, f"term {event.term} started after term {state.terms[-1][0]}")
    state.terms.append((event.term, event.event_id))


# ---------------------------------------------------------- durable tasks


def _durable(task: TaskState) -> DurableState:
    d = task.durable
    if d is None:
        d = task.durable = DurableState()
    return d


def _index_wait(state: State, task: TaskState, w: Mapping[str, Any]) -> None:
    """Index a wait by the event keys it may take, and note the first event recorded
    already that one of them matches (`matched`)."""
    assert task.durable is not None
    task.durable.matched = None
    for key, since in _waits.event_keys(w):
        waiting = state.waits.get(key)
        if waiting is None:
            waiting = state.waits[key] = set()
        waiting.add(task.task_id)
        found = state.first_event(key, since)
        if found is not None and (task.durable.matched is None or found[0] < task.durable.matched):
            task.durable.matched = found[0]


def _unindex_wait(state: State, task: TaskState) -> None:
    d = task.durable
    if d is None or d.wait is None:
        return
    d.matched = None
    for key, _ in _waits.event_keys(d.wait):
        waiting = state.waits.get(key)
        if waiting is not None:
            waiting.discard(task.task_id)
            if not waiting:
                del state.waits[key]


def _durable_record(state: State, event: Event) -> tuple[TaskState, StepState, int] | None:
    """The task and step of a CHECKPOINT or WAIT, and its seq; None (flagged) unless it
    comes from the running attempt, at the next position."""
    found = _lookup(state, event)
    if found is None:
        return None
    task, step = found
    name = event.event_type.name
    if step.status is not _STARTED or event.attempt != step.attempt:
        _flag(
            task,
            step,
            event,
            f"{name} of attempt {event.attempt} while step {step.name} is "
            f"{step.status.value} at attempt {step.attempt}",
        )
        return None
    seq = event.payload.get("seq")
    have = len(task.durable.checkpoints) if task.durable is not None else 0
    if seq != have:
        _flag(task, step, event, f"{name} at position {seq!r}, but {have} checkpoints precede it")
        return None
    return task, step, have


def _on_checkpoint(state: State, event: Event) -> None:
    found = _durable_record(state, event)
    if found is None:
        return
    task, _, seq = found
    d = _durable(task)
    d.checkpoints.append(dict(event.payload))
    if d.wait is not None and d.wait.get("seq") == seq:
        _unindex_wait(state, task)  # this checkpoint is the wait's resolution
        d.wait = None


def _on_wait(state: State, event: Event) -> None:
    found = _durable_record(state, event)
    if found is None:
        return
    task, step, _ = found
    d = _durable(task)
    _unindex_wait(state, task)
    d.wait = w = _interned(event.payload)
    _index_wait(state, task, w)
    step.waits += 1
    step.finished_ms = event.timestamp
    _move(task, step, _WAITING)


def _on_event(state: State, event: Event) -> None:
    p = event.payload
    key = p.get("key")
    if not isinstance(key, str) or not key:
        _state_anomaly(state, event, "EVENT without a key")
        return
    _expire_event_keys(state, event.timestamp)
    idem = p.get("idempotency_key")
    if idem:
        known = state.event_keys.get(idem)
        if known is not None and p.get("renews") != known:
            return  # a duplicate: the first one with this key is the one recorded
        state.event_keys[idem] = event.event_id
        ttl = p.get("ttl_ms")
        if ttl:
            ends = event.timestamp + int(ttl)
            state.event_key_expires[idem] = ends
            heapq.heappush(state.event_key_heap, (ends, idem))
        else:
            state.event_key_expires.pop(idem, None)
    refs = state.events.get(key)
    if refs is None:
        refs = state.events[key] = []
    refs.append((event.event_id, p.get("payload")))
    for task_id in state.waits.get(key, ()):
        task = state.tasks.get(task_id)
        d = task.durable if task is not None else None
        if d is None or d.wait is None or d.matched is not None:
            continue
        if any(k == key and event.event_id >= since for k, since in _waits.event_keys(d.wait)):
            d.matched = event.event_id


def _expire_event_keys(state: State, now_ms: int) -> None:
    """Forget the event idempotency keys whose TTL ended before `now_ms` (an EVENT's
    time: the same point of the log on every replica)."""
    heap = state.event_key_heap
    while heap and heap[0][0] <= now_ms:
        ends, key = heapq.heappop(heap)
        if state.event_key_expires.get(key) == ends:
            del state.event_key_expires[key]
            del state.event_keys[key]


_HANDLERS: dict[EventType, Callable[[State, Event], None]] = {
    EventType.TASK_SUBMITTED: _on_submitted,
    EventType.STEP_STARTED: _on_started,
    EventType.STEP_SUCCEEDED: _on_succeeded,
    EventType.STEP_FAILED: _on_failed,
    EventType.STEP_COMPENSATING: _on_compensating,
    EventType.STEP_COMPENSATED: _on_compensated,
    EventType.MANUAL_OVERRIDE: _on_override,
    EventType.TASK_CANCELLED: _on_cancelled,
    EventType.TERM_STARTED: _on_term_started,
    EventType.CHECKPOINT: _on_checkpoint,
    EventType.WAIT: _on_wait,
    EventType.EVENT: _on_event,
}

# Exhaustive dispatch, checked at import: a new event type without a handler
# is a bug to catch before any log is replayed.
if set(_HANDLERS) != set(EventType):  # pragma: no cover
    raise ReplayError(f"replay has no handler for {set(EventType) - set(_HANDLERS)}")
