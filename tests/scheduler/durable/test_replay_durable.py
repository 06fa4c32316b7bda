"""Durable records in replay, and decide() on waiting tasks: no store, no loop, no clock."""

from __future__ import annotations

from typing import Any

from apollo11.scheduler import retry
from apollo11.scheduler.durable import DurableContext, DurableWorkflow, Idempotent
from apollo11.scheduler.engine import StartAttempt, Stuck, WakeAt, decide
from apollo11.scheduler.engine.decide import CancelTask
from apollo11.scheduler.log import Event
from apollo11.scheduler.state import State, StepStatus, TaskState, TaskStatus, apply, reindex
from tests.scheduler.engine.histories import T0_MS, E, History

NOTHING: frozenset[str] = frozenset()
MAIN = {"main": []}

wf = DurableWorkflow("d", version=1)


@wf.main
async def _main(ctx: DurableContext, _: Any) -> None:
    await ctx.step("s", len, "x", idempotency=Idempotent())


wf.validate()


def _event(h: History, key: str, payload: Any, idem: str | None = None) -> int:
    body: dict[str, Any] = {"key": key, "payload": payload}
    if idem:
        body["idempotency_key"] = idem
    eid = h.state.last_event_id + 1
    apply(h.state, Event(eid, 1, "n1", "", "", E.EVENT, body, h.now_ms, 0))
    return eid


def _cp(seq: int, kind: str = "step", name: str = "s", **more: Any) -> dict[str, Any]:
    return {"seq": seq, "kind": kind, "name": name, "input_hash": "h", **more}


def _waiting(h: History, key: str = "k", until_ms: int | None = None, attempt: int = 1) -> History:
    wait = _cp(1, "event", key, key=key, since=h.task.first_event_id)
    if until_ms is not None:
        wait["until_ms"] = until_ms
    return h.add(E.WAIT, "main", attempt, wait)


def test_a_wait_ends_the_attempt_and_the_task_waits() -> None:
    h = History(MAIN).add(E.STEP_STARTED, "main", 1)
    h.add(E.CHECKPOINT, "main", 1, _cp(0, output={"charged": 1}))
    assert h.task.status is TaskStatus.RUNNING and h.task.busy == 1
    _waiting(h)
    task = h.task
    assert task.status is TaskStatus.WAITING and task.busy == 0
    assert task.steps["main"].status is StepStatus.WAITING
    assert task.durable is not None and [c["seq"] for c in task.durable.checkpoints] == [0]
    assert h.state.waits == {"k": {"t"}} and task.durable.matched is None
    # nothing to do until the event: no timer either
    assert decide(task, wf, NOTHING, h.now) == []


def test_an_event_sent_before_the_wait_is_matched_and_a_duplicate_is_recorded_once() -> None:
    h = History(MAIN).add(E.STEP_STARTED, "main", 1)
    first = _event(h, "k", {"ok": True}, idem="i1")
    _event(h, "k", {"ok": False}, idem="i1")  # a racing copy: recorded once
    assert h.state.events == {"k": [(first, {"ok": True})]}
    assert h.state.event_keys == {"i1": first}
    h.add(E.CHECKPOINT, "main", 1, _cp(0, output=1))
    _waiting(h)
    assert h.task.durable is not None and h.task.durable.matched == first
    assert decide(h.task, wf, NOTHING, h.now) == [StartAttempt("main", 2)]


def test_an_event_after_the_wait_wakes_it_and_the_resolution_clears_it() -> None:
    h = History(MAIN).add(E.STEP_STARTED, "main", 1).add(E.CHECKPOINT, "main", 1, _cp(0))
    _waiting(h)
    _event(h, "other", 1)
    assert h.task.durable is not None and h.task.durable.matched is None
    eid = _event(h, "k", {"by": "alice"})
    assert h.task.durable.matched == eid
    h.add(E.STEP_STARTED, "main", 2)
    assert h.task.status is TaskStatus.RUNNING
    h.add(E.CHECKPOINT, "main", 2, _cp(1, "event", "k", output={"by": "alice"}, event_id=eid))
    assert h.task.durable.wait is None and "k" not in h.state.waits
    h.add(E.STEP_SUCCEEDED, "main", 2, {"result": "done"})
    assert h.task.status is TaskStatus.SUCCEEDED and h.task.quiescent


