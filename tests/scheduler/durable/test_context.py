"""DurableContext replay against a fake journal: no store, no engine."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import pytest

from apollo11.scheduler import waits
from apollo11.scheduler.durable import (
    ChildFailed,
    DedupeKey,
    DurableContext,
    DurableStepError,
    DurableWorkflow,
    Idempotent,
    Retry,
    current_step,
    input_hash,
)
from apollo11.scheduler.workflow import StepContext, StepError

T0 = 1_700_000_000_000


class FakeJournal:
    """A log of one task in a list: what the engine's journal reads and appends."""

    def __init__(self) -> None:
        self.cps: list[dict[str, Any]] = []
        self.waiting: dict[str, Any] | None = None
        self.events: list[tuple[int, str, Any]] = []
        self.t = T0
        self.writes: list[list[str]] = []  # the kinds of each record() call
        self.finished: dict[str, dict[str, Any]] = {}  # child task id -> its outcome
        self.planned: list[tuple[str, Any, str, dict[str, Any]]] = []  # (wf, input, key, parent)

    @property
    def checkpoints(self) -> Sequence[Mapping[str, Any]]:
        return list(self.cps)

    @property
    def wait(self) -> Mapping[str, Any] | None:
        return self.waiting

    @property
    def first_event_id(self) -> int:
        return 1

    def first_event(self, key: str, since: int) -> tuple[int, Any] | None:
        return next(((i, p) for i, k, p in self.events if k == key and i >= since), None)

    def child(self, task_id: str) -> Mapping[str, Any] | None:
        return self.finished.get(task_id)

    async def resolve(self, wait: Mapping[str, Any], now_ms: int) -> Mapping[str, Any] | None:
        return waits.resolve(wait, self, now_ms)

    def plan_child(
        self,
        workflow: str,
        input: Any,
        version: int | None,
        key: str,
        parent: Mapping[str, Any],
    ) -> str:
        if workflow == "missing":
            raise LookupError("workflow 'missing' is not loaded")
        self.planned.append((workflow, input, key, dict(parent)))
        return f"c{len(self.planned)}"

    def now_ms(self) -> int:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.t += int(seconds * 1000)

    async def record(
        self, checkpoints: Sequence[Mapping[str, Any]], wait: Mapping[str, Any] | None = None
    ) -> None:
        for c in checkpoints:
            assert c["seq"] == len(self.cps)
            self.cps.append(dict(c))
            if self.waiting is not None and self.waiting["seq"] == c["seq"]:
                self.waiting = None
        if wait is not None:
            self.waiting = dict(wait)
        self.writes.append([c["kind"] for c in checkpoints] + (["WAIT"] if wait else []))


RAN: list[str] = []


def charge(order: dict[str, Any]) -> dict[str, Any]:
    info = current_step()
    assert info is not None
    RAN.append(f"charge {info.dedupe_key} {info.attempt}")
    return {"id": order["id"], "amount": order["amount"]}


def refund(charge: dict[str, Any]) -> str:
    RAN.append("refund")
    return f"refunded {charge['id']}"


flow = DurableWorkflow("flow", version=1)


@flow.main
async def run(ctx: DurableContext, order: dict[str, Any]) -> dict[str, Any]:
    token = str(ctx.uuid())
    c = await ctx.step("charge", charge, order, idempotency=DedupeKey())
    decision = await ctx.wait_for_event(f"approval:{order['id']}", timeout=timedelta(hours=1))
    if decision is None:
        return {"state": await ctx.step("refund", refund, c, idempotency=Idempotent())}
    return {"state": "approved", "by": decision, "token": token, "at": ctx.now().isoformat()}


async def attempt(j: FakeJournal, n: int, wf: DurableWorkflow = flow, input: Any = None) -> Any:
    ctx = StepContext(
        task_id="t1",
        step="main",
        attempt=n,
        input=input if input is not None else {"id": "o1", "amount": 5},
        results={},
        node_id="n1",
        workflow=wf.name,
        version=wf.version,
        journal=j,
    )
    return await wf.steps["main"].fn(ctx)


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


