"""Flow control at submit (docs/flow-control.md): what a new task records, and the
three things a submission may do instead of adding a task that waits.

* Its TASK_SUBMITTED records the key value of every limit that applies, its priority
  and fairness value (`flow_record`, pure): the fold needs no workflow to know what the
  task holds, and a new primary reads the same.
* `reject_new`: when `max` tasks of that key value are unfinished, the submission is
  refused (RESOURCE_EXHAUSTED naming the limit, the value and the max).
* `cancel_running`: the oldest unfinished task of that key value is cancelled first
  (its TASK_CANCELLED names the limit and the newer task's key).
* `Debounce`: a submission whose key value has a task that has not started yet
  replaces that task's input (a DEBOUNCED event) and pushes its start back.

Submissions being written count with the folded ones (`_writing`), or two submissions
at once could both see room for one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, Protocol

from apollo11.scheduler import metrics
from apollo11.scheduler.errors import ResourceExhaustedError
from apollo11.scheduler.flow import DEFAULT_PRIORITY, Concurrency, FlowSpec
from apollo11.scheduler.log import Event, EventType
from apollo11.scheduler.state import Store

Key = tuple[str, str]

CANCELLER = "flow-control"  # the operator of a cancel_running's TASK_CANCELLED


class Host(Protocol):
    @property
    def store(self) -> Store: ...

    def now_ms(self) -> int: ...

    def max_of(self, workflow: Any, limit_id: str) -> int: ...

    def runs(self, task_id: str) -> bool: ...

    def holds_back(self, task_id: str, on: bool) -> None:
        """Keep the engine from starting the task (a DEBOUNCED for it is being written)."""

    async def cancel(self, task_id: str, reason: str) -> None: ...

    async def wait_commit(self, event_id: int) -> None: ...


class FlowSubmit:
    def __init__(self, host: Host) -> None:
        self._host = host
        self._writing: dict[Key, set[str]] = {}  # submissions being written, by key

    def record(self, wf: Any, input: Any, priority: int | None) -> dict[str, Any] | None:
        """The TASK_SUBMITTED's "flow", or None; InvalidArgumentError for a missing key
        or a priority outside 1-5."""
        spec: FlowSpec = wf.flow
        given = DEFAULT_PRIORITY if priority is None else priority
        return spec.record(input, priority=given, now_ms=self._host.now_ms())

    def one_by_one(self, wf: Any) -> bool:
        """Whether a batch with this workflow must be submitted one task at a time."""
        spec: FlowSpec = wf.flow
        return spec.debounce is not None or any(
            isinstance(c.decl, Concurrency) and c.decl.on_full != "queue" for c in spec.concurrency
        )

    async def join(self, wf: Any, flow: dict[str, Any], input: Any) -> Event | None:
        """A debounced submission: the DEBOUNCED that gave an unstarted task this input,
        or None when there is no such task (a new one is submitted)."""
        value = flow.get("debounce")
        if value is None:
            return None
        h = self._host
        tid = h.store.state.occupancy.debouncing.get((wf.name, value))
        if tid is None or h.runs(tid):
            return None
        task = h.store.state.tasks.get(tid)
        now = h.now_ms()
        if task is None or task.flow is None or now >= int(task.flow.get("deadline_ms", 0)):
            return None  # its window closed: it starts now; this one opens the next
        not_before = min(now + wf.flow.debounce.quiet_ms, int(task.flow["deadline_ms"]))
        h.holds_back(tid, True)
        try:
            event = await h.store.log.append(
                EventType.DEBOUNCED, tid, payload={"input": input, "not_before_ms": not_before}
            )
        finally:
            h.holds_back(tid, False)
        await h.wait_commit(event.event_id)
        return event

    async def make_room(self, wf: Any, flow: dict[str, Any], task_id: str) -> None:
        """Apply `reject_new` and `cancel_running` for a task about to be submitted."""
        hold = flow.get("hold")
        if not hold:
            return
        h = self._host
        occupancy = h.store.state.occupancy
        spec: FlowSpec = wf.flow
        for c in spec.concurrency:
            if not isinstance(c.decl, Concurrency) or c.decl.on_full == "queue":
                continue
            lid = c.id
            value = hold.get(lid)
            if value is None:
                continue
            unfinished = set(occupancy.unfinished(lid, value)) | self._writing.get(
                (lid, value), set()
            )
            top = h.max_of(wf, lid)
            if len(unfinished) < top:
                continue
            if c.decl.on_full == "reject_new":
                metrics.FLOW_REJECTED.labels(lid).inc()
                raise ResourceExhaustedError(
                    f"concurrency limit {lid} is full for {value!r}: {len(unfinished)} of "
                    f"{top} tasks unfinished (on_full='reject_new'); submit again later, or "
                    f"raise it: apollo11 limits set {lid} --max N"
                )
            # cancel_running: the oldest first (task ids sort by submission time)
            for victim in sorted(unfinished)[: len(unfinished) - top + 1]:
                await h.cancel(victim, f"concurrency limit {lid} ({value}) made room for {task_id}")

    @contextlib.contextmanager
    def writing(self, task_id: str, flow: dict[str, Any] | None) -> Iterator[None]:
        """While the TASK_SUBMITTED of `task_id` is written: it counts as unfinished."""
        keys = list((flow or {}).get("hold", {}).items())
        for k in keys:
            self._writing.setdefault(k, set()).add(task_id)
        try:
            yield
        finally:
            for k in keys:
                w = self._writing.get(k)
                if w is not None:
                    w.discard(task_id)
                    if not w:
                        del self._writing[k]