def test_a_deadline_arms_a_wake_up_and_runs_the_main_when_due() -> None:
    h = History(MAIN).add(E.STEP_STARTED, "main", 1).add(E.CHECKPOINT, "main", 1, _cp(0))
    _waiting(h, until_ms=T0_MS + 60_000)
    assert decide(h.task, wf, NOTHING, h.now) == [WakeAt("main", T0_MS / 1000 + 60)]
    assert decide(h.task, wf, NOTHING, T0_MS / 1000 + 60) == [StartAttempt("main", 2)]


def test_waking_uses_no_retry_attempt() -> None:
    h = History(MAIN).add(E.STEP_STARTED, "main", 1).add(E.CHECKPOINT, "main", 1, _cp(0))
    _waiting(h, until_ms=T0_MS)
    for attempt in range(2, 6):  # four wake-ups, each ending in a new wait
        h.add(E.STEP_STARTED, "main", attempt)
        h.add(E.WAIT, "main", attempt, {**_cp(1, "sleep", "sleep"), "until_ms": T0_MS})
    step = h.task.steps["main"]
    assert step.waits == 5 and step.attempt == 5
    h.add(E.STEP_STARTED, "main", 6)
    # the running attempt is the first that counts: a failure now is final (attempts=1)
    assert retry.budget(h.task.steps["main"]).failed == 1
    assert retry.final_after_failure(h.task.steps["main"], wf.steps["main"].retry)


def test_non_determinism_stops_the_task_until_an_operator_retries() -> None:
    h = History(MAIN).add(E.STEP_STARTED, "main", 1)
    report = {"seq": 0, "expected": None, "got": None}
    h.add(E.STEP_FAILED, "main", 1, {"error": "nd", "final": True, "nondeterminism": report})
    assert h.task.status is TaskStatus.NONDETERMINISTIC and h.task.quiescent
    h.add(E.MANUAL_OVERRIDE, "main", 0, {"action": "retry", "operator": "o", "reason": "fixed"})
    h.add(E.STEP_STARTED, "main", 2)
    assert h.task.status is TaskStatus.RUNNING
    assert h.task.durable is not None and h.task.durable.nondeterminism is None


def test_out_of_order_or_stray_records_are_anomalies() -> None:
    h = History(MAIN).add(E.STEP_STARTED, "main", 1)
    h.add(E.CHECKPOINT, "main", 1, _cp(3))
    assert "position 3" in h.task.anomalies[0]
    h2 = History(MAIN).add(E.CHECKPOINT, "main", 1, _cp(0))
    assert "while step main is PENDING" in h2.task.anomalies[0]
    assert isinstance(decide(h2.task, wf, NOTHING, h2.now)[0], Stuck)


def test_cancel_while_waiting_unregisters_the_wait() -> None:
    h = History(MAIN).add(E.STEP_STARTED, "main", 1).add(E.CHECKPOINT, "main", 1, _cp(0))
    _waiting(h)
    h.add(E.TASK_CANCELLED, payload={"operator": "o", "reason": "r"})
    assert h.task.status is TaskStatus.CANCELLED and h.task.quiescent
    assert h.state.waits == {}
    assert decide(h.task, wf, NOTHING, h.now) == []


def test_durable_state_survives_to_dict_and_a_reindex() -> None:
    h = History(MAIN).add(E.STEP_STARTED, "main", 1).add(E.CHECKPOINT, "main", 1, _cp(0))
    eid = _event(h, "k", [1, 2], idem="x")
    _waiting(h)
    copy = State(
        tasks={"t": TaskState.from_dict(h.task.to_dict())},
        last_event_id=h.state.last_event_id,
        term=h.state.term,
    )
    copy.load_events(h.state.events_dict()["events"])
    reindex(copy)
    assert copy.tasks["t"] == h.task and copy.to_dict() == h.state.to_dict()
    assert copy.waits == h.state.waits and copy.tasks["t"].durable is not None
    assert copy.tasks["t"].durable.matched == eid
    assert copy.event_keys == {"x": eid}


def test_a_dag_task_dict_has_no_durable_entry() -> None:
    h = History({"a": []}).ok("a")
    assert "durable" not in h.task.to_dict() and "events" not in h.state.to_dict()
    assert "waits" not in h.task.to_dict()["steps"][0]


