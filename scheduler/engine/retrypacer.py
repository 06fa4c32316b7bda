"""The primary's retry budget state: per (workflow, step), a sliding window of the
log's time with the step's successes and failures, and the GCRA's TAT of its retries.

The decision is scheduler/retrypace.py's (pure); this class only keeps what it reads.
It lives on the engine of the primary and nowhere else: the verdicts it shapes are
recorded in the FAILED events, which a standby and a replay read instead. It starts
empty (a new primary has seen no successes yet, so R is the budget's floor until it
does: conservative, a herd right after a failover is paced, not let through).

The window is a ring of one-second buckets (a count of successes and of failures
each, stamped with its second): O(1) to count an outcome, O(window) to read.

Bounded: a key idle past the window with no backlog (its TAT not past now) is
dropped at the next sweep, which a new key triggers once the keys have doubled since
the last (amortized O(1)). Dropping one changes no decision: its counts have all
left the window, its start is seen afresh, and a TAT behind now is now to the GCRA,
so a new window decides as the old would have. Many step names over a term (shell
DAGs, workflows of one run) do not grow it without end.

A key is (workflow, step), and for a shell DAG (every one's workflow is "shell")
(workflow, the DAG's name, step): one DAG's herd does not pace another's "build".
"""

from __future__ import annotations

import math

from apollo11.scheduler.retrypace import (
    Paced,
    RetryBudget,
    Slot,
    credited,
    pace,
    rate_per_s,
    rescaled,
)
from apollo11.scheduler.shell import SHELL_WORKFLOW
from apollo11.scheduler.state import TaskState

Key = tuple[str, ...]  # (workflow, step); a shell DAG's: (workflow, its name, step)
SWEEP_MIN = 256  # keys held before the first sweep of idle ones


def pacing_key(task: TaskState, step: str) -> Key:
    """The budget a step of `task` is paced by: its workflow's step, or for a shell DAG
    the step of DAGs of that name (a DAG's name is what stays the same across its runs:
    a schedule's nightly job shares one budget, another job's step of the same name
    has its own)."""
    if task.workflow == SHELL_WORKFLOW and isinstance(task.input, dict):
        name = task.input.get("name")
        if isinstance(name, str) and name:
            return (task.workflow, name, step)
    return (task.workflow, step)


class _Window:
    __slots__ = ("failures", "last_ms", "rate", "seconds", "since_ms", "successes", "tat_ms")

    def __init__(self, size: int, now_ms: int) -> None:
        self.seconds = [-1] * size  # the second each bucket counts, -1: none
        self.successes = [0] * size
        self.failures = [0] * size
        self.since_ms = now_ms  # the first outcome seen, since the key was last idle
        self.last_ms = now_ms
        self.tat_ms: float | None = None
        self.rate = 0.0  # the rate tat_ms was kept at

    def bucket(self, now_ms: int, window_ms: int) -> int:
        if now_ms - self.last_ms > window_ms:  # idle past the window: seen afresh
            self.since_ms = now_ms
        self.last_ms = max(self.last_ms, now_ms)
        second = now_ms // 1000
        i = second % len(self.seconds)
        if self.seconds[i] != second:
            self.seconds[i] = second
            self.successes[i] = self.failures[i] = 0
        return i

    def counts(self, now_ms: int) -> tuple[int, int]:
        oldest = now_ms // 1000 - len(self.seconds) + 1
        s = f = 0
        for i, second in enumerate(self.seconds):
            if second >= oldest:
                s += self.successes[i]
                f += self.failures[i]
        return s, f


class RetryPacer:
    """Counts a step's outcomes, and gives each failure that will be retried its
    `Slot` in the step's budget (`slot`). `budget=None`: never paced."""

    def __init__(self, budget: RetryBudget | None) -> None:
        self.budget = budget
        self._size = math.ceil(budget.window_s) if budget is not None else 0
        self._window_ms = self._size * 1000
        self._keys: dict[Key, _Window] = {}
        self._sweep_at = SWEEP_MIN

    def _window(self, key: Key, now_ms: int) -> _Window:
        w = self._keys.get(key)
        if w is None:
            if len(self._keys) >= self._sweep_at:
                self._sweep(now_ms)
            w = self._keys[key] = _Window(self._size, now_ms)
        return w

    def _sweep(self, now_ms: int) -> None:
        """Drop the keys idle past the window with no backlog (see the module's note)."""
        window_ms = self._window_ms
        idle = [
            k
            for k, w in self._keys.items()
            if now_ms - w.last_ms > window_ms and (w.tat_ms is None or w.tat_ms <= now_ms)
        ]
        for k in idle:
            del self._keys[k]
        self._sweep_at = max(SWEEP_MIN, 2 * len(self._keys))

    def succeeded(self, key: Key, now_ms: int) -> None:
        if self.budget is None:
            return
        w = self._window(key, now_ms)
        w.successes[w.bucket(now_ms, self._window_ms)] += 1
        if w.tat_ms is not None and w.tat_ms > now_ms:  # a backlog: a slot's share back
            w.tat_ms = credited(w.tat_ms, w.rate, self.budget.share)

    def failed(self, key: Key, now_ms: int) -> None:
        """A failure of the step's own (not a loss), retried or not."""
        if self.budget is None:
            return
        w = self._window(key, now_ms)
        w.failures[w.bucket(now_ms, self._window_ms)] += 1

    def slot(self, key: Key, now_ms: int) -> Slot | None:
        """The slot of a retry of a failure just counted (`failed`), and the key's TAT
        moved past it; None when there is no budget."""
        budget = self.budget
        if budget is None:
            return None
        w = self._window(key, now_ms)
        successes, failing = w.counts(now_ms)
        rate = rate_per_s(budget, successes, (now_ms - w.since_ms) / 1000)
        tat = rescaled(w.tat_ms, now_ms, w.rate, rate)
        paced: Paced = pace(budget, tat, now_ms, rate, failing)
        w.tat_ms, w.rate = paced.tat_ms, rate
        return paced.slot

    def forget(self) -> None:
        """Drop every window (this node is no longer the primary)."""
        self._keys.clear()

    def __len__(self) -> int:
        return len(self._keys)
