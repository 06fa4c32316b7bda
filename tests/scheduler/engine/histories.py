"""Tasks as the log leaves them, built by replaying events by hand: no store, no loop."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from apollo11.scheduler.log import Event, EventType
from apollo11.scheduler.state import State, TaskState, apply
from apollo11.scheduler.workflow import Idempotent, NotIdempotent, Retry, StepContext, Workflow

E = EventType
T0_MS = 1_700_000_000_000
DIAMOND = {"fetch": [], "left": ["fetch"], "right": ["fetch"], "join": ["left", "right"]}
CHAIN = {"a": [], "b": ["a"], "c": ["b"]}


def noop(ctx: StepContext) -> None:
    return None


def undo(ctx: StepContext) -> None:
    return None


def workflow(
    deps: Mapping[str, Iterable[str]],
    *,
    name: str = "w",
    version: int = 1,
    not_idempotent: Iterable[str] = (),
    retry: Retry | None = None,
    compensate_on_cancel: bool = True,
) -> Workflow:
    """A validated workflow of no-op steps, idempotent unless named in `not_idempotent`."""
    wf = Workflow(name, version=version, compensate_on_cancel=compensate_on_cancel)
    undoable = set(not_idempotent)
    for step, after in deps.items():
        wf.step(
            name=step,
            after=list(after),
            idempotency=NotIdempotent(compensate=undo) if step in undoable else Idempotent(),
            retry=retry or Retry(),
        )(noop)
    wf.validate()
    return wf


class History:
    """One task's log, event by event; `task` is what replay makes of it so far."""

    def __init__(
        self,
        deps: Mapping[str, list[str]],
        *,
        task_id: str = "t",
        workflow: str = "w",
        version: int = 1,
        term: int = 1,
    ) -> None:
        self.state = State()
        self.task_id = task_id
        self.term = term
        self.now_ms = T0_MS
        self.add(
            E.TASK_SUBMITTED,
            payload={"workflow": workflow, "version": version, "input": {}, "steps": dict(deps)},
        )

    @property
    def task(self) -> TaskState:
        return self.state.tasks[self.task_id]

    @property
    def now(self) -> float:
        """The time of the last event, in seconds (what the engine would read)."""
        return self.now_ms / 1000

    def add(
        self,
        kind: EventType,
        step: str = "",
        attempt: int = 0,
        payload: dict[str, Any] | None = None,
        *,
        after_s: float = 0.0,
    ) -> History:
        self.now_ms += int(after_s * 1000)
        event = Event(
            self.state.last_event_id + 1,
            self.term,
            "n1",
            self.task_id,
            step,
            kind,
            payload or {},
            self.now_ms,
            attempt,
        )
        apply(self.state, event)
        return self

    def ok(self, step: str, attempt: int = 1) -> History:
        return self.add(E.STEP_STARTED, step, attempt).add(
            E.STEP_SUCCEEDED, step, attempt, {"result": {"from": step}}
        )

    def fail(self, step: str, attempt: int, **payload: Any) -> History:
        self.add(E.STEP_STARTED, step, attempt)
        return self.add(E.STEP_FAILED, step, attempt, {"error": "broke", **payload})