def test_a_first_of_an_event_and_a_timer_is_indexed_by_its_key_and_woken_by_either() -> None:
    h = History(MAIN).add(E.STEP_STARTED, "main", 1)
    parts = [
        {"kind": "event", "key": "k", "since": h.task.first_event_id},
        {"kind": "sleep", "until_ms": T0_MS + 60_000},
    ]
    h.add(E.WAIT, "main", 1, _cp(0, "any", "first", parts=parts))
    assert h.task.status is TaskStatus.WAITING and h.state.waits == {"k": {"t"}}
    # nothing yet: woken at the timer's deadline
    assert decide(h.task, wf, NOTHING, h.now, h.state) == [WakeAt("main", T0_MS / 1000 + 60)]
    assert decide(h.task, wf, NOTHING, T0_MS / 1000 + 60, h.state) == [StartAttempt("main", 2)]
    eid = _event(h, "k", "go")
    assert h.task.durable is not None and h.task.durable.matched == eid
    assert decide(h.task, wf, NOTHING, h.now, h.state) == [StartAttempt("main", 2)]
    assert decide(h.task, wf, NOTHING, h.now) == [StartAttempt("main", 2)]  # alone: matched
    # a snapshot's reindex finds the composite wait's key again
    copy = State(tasks={"t": TaskState.from_dict(h.task.to_dict())})
    copy.load_events(h.state.events_dict()["events"])
    reindex(copy)
    assert copy.waits == {"k": {"t"}} and copy.tasks["t"].durable is not None
    assert copy.tasks["t"].durable.matched == eid


def test_a_wait_on_children_wakes_when_they_have_finished() -> None:
    parent = History(MAIN).add(E.STEP_STARTED, "main", 1)
    kid = History({"pack": []}, task_id="c1")
    parent.state.tasks["c1"] = kid.task  # one world: the parent and its child
    parts = [{"kind": "child", "task_id": "c1"}]
    parent.add(E.WAIT, "main", 1, _cp(0, "all", "gather", parts=parts))
    p = parent.task
    assert decide(p, wf, NOTHING, parent.now, parent.state) == []  # no timer: the child moves it
    kid.add(E.STEP_STARTED, "pack", 1).add(E.STEP_SUCCEEDED, "pack", 1, {"result": 7})
    assert decide(p, wf, NOTHING, parent.now, parent.state) == [StartAttempt("main", 2)]


def test_a_child_is_cancelled_with_its_parent_unless_abandoned() -> None:
    parent = History(MAIN).add(E.STEP_STARTED, "main", 1)
    kids = {}
    for name, close in (("c1", "cancel"), ("c2", "abandon")):
        kid = History(MAIN, task_id=name)
        kid.task.parent = {"task_id": "t", "seq": 0, "close": close}
        parent.state.tasks[name] = kid.task
        kids[name] = kid
    assert decide(kids["c1"].task, wf, NOTHING, parent.now, parent.state) == [
        StartAttempt("main", 1)
    ]
    parent.add(E.TASK_CANCELLED, payload={"operator": "alice", "reason": "no"})
    (closing,) = decide(kids["c1"].task, wf, NOTHING, parent.now, parent.state)
    assert isinstance(closing, CancelTask) and closing.operator == "alice"
    assert "parent task t was cancelled: no" in closing.reason
    assert decide(kids["c2"].task, wf, NOTHING, parent.now, parent.state) == [
        StartAttempt("main", 1)
    ]


def test_an_event_idempotency_key_is_forgotten_after_its_ttl() -> None:
    h = History(MAIN)
    body = {"key": "k", "payload": 1, "idempotency_key": "i", "ttl_ms": 60_000}

    def send(payload: dict[str, Any], after_s: float) -> int:
        h.now_ms += int(after_s * 1000)
        eid = h.state.last_event_id + 1
        apply(h.state, Event(eid, 1, "n1", "", "", E.EVENT, payload, h.now_ms, 0))
        return eid

    first = send(body, 0)
    send({**body, "payload": 2}, 30)  # within the TTL: a duplicate
    assert h.state.events["k"] == [(first, 1)] and h.state.event_keys == {"i": first}
    # a resend after the TTL renews the key (SendEvent says which event it renews)
    renewed = send({**body, "payload": 3, "renews": first}, 40)
    assert h.state.events["k"][-1] == (renewed, 3) and h.state.event_keys == {"i": renewed}
    # without a resend, the next event after the TTL cleans the key up
    send({"key": "other", "payload": None}, 61)
    assert h.state.event_keys == {} and h.state.event_key_expires == {}
    # and a snapshot carries what is left of the index
    send({**body, "payload": 4}, 0)
    copy = State()
    copy.load_events(h.state.events_dict()["events"])
    assert copy.event_key_expires == h.state.event_key_expires != {}
    assert copy.event_key_heap == [(h.now_ms + 60_000, "i")]