async def test_the_first_run_records_and_waits_a_replay_runs_nothing_again() -> None:
    j = FakeJournal()
    assert await attempt(j, 1) is None  # ended by its wait
    assert j.writes == [["uuid", "step"], ["WAIT"]]  # the uuid rode with the charge
    assert RAN == ["charge t1:1:charge 1"]
    assert j.waiting is not None and j.waiting["until_ms"] == T0 + 3600_000
    assert j.waiting["since"] == 1
    # woken too early (a lost attempt's re-run, say): the same wait again, same deadline
    j.t += 1000
    assert await attempt(j, 2) is None
    assert j.writes[-1] == ["WAIT"] and j.waiting["until_ms"] == T0 + 3600_000
    assert RAN == ["charge t1:1:charge 1"]
    j.events.append((7, "approval:o1", {"by": "alice"}))
    out = await attempt(j, 3)
    assert out["state"] == "approved" and out["by"] == {"by": "alice"}
    assert out["token"] == j.cps[0]["output"]  # the recorded uuid, not a new one
    assert RAN == ["charge t1:1:charge 1"]
    assert [c["kind"] for c in j.cps] == ["uuid", "step", "event", "now"]
    assert j.cps[2]["event_id"] == 7
    # a complete history replays to the same result, recording nothing
    writes = len(j.writes)
    assert await attempt(j, 4) == out and len(j.writes) == writes and len(RAN) == 1


async def test_a_timeout_resolves_to_none() -> None:
    j = FakeJournal()
    await attempt(j, 1)
    j.t += 3600_000
    assert await attempt(j, 2) == {"state": "refunded o1"}
    assert j.cps[2] == {**j.cps[2], "kind": "event", "output": None, "timeout": True}
    assert RAN == ["charge t1:1:charge 1", "refund"]


async def test_an_event_already_in_the_log_resolves_the_wait_without_eviction() -> None:
    j = FakeJournal()
    j.events.append((3, "approval:o1", "yes"))
    out = await attempt(j, 1)
    assert out["by"] == "yes" and not any("WAIT" in w for w in j.writes)


def _changed(name: str) -> DurableWorkflow:
    wf = DurableWorkflow("flow", version=1)

    @wf.main
    async def run2(ctx: DurableContext, order: dict[str, Any]) -> Any:
        ctx.uuid()
        return await ctx.step(name, charge, order, idempotency=DedupeKey())

    return wf


async def test_a_different_call_at_a_recorded_position_is_non_determinism() -> None:
    j = FakeJournal()
    await attempt(j, 1)
    with pytest.raises(StepError) as exc:
        await attempt(j, 2, _changed("charge-v2"))
    report = exc.value.details["nondeterminism"]
    assert exc.value.details["final"] is True
    assert report["seq"] == 1
    assert report["expected"] == {
        "kind": "step",
        "name": "charge",
        "input_hash": j.cps[1]["input_hash"],
    }
    assert report["got"]["name"] == "charge-v2"
    assert "non-determinism at checkpoint 1" in str(exc.value)
    assert "step 'charge'" in str(exc.value) and "step 'charge-v2'" in str(exc.value)


async def test_different_arguments_or_an_early_return_are_non_determinism() -> None:
    j = FakeJournal()
    await attempt(j, 1)
    with pytest.raises(StepError) as exc:
        await attempt(j, 2, input={"id": "o1", "amount": 6})
    assert exc.value.details["nondeterminism"]["seq"] == 1  # same name, other input hash
    with pytest.raises(StepError) as exc:  # returns where the log holds a wait
        await attempt(j, 2, _changed("charge"))
    report = exc.value.details["nondeterminism"]
    assert report["seq"] == 2 and report["got"] is None
    assert report["expected"]["kind"] == "event"


async def test_a_step_that_fails_for_good_raises_the_same_error_at_every_replay() -> None:
    tries: list[int] = []

    def flaky() -> None:
        info = current_step()
        assert info is not None
        tries.append(info.attempt)
        raise StepError("card declined", code=51)

    wf = DurableWorkflow("f", version=1)

    @wf.main
    async def main(ctx: DurableContext, _: Any) -> str:
        try:
            await ctx.step("pay", flaky, idempotency=Idempotent(), retry=Retry(attempts=3))
        except DurableStepError as e:
            return f"{e.error_type}|{e.message}|{e.details}"
        return "paid"

    j = FakeJournal()
    first = await attempt(j, 1, wf)
    assert tries == [1, 2, 3]
    assert j.cps[0]["error"]["details"] == {"code": 51} and j.cps[0]["attempts"] == 3
    assert await attempt(j, 2, wf) == first == "StepError|card declined|{'code': 51}"
    assert tries == [1, 2, 3]


