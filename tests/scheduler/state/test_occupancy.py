"""Who holds a flow-control limit, as the fold derives it (scheduler/state/occupancy.py)."""

from __future__ import annotations

from typing import Any

from apollo11.scheduler.log.eventlog import Draft
from apollo11.scheduler.log.record import EventType
from apollo11.scheduler.state import State, TaskStatus, apply, reindex, replay

from .test_fold import events

E = EventType
STEPS = {"a": [], "b": ["a"]}
FLOW = {"hold": {"wf/host": "db1"}, "steps": {"b": {"warehouse": "dw1"}}, "rate": {"wf/t": "x"}}


def submit(task: str, flow: dict[str, Any] | None = None) -> Draft:
    return Draft(
        E.TASK_SUBMITTED,
        task,
        payload={"workflow": "wf", "steps": STEPS, "flow": flow or FLOW},
    )


def started(task: str, step: str, attempt: int = 1, **payload: Any) -> Draft:
    return Draft(E.STEP_STARTED, task, step, payload or None, attempt=attempt)


def ok(task: str, step: str, attempt: int = 1) -> Draft:
    return Draft(E.STEP_SUCCEEDED, task, step, {"result": None}, attempt=attempt)


def failed(task: str, step: str, attempt: int = 1, **payload: Any) -> Draft:
    return Draft(E.STEP_FAILED, task, step, {"error": "x", **payload}, attempt=attempt)


def holders(s: State, lid: str, value: str) -> set[tuple[str, str]]:
    return set(s.occupancy.of(lid, value))


def test_a_task_holds_its_workflow_limit_from_its_start_to_its_end() -> None:
    s = replay(events([submit("t1")]))
    assert holders(s, "wf/host", "db1") == set()  # submitted, not started: holds nothing
    assert s.occupancy.unfinished("wf/host", "db1") == {"t1"}
    s = replay(events([submit("t1"), started("t1", "a"), ok("t1", "a")]))
    # between two steps it keeps its slot: another task must not slip in
    assert holders(s, "wf/host", "db1") == {("t1", "")}
    s = replay(
        events([submit("t1"), started("t1", "a"), ok("t1", "a"), started("t1", "b"), ok("t1", "b")])
    )
    assert s.tasks["t1"].status is TaskStatus.SUCCEEDED
    assert holders(s, "wf/host", "db1") == set()
    assert s.occupancy.unfinished("wf/host", "db1") == set()


def test_an_attempt_holds_its_step_limit_while_it_runs_and_a_loss_frees_it() -> None:
    drafts = [submit("t1"), started("t1", "a"), ok("t1", "a"), started("t1", "b")]
    s = replay(events(drafts))
    assert holders(s, "warehouse", "dw1") == {("t1", "b")}
    # its node died: the step is failed as lost; the slot is free once that is folded
    s = replay(events([*drafts, failed("t1", "b", lost=True)]))
    assert holders(s, "warehouse", "dw1") == set()
    assert holders(s, "wf/host", "db1") == {("t1", "")}  # the task still holds its own


def test_a_cancelled_task_frees_everything() -> None:
    drafts = [submit("t1"), started("t1", "a")]
    cancel = Draft(E.TASK_CANCELLED, "t1", payload={"operator": "ana", "reason": "no"})
    s = replay(events([*drafts, failed("t1", "a", final=True), cancel]))
    assert holders(s, "wf/host", "db1") == set()
    assert s.occupancy.unfinished("wf/host", "db1") == set()


def test_the_primarys_arrival_times_and_limits_are_kept_as_recorded() -> None:
    limit = Draft(E.LIMIT, "", payload={"id": "wf/host", "max": 5, "by": "ana"})
    weights = Draft(E.LIMIT, "", payload={"weights": {"acme": 3}, "by": "ana"})
    s = replay(events([submit("t1"), started("t1", "a", tat={"wf/t": 123_456}), limit, weights]))
    assert s.occupancy.tat("wf/t", "x") == 123_456
    assert s.occupancy.limits == {"wf/host": {"max": 5}}
    assert s.occupancy.weights == {"acme": 3.0}
    reset = Draft(E.LIMIT, "", payload={"id": "wf/host", "reset": True, "by": "ana"})
    back = Draft(E.LIMIT, "", payload={"weights": {"acme": 1}, "by": "ana"})
    s = replay(events([limit, weights, reset, back]))
    assert s.occupancy.limits == {} and s.occupancy.weights == {}


def test_a_debounced_submission_replaces_the_input_of_a_task_not_started() -> None:
    flow = {"debounce": "k", "not_before_ms": 2000, "deadline_ms": 9000}
    more = Draft(E.DEBOUNCED, "t1", payload={"input": {"n": 2}, "not_before_ms": 4000})
    s = replay(events([submit("t1", flow), more]))
    t = s.tasks["t1"]
    assert t.input == {"n": 2} and t.flow is not None and t.flow["not_before_ms"] == 4000
    late = replay(events([submit("t1", flow), started("t1", "a"), more]))
    assert late.tasks["t1"].input is None, "a started task's input never changes"
    assert any("DEBOUNCED" in a for a in late.tasks["t1"].anomalies)


def test_a_snapshot_round_trip_rebuilds_holders_and_keeps_the_rest() -> None:
    limit = Draft(E.LIMIT, "", payload={"id": "wf/host", "max": 5, "by": "ana"})
    drafts = [
        submit("t1"),
        submit("t2"),
        started("t1", "a", tat={"wf/t": 77}),
        ok("t1", "a"),
        started("t1", "b"),
        limit,
    ]
    s = replay(events(drafts))
    d = s.to_dict()
    again = State(tasks=dict(s.tasks))
    again.occupancy.load(d.get("flow"))
    reindex(again)
    assert again.occupancy.holders == s.occupancy.holders
    assert again.occupancy.members == s.occupancy.members
    assert again.to_dict()["flow"] == d["flow"]


def test_a_log_without_flow_control_keeps_the_fold_as_it_was() -> None:
    s = State()
    for e in events([Draft(E.TASK_SUBMITTED, "t1", payload={"workflow": "wf", "steps": STEPS})]):
        apply(s, e)
    assert not s.occupancy.active and "flow" not in s.to_dict()
