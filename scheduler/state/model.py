"""The state model: a task and its steps as the fold leaves them.

`TaskState` (its steps' `StepState`s, a durable task's `DurableState`) is what
every other layer reads: the engine decides from it, snapshots and the archive
store it as `to_dict`, the API shows it. Mutable on purpose, not frozen records:
the fold changes them in place, once per event (state/fold.py), which is what
replay speed is made of.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from apollo11.scheduler.taskstatus import StepStatus as StepStatus
from apollo11.scheduler.taskstatus import TaskStatus as TaskStatus

DURATION_HISTORY = 100  # per (workflow, step): what `timeout="auto"` looks at


TERMINAL = frozenset(
    {
        TaskStatus.SUCCEEDED,
        TaskStatus.FAILED,
        TaskStatus.CANCELLED,
        TaskStatus.NONDETERMINISTIC,
        TaskStatus.COMPENSATED,
    }
)


DONE = frozenset({StepStatus.SUCCEEDED, StepStatus.SKIPPED})  # dependents may run
BUSY = frozenset({StepStatus.STARTED, StepStatus.COMPENSATING})  # something is executing


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
    # Own failures by the `on` rule that judged them (scheduler/retry.py), since the
    # last operator retry: each rule's budget; the default rule's are the rest of the
    # step's own failures. None: none yet.
    causes: dict[str, int] | None = None
    # The last failure's verdict: how long after it the next attempt begins (None: a
    # loss, a final failure, or a FAILED older than verdicts; retry.py computes it).
    retry_in_s: float | None = None
    # Failed for good with on_exhausted "pause" or "compensate" (its FAILED's
    # `exhausted`), kept while `final` is: when an operator's retry clears the step the
    # task's exhaustion went by, another step still failed for good says what follows.
    exhausted: str | None = None

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
            interned(d["wait"]) if d.get("wait") else None,
            d.get("nondeterminism"),
        )


def interned(payload: Mapping[str, Any]) -> dict[str, Any]:
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
    # The schedule occurrence it is (state/schedule.py): {"id", "nominal_ms"}, and
    # "triggered" for a fire outside the schedule's times; None: not scheduled.
    schedule: dict[str, Any] | None = None
    # Flow control (state/occupancy.py): its TASK_SUBMITTED's "flow" (priority, fairness
    # value, the limits' key values, a debounce window); None: no limit applies.
    flow: dict[str, Any] | None = None
    # A step's retries ran out with on_exhausted "pause" or "compensate" (its FAILED's
    # `exhausted`), and the engine has not recorded what follows yet: {"step", "then"}.
    exhausted: dict[str, Any] | None = None
    # Its TASK_PAUSED ({"step", "event_id", ...}) until an operator's retry (or skip)
    # leaves no step failed for good; its TASK_COMPENSATING ({"step", "compensate",
    # "event_id"}), kept: COMPENSATING, then COMPENSATED, is the task's end.
    paused: dict[str, Any] | None = None
    compensating: dict[str, Any] | None = None
    # Its TASK_REDACTED ({"operator", "reason", "event_id"}): its input and outputs are
    # gone (scheduler/log/redact.py); None: never redacted.
    redacted: dict[str, Any] | None = None

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
            **({"schedule": self.schedule} if self.schedule is not None else {}),
            **({"flow": self.flow} if self.flow is not None else {}),
            **({"exhausted": self.exhausted} if self.exhausted is not None else {}),
            **({"paused": self.paused} if self.paused is not None else {}),
            **({"compensating": self.compensating} if self.compensating is not None else {}),
            **({"redacted": self.redacted} if self.redacted is not None else {}),
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
        "causes",
        "retry_in_s",
        "exhausted",
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
    if s.causes is not None:  # only when set, as above
        d["causes"] = s.causes
    if s.retry_in_s is not None:
        d["retry_in_s"] = s.retry_in_s
    if s.exhausted is not None:
        d["exhausted"] = s.exhausted
    return d


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


# A spawned task's state as its parent sees it once retention purged it (`joined`).
PURGED = "PURGED"


def joined(
    child: TaskState | None, recorded: bool, why: Callable[[], str]
) -> dict[str, Any] | None:
    """What a parent's join of `child` reads (its `outcome`), None while it has not
    finished. `recorded`: the parent's recorded checkpoints spawned it, so its
    TASK_SUBMITTED is in the log (written in the spawn's batch); such a child no longer
    in the state finished and was purged by retention, the one way a task leaves it,
    its result gone with its history. A parent re-run after the purge (an operator's
    retry of a FAILED parent) hears so at its join (`why`: State.not_found's words)
    instead of waiting for ever. A child only planned (a spawn not recorded yet) is
    not known yet: not finished."""
    if child is None:
        return {"status": PURGED, "result": None, "error": why()} if recorded else None
    return outcome(child) if child.quiescent else None


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
        error = next(
            (s.error for s in t.steps.values() if s.status is StepStatus.FAILED and s.error), None
        )
    return {"status": status, "result": result, "error": error}
