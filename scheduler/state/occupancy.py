"""Who holds a flow-control limit's slots, derived from the tasks (docs/flow-control.md).

A task submitted under flow control carries its key values in its TASK_SUBMITTED
(`TaskState.flow`: "hold" for its workflow's concurrency limits, "steps" for its
steps', "rate" for its rates), so the fold needs no workflow to know what each task
holds:

* an attempt of a limited step holds that step's limits while it is STARTED or
  COMPENSATING;
* a task holds its workflow's limits while anything of it runs or it is RUNNING
  (between two steps it keeps its slot; a durable task that WAITs holds none; a
  finished one frees it);
* a task is a *member* of its workflow's limits until it is quiescent (what
  `reject_new` and `cancel_running` count);
* a debounced task takes its key's submissions until it starts.

Nothing here is a counter: `sync` recomputes one task's entries from its state after
every event of it, so a replay, a snapshot's `rebuild` and a new primary reach the same
sets, and a lost attempt frees its slot when its FAILED is folded. What is not derived
from tasks is kept as the log said it: each rate's theoretical arrival time (the
primary's decision, recorded on the STARTED it admitted) and the operators' runtime
limits and fairness weights (LIMIT events); those three go in snapshots.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field
from typing import Any

from apollo11.scheduler.state.model import BUSY, TaskState
from apollo11.scheduler.taskstatus import TaskStatus

_RUNNING = TaskStatus.RUNNING

Holder = tuple[str, str]  # (task id, step); the step is "" for a task-level holder


@dataclass(slots=True)
class Occupancy:
    # limit id -> key value -> holders (attempts, or tasks as (task id, ""))
    holders: dict[str, dict[str, set[Holder]]] = field(default_factory=dict)
    # workflow-level limit id -> key value -> unfinished tasks
    members: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    # rate id -> key value -> the theoretical arrival time (ms, the log's clock)
    tats: dict[str, dict[str, float]] = field(default_factory=dict)
    # limit id -> the operator's override (a LIMIT's payload without who and why)
    limits: dict[str, dict[str, Any]] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)  # fairness value -> weight
    # (workflow, debounce value) -> the task not started yet that takes its submissions
    debouncing: dict[tuple[str, str], str] = field(default_factory=dict)
    # any task under flow control seen: until then the fold skips `sync` altogether
    active: bool = False

    # ------------------------------------------------------------- the fold's

    def sync(self, task: TaskState) -> None:
        """Bring `task`'s entries in line with its state (after any event of it)."""
        f = task.flow
        if f is None:
            return
        tid = task.task_id
        steps = f.get("steps")
        if steps:
            for name, limits in steps.items():
                s = task.steps.get(name)
                _put(self.holders, limits, (tid, name), s is not None and s.status in BUSY)
        hold = f.get("hold")
        if hold:
            holding = task.busy > 0 or task.status is _RUNNING
            _put(self.holders, hold, (tid, ""), holding)
            _put(self.members, hold, tid, not task.quiescent)
        value = f.get("debounce")
        if value is not None:
            key = (task.workflow, value)
            if not task.touched and not task.quiescent:
                self.debouncing[key] = tid
            elif self.debouncing.get(key) == tid:
                del self.debouncing[key]

    def started(self, task: TaskState, tats: Mapping[str, float]) -> None:
        """A STARTED that the primary admitted under rates: their new arrival times."""
        values = (task.flow or {}).get("rate") or {}
        for rid, tat in tats.items():
            value = values.get(rid)
            if value is not None:
                self.tats.setdefault(rid, {})[value] = float(tat)

    def limit(self, payload: Mapping[str, Any]) -> None:
        """An operator's LIMIT: a limit changed or reset, or fairness weights."""
        weights = payload.get("weights")
        if weights:
            for value, w in weights.items():
                if float(w) == 1.0:
                    self.weights.pop(value, None)  # the default: nothing to keep
                else:
                    self.weights[value] = float(w)
        lid = payload.get("id")
        if lid:
            if payload.get("reset"):
                self.limits.pop(lid, None)
            else:
                change = {k: v for k, v in payload.items() if k not in _NOT_A_LIMIT}
                self.limits[lid] = {**self.limits.get(lid, {}), **change}

    # ------------------------------------------------------------- readers

    def count(self, limit_id: str, value: str) -> int:
        return len(self.holders.get(limit_id, {}).get(value, ()))

    def of(self, limit_id: str, value: str) -> Set[Holder]:
        """The holders of one key value (read only)."""
        return self.holders.get(limit_id, {}).get(value) or _NONE

    def unfinished(self, limit_id: str, value: str) -> Set[str]:
        """The unfinished tasks of one key value (read only)."""
        return self.members.get(limit_id, {}).get(value) or _NO_TASKS

    def tat(self, rate_id: str, value: str) -> float | None:
        return self.tats.get(rate_id, {}).get(value)

    # ------------------------------------------------------------- snapshots

    def rebuild(self, tasks: Iterable[TaskState]) -> None:
        """Holders and members again from the tasks in memory (after a snapshot's load:
        only quiescent tasks are archived, and those hold nothing)."""
        self.holders, self.members, self.debouncing = {}, {}, {}
        for t in tasks:
            if t.flow is not None:
                self.active = True
                self.sync(t)

    def to_dict(self) -> dict[str, Any]:
        """What snapshots carry (the rest is rebuilt); {} when there is nothing."""
        out: dict[str, Any] = {}
        if self.tats:
            out["tats"] = {r: dict(sorted(v.items())) for r, v in sorted(self.tats.items())}
        if self.limits:
            out["limits"] = dict(sorted(self.limits.items()))
        if self.weights:
            out["weights"] = dict(sorted(self.weights.items()))
        return {"flow": out} if out else {}

    def load(self, d: Mapping[str, Any] | None) -> None:
        """Restore what `to_dict` wrote (its "flow" entry)."""
        if not d:
            return
        self.tats = {r: {k: float(t) for k, t in v.items()} for r, v in d.get("tats", {}).items()}
        self.limits = {k: dict(v) for k, v in d.get("limits", {}).items()}
        self.weights = {k: float(w) for k, w in d.get("weights", {}).items()}
        self.active = self.active or bool(self.tats or self.limits)


_NOT_A_LIMIT = frozenset({"id", "by", "reason", "as", "weights", "reset"})
_NONE: frozenset[Holder] = frozenset()
_NO_TASKS: frozenset[str] = frozenset()


def _put(
    index: dict[str, dict[str, set[Any]]], keys: Mapping[str, str], item: Any, on: bool
) -> None:
    for lid, value in keys.items():
        per = index.get(lid)
        if on:
            if per is None:
                per = index[lid] = {}
            held = per.get(value)
            if held is None:
                held = per[value] = set()
            held.add(item)
        elif per is not None:
            held = per.get(value)
            if held is not None and item in held:
                held.discard(item)
                if not held:
                    del per[value]  # a key value nobody holds costs nothing
