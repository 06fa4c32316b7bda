"""Children of durable tasks through the engine, on a real store: ctx.spawn, awaiting a
child, ctx.gather and ctx.first, a failed child raising at the parent's await, and the
parent-close policies (issue 18, items 1 and 7)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from apollo11.scheduler.durable import (
    ChildFailed,
    DurableContext,
    DurableWorkflow,
    Idempotent,
)
from apollo11.scheduler.log import EventType
from apollo11.scheduler.state import TaskStatus
from apollo11.scheduler.workflow import StepContext, StepError, Workflow
from tests.scheduler.durable.test_engine_durable import ManualClock, _until
from tests.scheduler.test_engine import Rig, make_rig

RAN: list[str] = []
HOLD: dict[str, asyncio.Event] = {}

# ------------------------------------------------------------------ the children

ship = Workflow("ship", version=1)


@ship.step(idempotency=Idempotent())
async def pack(ctx: StepContext) -> dict[str, Any]:
    item = ctx.input["item"]
    RAN.append(f"pack {item}")
    gate = HOLD.get(str(item))
    if gate is not None:
        await gate.wait()
    if ctx.input.get("fail"):
        raise StepError(f"no stock for {item}", final=True)
    return {"packed": item}


sub = DurableWorkflow("sub", version=1)


@sub.main
async def run_sub(ctx: DurableContext, key: str) -> Any:
    return await ctx.wait_for_event(key)


# ------------------------------------------------------------------ the parents

fanout = DurableWorkflow("fanout", version=1)


def _refund(child: str) -> str:
    return f"refund {child}"


@fanout.main
async def run_fanout(ctx: DurableContext, order: dict[str, Any]) -> Any:
    handles = [
        ctx.spawn("ship", {"item": i, "fail": i in order.get("bad", ())}) for i in order["items"]
    ]
    try:
        shipped = await ctx.gather(*handles)
    except ChildFailed as e:
        refunded = await ctx.step("refund", _refund, e.task_id, idempotency=Idempotent())
        return {"failed": e.state, "child": e.task_id, "refund": refunded}
    return {"shipped": shipped, "children": [h.task_id for h in handles]}


racer = DurableWorkflow("racer", version=1)


@racer.main
async def run_racer(ctx: DurableContext, key: str) -> Any:
    child = ctx.spawn(sub, key, close=("abandon" if key.endswith("!") else "cancel"))
    which, value = await ctx.first(child, ctx.sleep(60))
    return {"which": which, "value": value, "child": child.task_id}


nanny = DurableWorkflow("nanny", version=1)


@nanny.main
async def run_nanny(ctx: DurableContext, keys: list[str]) -> Any:
    kept = ctx.spawn("sub", keys[0])
    ctx.spawn("sub", keys[1], close="abandon")
    return await kept


FLOWS = (ship, sub, fanout, racer, nanny)


async def _rig(tmp_path: Path) -> Rig:
    RAN.clear()
    HOLD.clear()
    return await make_rig(tmp_path / "d", ManualClock(), *FLOWS)


def _children(rig: Rig, parent: str) -> list[str]:
    return [
        t.task_id
        for t in rig.store.state.tasks.values()
        if t.parent is not None and t.parent["task_id"] == parent
    ]


async def _close(rig: Rig) -> None:
    await rig.engine.stop()
    await rig.store.close()


async def test_gather_returns_every_childs_result_in_order(tmp_path: Path) -> None:
    rig = await _rig(tmp_path)
    try:
        task_id = await rig.run("fanout", {"items": ["a", "b", "c"]})
        task = rig.store.state.peek(task_id)
        assert task is not None and task.status is TaskStatus.SUCCEEDED
        result = task.steps["main"].result
        assert result["shipped"] == [{"pack": {"packed": i}} for i in "abc"]
        kids = result["children"]
        assert sorted(kids) == sorted(_children(rig, task_id))
        for seq, kid in enumerate(kids):
            child = rig.store.state.peek(kid)
            assert child is not None and child.status is TaskStatus.SUCCEEDED
            assert child.parent == {"task_id": task_id, "seq": seq, "close": "cancel"}
            assert child.idempotency_key == f"{task_id}:{seq}"
        assert sorted(RAN) == ["pack a", "pack b", "pack c"]
        cps = task.durable.checkpoints if task.durable else []
        assert [c["kind"] for c in cps] == ["spawn", "spawn", "spawn", "all"]
        # each child's submission went into the log before its parent's spawn checkpoint
        order = [(e.event_type, e.task_id) for e in rig.store.log.read()]
        for kid in kids:
            assert order.index((EventType.TASK_SUBMITTED, kid)) < order.index(
                (EventType.CHECKPOINT, task_id)
            )
    finally:
        await _close(rig)


async def test_a_failed_child_raises_at_the_parents_await(tmp_path: Path) -> None:
    rig = await _rig(tmp_path)
    try:
        task_id = await rig.run("fanout", {"items": ["a", "b"], "bad": ["b"]})
        task = rig.store.state.peek(task_id)
        assert task is not None and task.status is TaskStatus.SUCCEEDED
        result = task.steps["main"].result
        bad = next(
            k for k in _children(rig, task_id) if rig.store.state.tasks[k].input["item"] == "b"
        )
        assert result == {"failed": "FAILED", "child": bad, "refund": f"refund {bad}"}
        gather = next(
            c for c in (task.durable.checkpoints if task.durable else []) if c["kind"] == "all"
        )
        assert gather["error"]["type"] == "ChildFailed"
        assert "no stock for b" in gather["error"]["message"]
    finally:
        await _close(rig)


async def test_first_of_a_child_and_a_timer(tmp_path: Path) -> None:
    rig = await _rig(tmp_path)
    try:
        # the child wins: its event comes before the timer
        fast = await rig.engine.submit("racer", "go:1")
        await _until(rig, fast.task_id, TaskStatus.WAITING)
        await rig.engine.send_event("go:1", {"n": 1})
        async with asyncio.timeout(10):
            done = await rig.engine.wait(fast.task_id)
        assert done.steps["main"].result["which"] == 0
        assert done.steps["main"].result["value"] == {"n": 1}
        # the timer wins: the child is still waiting, and is cancelled with its parent's
        # return (parent-close policy "cancel")
        slow = await rig.engine.submit("racer", "go:2")
        await _until(rig, slow.task_id, TaskStatus.WAITING)
        rig.clock.advance(61)
        async with asyncio.timeout(10):
            done = await rig.engine.wait(slow.task_id)
        result = done.steps["main"].result
        assert result["which"] == 1 and result["value"] is None
        async with asyncio.timeout(10):
            child = await rig.engine.wait(result["child"])
        assert child.status is TaskStatus.CANCELLED
        assert child.cancelled is not None and child.cancelled["operator"] == "apollo11"
        assert "returned without waiting" in child.cancelled["reason"]
    finally:
        await _close(rig)


async def test_cancelling_a_parent_cancels_its_children_unless_abandoned(tmp_path: Path) -> None:
    rig = await _rig(tmp_path)
    try:
        s = await rig.engine.submit("nanny", ["k:kept", "k:free"])
        await _until(rig, s.task_id, TaskStatus.WAITING)
        kids = _children(rig, s.task_id)
        assert len(kids) == 2
        for k in kids:
            await _until(rig, k, TaskStatus.WAITING)
        await rig.engine.cancel_task(s.task_id, operator="alice", reason="order withdrawn")
        by_key = {rig.store.state.tasks[k].input: k for k in kids}
        async with asyncio.timeout(10):
            kept = await rig.engine.wait(by_key["k:kept"])
        assert kept.status is TaskStatus.CANCELLED
        assert kept.cancelled is not None and kept.cancelled["operator"] == "alice"
        assert (
            s.task_id in kept.cancelled["reason"] and "order withdrawn" in kept.cancelled["reason"]
        )
        # the abandoned child runs on, and finishes on its own
        free = rig.store.state.tasks[by_key["k:free"]]
        assert free.cancelled is None and free.status is TaskStatus.WAITING
        await rig.engine.send_event("k:free", "done")
        async with asyncio.timeout(10):
            free = await rig.engine.wait(by_key["k:free"])
        assert free.status is TaskStatus.SUCCEEDED
    finally:
        await _close(rig)


async def test_cancelling_a_parent_cancels_a_running_child_attempt(tmp_path: Path) -> None:
    rig = await _rig(tmp_path)
    HOLD["x"] = asyncio.Event()
    try:
        s = await rig.engine.submit("fanout", {"items": ["x"]})
        async with asyncio.timeout(10):
            while "pack x" not in RAN:
                await asyncio.sleep(0.005)
        (kid,) = _children(rig, s.task_id)
        assert rig.engine.is_busy(kid, "pack")
        await rig.engine.cancel_task(s.task_id, operator="bob", reason="stop")
        async with asyncio.timeout(10):
            child = await rig.engine.wait(kid)
        assert child.status is TaskStatus.CANCELLED
        assert child.steps["pack"].error == "cancelled by operator"
        HOLD["x"].set()  # what it would return now is not applied
        await asyncio.sleep(0.05)
        assert rig.store.state.tasks[kid].steps["pack"].status.value == "FAILED"
    finally:
        HOLD["x"].set()
        await _close(rig)


async def test_a_restart_while_waiting_on_children_spawns_none_again(tmp_path: Path) -> None:
    rig = await _rig(tmp_path)
    HOLD["y"] = asyncio.Event()
    s = await rig.engine.submit("fanout", {"items": ["y", "z"]})
    await _until(rig, s.task_id, TaskStatus.WAITING)
    async with asyncio.timeout(10):
        while "pack y" not in RAN:
            await asyncio.sleep(0.005)
    kids = sorted(_children(rig, s.task_id))
    rig = await rig.reopen(*FLOWS)  # the node restarts: the parent is only its log
    try:
        HOLD["y"].set()
        async with asyncio.timeout(10):
            while (
                kids_task := rig.store.state.tasks[s.task_id]
            ).status is not TaskStatus.SUCCEEDED:
                rig.clock.advance(10)  # past the lost attempt's retry backoff
                await asyncio.sleep(0.01)
            done = await rig.engine.wait(kids_task.task_id)
        assert done.status is TaskStatus.SUCCEEDED
        assert sorted(_children(rig, s.task_id)) == kids  # no second child
        assert [r["pack"]["packed"] for r in done.steps["main"].result["shipped"]] == ["y", "z"]
    finally:
        HOLD["y"].set()
        await _close(rig)


async def test_spawning_an_unknown_workflow_fails_the_main_naming_it(tmp_path: Path) -> None:
    typo = DurableWorkflow("typo", version=1)

    @typo.main
    async def run_typo(ctx: DurableContext, _: Any) -> Any:
        try:
            return await ctx.spawn("shipp", {})
        except Exception as e:  # the position is taken: user code cannot carry on past it
            return f"caught {e}"

    RAN.clear()
    rig = await make_rig(tmp_path / "t", ManualClock(), typo, *FLOWS)
    try:
        task_id = await rig.run("typo")
        task = rig.store.state.peek(task_id)
        assert task is not None and task.status is TaskStatus.FAILED
        error = task.steps["main"].error or ""
        assert "ctx.spawn 'shipp' at checkpoint 0" in error and "shipp" in error
        assert _children(rig, task_id) == []
    finally:
        await _close(rig)


async def test_a_childs_cancel_whose_write_failed_is_written_again(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The cancel of a child whose parent closed, refused by the log (an error, not
    leadership lost), is not forgotten: the child is decided again and cancelled."""
    from apollo11.scheduler.errors import ApolloError

    rig = await _rig(tmp_path)
    intake = rig.engine._intake
    real = intake.close_child
    tries: list[str] = []

    async def flaky(task_id: str, **kw: Any) -> Any:
        tries.append(task_id)
        if len(tries) == 1:
            raise ApolloError("append refused (a test's fault)")
        return await real(task_id, **kw)

    monkeypatch.setattr(intake, "close_child", flaky)
    try:
        s = await rig.engine.submit("nanny", ["k:kept", "k:free"])
        await _until(rig, s.task_id, TaskStatus.WAITING)
        kids = _children(rig, s.task_id)
        for k in kids:
            await _until(rig, k, TaskStatus.WAITING)
        await rig.engine.cancel_task(s.task_id, operator="alice", reason="order withdrawn")
        by_key = {rig.store.state.tasks[k].input: k for k in kids}
        async with asyncio.timeout(10):
            while not tries:
                await asyncio.sleep(0.005)
        rig.clock.advance(5)  # past any pause before it is tried again
        async with asyncio.timeout(10):
            kept = await rig.engine.wait(by_key["k:kept"])
        assert kept.status is TaskStatus.CANCELLED and len(tries) == 2
    finally:
        await _close(rig)