async def test_a_step_timeout_bounds_each_try_and_a_late_thread_is_waited_out() -> None:
    """ctx.step(timeout=): a coroutine past it is cancelled and retried; a sync
    function's thread cannot be stopped, so its try is waited out (never a retry
    beside it) and what it returned late is thrown away."""
    import asyncio
    import threading
    import time

    calls: list[str] = []
    running = threading.Lock()

    async def slow_then_fast() -> str:
        info = current_step()
        assert info is not None
        calls.append(f"async {info.attempt}")
        if info.attempt == 1:
            await asyncio.sleep(30)  # cancelled at the limit
        return "fast"

    def slow_thread() -> str:
        info = current_step()
        assert info is not None
        assert running.acquire(blocking=False), "a retry ran beside a try still running"
        try:
            calls.append(f"thread {info.attempt}")
            time.sleep(0.3 if info.attempt == 1 else 0)
            return f"late {info.attempt}"
        finally:
            running.release()

    wf = DurableWorkflow("timeouts", version=1)

    @wf.main
    async def main(ctx: DurableContext, _: Any) -> list[Any]:
        a = await ctx.step("a", slow_then_fast, idempotency=Idempotent(), timeout=0.05)
        b = await ctx.step(
            "b", slow_thread, idempotency=Idempotent(), timeout=timedelta(seconds=0.05)
        )
        try:
            await ctx.step(
                "c", slow_then_fast, idempotency=Idempotent(), timeout=0.05, retry=Retry(1)
            )
        except DurableStepError as e:
            return [a, b, e.error_type, e.message]
        return [a, b]

    j = FakeJournal()
    out = await attempt(j, 1, wf)
    assert out == ["fast", "late 2", "TimeoutError", "ctx.step 'c' timed out after 0.05s"]
    assert calls == ["async 1", "async 2", "thread 1", "thread 2", "async 1"]
    assert [c.get("attempts") for c in j.cps] == [2, 2, 1]
    assert await attempt(j, 2, wf) == out  # replayed from the log: nothing runs again
    assert len(calls) == 5
    with pytest.raises(StepError, match=r"ctx.step 'd': timeout must be more than 0"):
        await DurableContext(FakeJournal(), task_id="t1", attempt=1).step(
            "d", slow_then_fast, idempotency=Idempotent(), timeout=0
        )


async def test_not_idempotent_needs_a_compensation() -> None:
    from apollo11.scheduler.workflow import NotIdempotent

    wf = DurableWorkflow("n", version=1)

    @wf.main
    async def main(ctx: DurableContext, _: Any) -> Any:
        return await ctx.step("x", len, "a", idempotency=NotIdempotent())

    with pytest.raises(StepError, match="NotIdempotent needs compensate=undo"):
        await attempt(FakeJournal(), 1, wf)


LEDGER: list[str] = []


def book(order: str) -> str:
    info = current_step()
    assert info is not None
    LEDGER.append(f"book {order} try {info.attempt}")
    if order == "flaky" and info.attempt < 3:
        raise RuntimeError("the booking system timed out")
    if order == "full":
        raise StepError("no seats", final=True)
    return f"seat-{order}"


def unbook(output: Any, order: str) -> None:
    LEDGER.append(f"unbook {order} {output}")


booking = DurableWorkflow("booking", version=1)


@booking.main
async def run_booking(ctx: DurableContext, order: str) -> Any:
    from apollo11.scheduler.workflow import NotIdempotent

    try:
        seat = await ctx.step("book", book, order, idempotency=NotIdempotent(compensate=unbook))
    except DurableStepError as e:
        return f"failed: {e.message}"
    await ctx.sleep(60)
    return seat


async def test_a_not_idempotent_step_records_its_intent_and_is_not_run_again() -> None:
    LEDGER.clear()
    j = FakeJournal()
    assert await attempt(j, 1, booking, "a1") is None
    assert j.writes == [["intent"], ["step"], ["WAIT"]]
    assert j.cps[1]["output"] == "seat-a1" and j.cps[1]["compensate"] is True
    j.t += 60_000
    assert await attempt(j, 2, booking, "a1") == "seat-a1"
    assert LEDGER == ["book a1 try 1"]


async def test_a_not_idempotent_step_cut_off_mid_run_is_undone_before_it_runs_again() -> None:
    LEDGER.clear()
    j = FakeJournal()
    # its intent is in the log and nothing more: the node died while it ran
    j.cps.append({"seq": 0, "kind": "intent", "name": "book", "output": None,
                  "input_hash": input_hash(["b2"])})  # fmt: skip
    assert await attempt(j, 2, booking, "b2") is None
    assert LEDGER == ["unbook b2 None", "book b2 try 1"]
    assert [c["kind"] for c in j.cps] == ["intent", "step"]


async def test_each_failed_try_is_undone_and_a_final_failure_too() -> None:
    LEDGER.clear()
    j = FakeJournal()
    await attempt(j, 1, booking, "flaky")
    assert LEDGER == [
        "book flaky try 1",
        "unbook flaky None",
        "book flaky try 2",
        "unbook flaky None",
        "book flaky try 3",
    ]
    LEDGER.clear()
    assert await attempt(FakeJournal(), 1, booking, "full") == "failed: no seats"
    assert LEDGER == ["book full try 1", "unbook full None"]


