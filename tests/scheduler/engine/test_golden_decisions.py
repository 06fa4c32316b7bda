"""decide() on the golden histories (tests/golden/*), event by event.

Two checks:

* every effect of the engine in a history (a STARTED, a FAILED of a lost
  attempt, the first COMPENSATING of a compensation) is one that decide(),
  given the task just before it, names: the engine does only what a decision
  says. Tasks with anomalies are left out, and the events that make one:
  decide() stops such a task (Stuck), and the hand-written histories go on
  regardless (eventful's d1 starts `right` twice, at event 8).
* the decisions after every event match tests/golden/decisions.json, recorded
  once and read by hand: regenerate it on purpose only, with
  `python -m tests.scheduler.engine.test_golden_decisions`, and say why.

The golden logs name workflows that no module defines; the declarations each
task's history implies are given here: every step idempotent with the default
retry, except d2's `left`, whose failure owes a compensation and whose re-run
follows the compensation at once (backoff 0). A decision is made with what
the primary of the moment runs (the steps it STARTED or is compensating in
its term: a new term runs nothing yet) and at the time of the event.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from apollo11.scheduler.engine import Action, Compensate, FailLost, StartAttempt, decide
from apollo11.scheduler.log import Event, EventLog, EventType
from apollo11.scheduler.state import State, StepStatus, TaskState, apply
from apollo11.scheduler.workflow import Retry, Workflow
from tests.scheduler.engine.histories import workflow

GOLDEN = Path(__file__).parents[2] / "golden"
RECORD = GOLDEN / "decisions.json"
NAMES = ["etl-happy", "eventful", "anomalous"]
E = EventType


def golden_events(name: str) -> list[Event]:
    events: list[Event] = []
    EventLog.open(GOLDEN / name, read_only=True, on_events=events.extend).close_sync()
    return events


def declared(task: TaskState) -> Workflow:
    """The workflow a golden task's history implies (see the module docstring)."""
    if task.task_id == "d2":
        return workflow(
            task.deps,
            name=task.workflow,
            version=task.version,
            not_idempotent=["left"],
            retry=Retry(backoff_s=0),
        )
    return workflow(task.deps, name=task.workflow, version=task.version)


class Primary:
    """The history as the primary of the moment saw it: state, and what it runs."""

    def __init__(self) -> None:
        self.state = State()
        self.running: dict[str, set[str]] = {}
        self._workflows: dict[str, Workflow] = {}

    def decide(self, task_id: str, at_ms: int) -> list[Action]:
        task = self.state.tasks[task_id]
        wf = self._workflows.get(task_id)
        if wf is None:
            wf = self._workflows[task_id] = declared(task)
        return decide(task, wf, self.running.get(task_id, set()), at_ms / 1000)

    def apply(self, e: Event) -> None:
        apply(self.state, e)
        kind = e.event_type
        if kind is E.TERM_STARTED:
            self.running.clear()  # a new primary runs nothing yet
            return
        busy = self.running.setdefault(e.task_id, set())
        if kind in (E.STEP_STARTED, E.STEP_COMPENSATING):
            busy.add(e.step_name)
        elif kind in (E.STEP_SUCCEEDED, E.STEP_COMPENSATED) or (
            kind is E.STEP_FAILED and not e.payload.get("compensation")
        ):
            busy.discard(e.step_name)

    def effect(self, e: Event) -> Action | None:
        """The action an engine event is the effect of, or None (outcomes, operators)."""
        if e.event_type is E.STEP_STARTED:
            return StartAttempt(e.step_name, e.attempt)
        if e.event_type is E.STEP_FAILED and e.payload.get("lost"):
            p = e.payload
            return FailLost(e.step_name, e.attempt, bool(p.get("final")), bool(p.get("compensate")))
        if e.event_type is E.STEP_COMPENSATING:
            step = self.state.tasks[e.task_id].steps[e.step_name]
            if step.status is not StepStatus.COMPENSATING:  # not a retry of a failed one
                return Compensate(e.step_name, resume=False)
        return None


def walk(name: str) -> Iterator[tuple[Event, list[Action] | None, dict[str, list[Action]]]]:
    """(event, the decision just before it on its task, the decisions right after it)."""
    p = Primary()
    for e in golden_events(name):
        before = p.decide(e.task_id, e.timestamp) if e.task_id in p.state.tasks else None
        p.apply(e)
        if e.event_type is E.TERM_STARTED:
            # A new primary decides every unfinished task (Engine.start).
            touched = [t.task_id for t in p.state.tasks.values() if not t.quiescent]
        else:
            touched = [e.task_id] if e.task_id else []
        yield e, before, {t: p.decide(t, e.timestamp) for t in touched}


def record(name: str) -> list[dict[str, object]]:
    return [
        {"event": e.event_id, "decided": {t: [repr(a) for a in acts] for t, acts in after.items()}}
        for e, _, after in walk(name)
        if after
    ]


@pytest.mark.parametrize("name", ["etl-happy", "eventful"])
def test_every_effect_in_a_golden_history_is_one_a_decision_named(name: str) -> None:
    p = Primary()
    checked = 0
    for e in golden_events(name):
        task = p.state.tasks.get(e.task_id)
        effect = p.effect(e) if task is not None and not task.anomalies else None
        actions = p.decide(e.task_id, e.timestamp) if effect is not None else []
        p.apply(e)
        if effect is not None and not p.state.tasks[e.task_id].anomalies:
            assert effect in actions, f"event {e.event_id} {e.event_type.name}: {actions}"
            checked += 1
    assert checked >= {"etl-happy": 40, "eventful": 10}[name]


def test_the_decisions_on_the_golden_histories_are_the_recorded_ones() -> None:
    recorded = json.loads(RECORD.read_text())
    assert {name: record(name) for name in NAMES} == recorded


def main() -> None:
    RECORD.write_text(
        json.dumps({name: record(name) for name in NAMES}, indent=1, ensure_ascii=False) + "\n"
    )
    print(f"wrote {RECORD}", file=sys.stderr)


if __name__ == "__main__":
    main()