async def test_sleep_and_memoized_values() -> None:
    wf = DurableWorkflow("s", version=1)

    @wf.main
    async def main(ctx: DurableContext, _: Any) -> Any:
        r = ctx.random()
        await ctx.sleep(30)
        return [r, ctx.random(), ctx.now().timestamp()]

    j = FakeJournal()
    assert await attempt(j, 1, wf) is None
    assert j.writes == [["random", "WAIT"]] and j.waiting is not None
    assert j.waiting["until_ms"] == T0 + 30_000
    j.t = T0 + 30_000
    out = await attempt(j, 2, wf)
    assert out[0] == j.cps[0]["output"] and out[2] == (T0 + 30_000) / 1000
    assert await attempt(j, 3, wf) == out


kids = DurableWorkflow("kids", version=1)


@kids.main
async def run_kids(ctx: DurableContext, items: list[str]) -> Any:
    handles = [ctx.spawn("ship", {"item": i}) for i in items]
    try:
        shipped = await ctx.gather(*handles)
    except ChildFailed as e:
        return ["failed", e.task_id, e.state]
    which, got = await ctx.first(ctx.wait_for_event("go", timeout=60), handles[0])
    return [shipped, which, got]


def _done(result: Any) -> dict[str, Any]:
    return {"status": "SUCCEEDED", "result": result, "error": None}


async def test_children_are_spawned_once_gathered_and_replayed() -> None:
    j = FakeJournal()
    assert await attempt(j, 1, kids, ["a", "b"]) is None
    # the spawns ride with the gather's WAIT: one record
    assert j.writes == [["spawn", "spawn", "WAIT"]]
    assert [(w, i, k, p) for w, i, k, p in j.planned] == [
        ("ship", {"item": "a"}, "t1:0", {"task_id": "t1", "seq": 0, "close": "cancel"}),
        ("ship", {"item": "b"}, "t1:1", {"task_id": "t1", "seq": 1, "close": "cancel"}),
    ]
    assert j.waiting is not None and j.waiting["kind"] == "all"
    assert [p["task_id"] for p in j.waiting["parts"]] == ["c1", "c2"]
    j.finished["c1"] = _done("A")
    assert await attempt(j, 2, kids, ["a", "b"]) is None  # woken early: the same wait again
    assert j.writes[-1] == ["WAIT"] and len(j.planned) == 2  # nothing spawned again
    j.finished["c2"] = _done("B")
    out = await attempt(j, 3, kids, ["a", "b"])
    # first of (event, child c1): the child had finished, the event never came
    assert out == [["A", "B"], 1, "A"]
    assert j.cps[2]["output"] == ["A", "B"] and j.cps[3]["output"] == [1, "A"]
    writes = len(j.writes)
    assert await attempt(j, 4, kids, ["a", "b"]) == out and len(j.writes) == writes


async def test_a_failed_child_raises_the_same_at_every_replay() -> None:
    j = FakeJournal()
    await attempt(j, 1, kids, ["a", "b"])
    j.finished["c2"] = {"status": "CANCELLED", "result": None, "error": "stop"}
    out = await attempt(j, 2, kids, ["a", "b"])  # fail-fast: c1 still runs
    assert out == ["failed", "c2", "CANCELLED"]
    assert j.cps[2]["error"]["type"] == "ChildFailed"
    assert await attempt(j, 3, kids, ["a", "b"]) == out


async def test_a_changed_spawn_is_non_determinism() -> None:
    j = FakeJournal()
    await attempt(j, 1, kids, ["a", "b"])
    with pytest.raises(StepError) as exc:
        await attempt(j, 2, kids, ["a", "c"])
    report = exc.value.details["nondeterminism"]
    assert report["seq"] == 1 and report["got"]["kind"] == "spawn"


async def test_spawn_and_gather_refuse_what_they_cannot_take() -> None:
    wf = DurableWorkflow("bad", version=1)

    @wf.main
    async def main(ctx: DurableContext, what: str) -> Any:
        if what == "missing":
            try:
                ctx.spawn("missing", {})
            except Exception:  # a spawn that cannot be made is not the code's to swallow
                return "swallowed"
        if what == "policy":
            ctx.spawn("ship", {}, close="orphan")
        return await ctx.gather(ctx.step("x", len, "a", idempotency=Idempotent()))  # type: ignore[arg-type]

    with pytest.raises(StepError, match=r"ctx.spawn 'missing' at checkpoint 0: .*not loaded"):
        await attempt(FakeJournal(), 1, wf, "missing")
    with pytest.raises(ValueError, match="close must be one of"):
        await attempt(FakeJournal(), 1, wf, "policy")
    with pytest.raises(TypeError, match=r"ctx\.gather takes what ctx\.spawn"):
        await attempt(FakeJournal(), 1, wf, "gather")
