"""The engine through its Python API, on a real store, with a fake clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.engine import Engine
from apollo11.scheduler.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    NotLeaderError,
)
from apollo11.scheduler.log import EventType, FsyncPolicy, LogConfig
from apollo11.scheduler.state import StepStatus, TaskStatus
from apollo11.scheduler.state.store import Store, StoreConfig
from apollo11.scheduler.workflow import (
    Checkpoint,
    DedupeKey,
    Idempotent,
    NotIdempotent,
    Registry,
    Retry,
    StepContext,
    Workflow,
)

CFG = StoreConfig(log=LogConfig(fsync=FsyncPolicy.UNSAFE_NEVER), snapshot_interval=50)


@dataclass
class Rig:
    root: Path
    store: Store
    engine: Engine
    clock: FakeClock
    registry: Registry

    def events(self, task_id: str) -> list[tuple[str, str, int, dict[str, Any]]]:
        return [
            (e.event_type.name, e.step_name, e.attempt, dict(e.payload))
            for e in self.store.log.read()
            if e.task_id == task_id
        ]

    async def run(self, workflow: str, input: Any = None, **kw: Any) -> str:
        sub = await self.engine.submit(workflow, input, **kw)
        async with asyncio.timeout(20):
            await self.engine.wait(sub.task_id)
        return sub.task_id

    async def reopen(self, *workflows: Workflow) -> Rig:
        await self.engine.stop()
        await self.store.close()
        return await make_rig(self.root, self.clock, *workflows)


def _shell_allowed() -> None:
    return None


async def make_rig(root: Path, clock: FakeClock, *workflows: Workflow, concurrency: int = 8) -> Rig:
    store = Store.open(root, config=CFG, instance_id="n1", clock=clock.now_ms)
    registry = Registry()
    for wf in workflows:
        registry.register(wf)
    store.log.term = store.log.last_term + 1
    await store.log.append(EventType.TERM_STARTED, "", payload={"node": "n1"})
    engine = Engine(
        store,
        registry,
        node_id="n1",
        clock=clock,
        concurrency=concurrency,
        shell_refusal=_shell_allowed,
    )
    await engine.start()
    return Rig(root, store, engine, clock, registry)


@pytest.fixture
async def rig_factory(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    rigs: list[Rig] = []

    async def make(*workflows: Workflow, concurrency: int = 8) -> Rig:
        r = await make_rig(
            tmp_path / f"d{len(rigs)}", FakeClock(), *workflows, concurrency=concurrency
        )
        rigs.append(r)
        return r

    yield make
    for r in rigs:
        await r.engine.stop()
        await r.store.close()


def diamond(
    calls: list[str], *, fail: dict[str, int] | None = None, idem: Any = None, delay: float = 0.0
) -> Workflow:
    fail = dict(fail or {})
    wf = Workflow("diamond")

    def make(name: str) -> Any:
        async def fn(ctx: StepContext) -> dict[str, Any]:
            calls.append(f"{name}:{ctx.attempt}")
            await asyncio.sleep(delay)
            if fail.get(name, 0) >= ctx.attempt:
                raise RuntimeError(f"{name} broke")
            return {"from": name, "inputs": sorted(ctx.results)}

        return fn

    async def undo(ctx: StepContext) -> None:
        calls.append(f"undo-{ctx.step}")

    for name, after in (("a", []), ("b", ["a"]), ("c", ["a"]), ("d", ["b", "c"])):
        wf.step(
            name=name,
            after=after,
            idempotency=idem or NotIdempotent(compensate=undo),
            retry=Retry(attempts=3, backoff_s=2, jitter=0),
        )(make(name))
    return wf


async def test_etl_runs_each_step_once_and_passes_results(rig_factory: Any, tmp_path: Path) -> None:
    from apollo11.scheduler.examples import etl

    rig = await rig_factory(etl)
    ledger = tmp_path / "ledger"
    task_id = await rig.run("etl", {"step_seconds": 0, "ledger": str(ledger)})
    task = rig.store.state.peek(task_id)
    assert task is not None and task.status is TaskStatus.SUCCEEDED
    assert [line.split()[1:3] for line in ledger.read_text().splitlines()] == [
        [s, "1"] for s in ("collect", "clean", "feature", "infer", "persist")
    ]
    assert task.steps["persist"].result["rows"] == 500
    kinds = [k for k, *_ in rig.events(task_id)]
    assert kinds == ["TASK_SUBMITTED"] + ["STEP_STARTED", "STEP_SUCCEEDED"] * 5


async def test_independent_steps_run_in_parallel_up_to_the_limit(rig_factory: Any) -> None:
    live = 0
    peak = 0

    wf = Workflow("fan")

    async def work(ctx: StepContext) -> None:
        nonlocal live, peak
        live += 1
        peak = max(peak, live)
        await asyncio.sleep(0.05)
        live -= 1

    for i in range(6):
        wf.step(name=f"s{i}", idempotency=Idempotent())(work)
    rig = await rig_factory(wf, concurrency=3)
    await rig.run("fan")
    assert peak == 3
    rig2 = await rig_factory(wf, concurrency=1)
    peak = 0
    await rig2.run("fan")
    assert peak == 1


async def test_retries_follow_the_policy_with_numbered_attempts(rig_factory: Any) -> None:
    calls: list[str] = []
    rig = await rig_factory(diamond(calls, fail={"b": 2}, idem=Idempotent()))
    task_id = await rig.run("diamond")
    assert rig.store.state.peek(task_id).status is TaskStatus.SUCCEEDED  # type: ignore[union-attr]
    assert calls.count("b:1") == calls.count("b:2") == calls.count("b:3") == 1
    b_events = [(k, a) for k, s, a, _ in rig.events(task_id) if s == "b"]
    assert b_events == [
        ("STEP_STARTED", 1),
        ("STEP_FAILED", 1),
        ("STEP_STARTED", 2),
        ("STEP_FAILED", 2),
        ("STEP_STARTED", 3),
        ("STEP_SUCCEEDED", 3),
    ]
    # backoff 2s then 4s (no jitter), on the fake clock: nothing slept for real
    assert sorted(round(s, 3) for s in rig.clock.sleeps if s > 0.5) == [2.0, 4.0]


async def test_exhausted_retries_fail_the_task(rig_factory: Any) -> None:
    calls: list[str] = []
    rig = await rig_factory(diamond(calls, fail={"c": 99}, idem=Idempotent()))
    task_id = await rig.run("diamond")
    task = rig.store.state.peek(task_id)
    assert task is not None and task.status is TaskStatus.FAILED
    c = task.steps["c"]
    assert (c.status, c.attempt, c.final, c.error) == (
        StepStatus.FAILED,
        3,
        True,
        "RuntimeError: c broke",
    )
    assert "d:1" not in calls, "a dependent of a failed step never runs"


async def test_a_timeout_fails_the_step_and_cancels_it(rig_factory: Any) -> None:
    cancelled = asyncio.Event()
    wf = Workflow("slow")

    async def hang(ctx: StepContext) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    wf.step(name="hang", idempotency=Idempotent(), timeout=0.1, retry=Retry(attempts=1))(hang)
    rig = await rig_factory(wf)
    task_id = await rig.run("slow")
    step = rig.store.state.peek(task_id).steps["hang"]  # type: ignore[union-attr]
    assert step.status is StepStatus.FAILED and step.error == "timed out after 0.1s"
    assert cancelled.is_set()


async def test_a_timeout_raised_by_the_step_itself_is_its_own_error(rig_factory: Any) -> None:
    wf = Workflow("own")

    async def call(ctx: StepContext) -> None:
        raise TimeoutError("upstream did not answer")

    wf.step(name="call", idempotency=Idempotent(), timeout=30, retry=Retry(attempts=1))(call)
    rig = await rig_factory(wf)
    task_id = await rig.run("own")
    step = rig.store.state.peek(task_id).steps["call"]  # type: ignore[union-attr]
    assert step.status is StepStatus.FAILED
    assert step.error == "TimeoutError: upstream did not answer"


async def test_oversize_result_fails_with_advice(rig_factory: Any) -> None:
    wf = Workflow("big")

    async def big(ctx: StepContext) -> str:
        return "x" * 10_000

    wf.step(name="big", idempotency=Idempotent())(big)
    rig = await rig_factory(wf)
    task_id = await rig.run("big")
    step = rig.store.state.peek(task_id).steps["big"]  # type: ignore[union-attr]
    assert step.status is StepStatus.FAILED and step.final
    assert "4096-byte limit" in (step.error or "") and "store bulk output elsewhere" in (
        step.error or ""
    )


async def test_failed_non_idempotent_step_is_compensated_before_it_runs_again(
    rig_factory: Any,
) -> None:
    calls: list[str] = []
    rig = await rig_factory(diamond(calls, fail={"b": 1}))
    task_id = await rig.run("diamond")
    assert rig.store.state.peek(task_id).status is TaskStatus.SUCCEEDED  # type: ignore[union-attr]
    assert calls.index("b:1") < calls.index("undo-b") < calls.index("b:2")
    b = [k for k, s, *_ in rig.events(task_id) if s == "b"]
    assert b == [
        "STEP_STARTED",
        "STEP_FAILED",
        "STEP_COMPENSATING",
        "STEP_COMPENSATED",
        "STEP_STARTED",
        "STEP_SUCCEEDED",
    ]


async def test_cancel_compensates_a_diamond_in_reverse_topological_order(rig_factory: Any) -> None:
    calls: list[str] = []
    gate = asyncio.Event()
    wf = diamond(calls)
    d_step = wf.steps["d"]

    async def slow_d(ctx: StepContext) -> None:
        calls.append("d:start")
        await gate.wait()

    wf.steps["d"] = type(d_step)(
        **{**{f: getattr(d_step, f) for f in d_step.__slots__}, "fn": slow_d}
    )
    rig = await rig_factory(wf)
    sub = await rig.engine.submit("diamond")
    async with asyncio.timeout(10):
        while "d:start" not in calls:
            await asyncio.sleep(0.01)
    await rig.engine.cancel_task(sub.task_id, operator="alice", reason="bad batch")
    async with asyncio.timeout(10):
        task = await rig.engine.wait(sub.task_id)
    assert task.status is TaskStatus.CANCELLED
    undos = [c for c in calls if c.startswith("undo-")]
    assert undos[-1] == "undo-a"
    assert set(undos[:-1]) == {"undo-b", "undo-c", "undo-d"}
    assert undos.index("undo-d") < min(undos.index("undo-b"), undos.index("undo-c"))
    d = task.steps["d"]
    assert d.error == "cancelled by operator" and d.status is StepStatus.COMPENSATED
    assert task.cancelled == {
        "operator": "alice",
        "reason": "bad batch",
        "event_id": task.cancelled["event_id"],
    }  # type: ignore[index]


async def test_failed_compensation_is_retried_and_visible(rig_factory: Any) -> None:
    tries = 0
    wf = Workflow("refund")

    async def charge(ctx: StepContext) -> None:
        raise RuntimeError("card declined after capture")

    async def refund(ctx: StepContext) -> None:
        nonlocal tries
        tries += 1
        if tries < 3:
            raise ConnectionError("refund API 503")

    wf.step(name="charge", idempotency=NotIdempotent(compensate=refund), retry=Retry(attempts=1))(
        charge
    )
    rig = await rig_factory(wf)
    task_id = await rig.run("refund")
    kinds = [(k, p.get("error", "")) for k, _, _, p in rig.events(task_id)][1:]
    assert kinds[:2] == [
        ("STEP_STARTED", ""),
        ("STEP_FAILED", "RuntimeError: card declined after capture"),
    ]
    assert kinds[2:] == [
        ("STEP_COMPENSATING", ""),
        ("STEP_FAILED", "compensation failed: ConnectionError: refund API 503"),
        ("STEP_COMPENSATING", ""),
        ("STEP_FAILED", "compensation failed: ConnectionError: refund API 503"),
        ("STEP_COMPENSATING", ""),
        ("STEP_COMPENSATED", ""),
    ]
    task = rig.store.state.peek(task_id)
    assert task is not None and task.status is TaskStatus.FAILED
    assert task.steps["charge"].compensations == 3


async def test_operator_actions_are_audited_and_survive_replay(rig_factory: Any) -> None:
    calls: list[str] = []
    wf = diamond(calls, fail={"b": 3}, idem=DedupeKey())
    rig = await rig_factory(wf)
    task_id = await rig.run("diamond")
    assert rig.store.state.peek(task_id).status is TaskStatus.FAILED  # type: ignore[union-attr]
    with pytest.raises(InvalidArgumentError, match="reason"):
        await rig.engine.retry_step(task_id, "b", operator="bob", reason=" ")
    with pytest.raises(FailedPreconditionError, match="SUCCEEDED"):
        await rig.engine.retry_step(task_id, "a", operator="bob", reason="why not")
    with pytest.raises(NotFoundError, match="no step 'zz'"):
        await rig.engine.skip_step(task_id, "zz", operator="bob", reason="r")
    await rig.engine.retry_step(task_id, "b", operator="bob", reason="upstream fixed")
    async with asyncio.timeout(10):
        task = await rig.engine.wait(task_id)
    assert task.status is TaskStatus.SUCCEEDED
    assert calls.count("b:4") == 1, "a fresh budget after the operator's retry"
    live = task.to_dict()
    again = await rig.reopen(wf)
    assert again.store.state.peek(task_id).to_dict() == live  # type: ignore[union-attr]
    b = again.store.state.peek(task_id).steps["b"]  # type: ignore[union-attr]
    assert b.override is not None and (b.override["operator"], b.override["reason"]) == (
        "bob",
        "upstream fixed",
    )
    await again.engine.stop()
    await again.store.close()


async def test_skip_lets_dependents_run(rig_factory: Any) -> None:
    calls: list[str] = []
    rig = await rig_factory(diamond(calls, fail={"c": 9}, idem=Idempotent()))
    task_id = await rig.run("diamond")
    await rig.engine.skip_step(task_id, "c", operator="carol", reason="done by hand")
    async with asyncio.timeout(10):
        task = await rig.engine.wait(task_id)
    assert task.status is TaskStatus.SUCCEEDED
    assert task.steps["c"].status is StepStatus.SKIPPED and "d:1" in calls


async def test_lost_steps_are_failed_and_handled_by_their_declaration(
    rig_factory: Any, tmp_path: Path
) -> None:
    calls: list[str] = []
    idem = diamond(calls, idem=Checkpoint())
    rig = await rig_factory(idem)
    await rig.engine.stop()
    sub_payload = {"workflow": "diamond", "version": 1, "steps": idem.deps}
    await rig.store.log.append(EventType.TASK_SUBMITTED, "t-lost", payload=sub_payload)
    await rig.store.log.append(
        EventType.STEP_STARTED, "t-lost", "a", attempt=1
    )  # then "the node died"
    again = await rig.reopen(idem)
    async with asyncio.timeout(10):
        task = await again.engine.wait("t-lost")
    assert task.status is TaskStatus.SUCCEEDED
    a = [(k, at, p.get("lost")) for k, s, at, p in again.events("t-lost") if s == "a"]
    assert a == [
        ("STEP_STARTED", 1, None),
        ("STEP_FAILED", 1, True),
        ("STEP_STARTED", 2, None),
        ("STEP_SUCCEEDED", 2, None),
    ]
    assert calls.count("a:2") == 1 and "a:1" not in calls
    await again.engine.stop()
    await again.store.close()

    # A non-idempotent step found STARTED is compensated before it runs again.
    calls.clear()
    rig2 = await rig_factory(diamond(calls))
    await rig2.engine.stop()
    await rig2.store.log.append(EventType.TASK_SUBMITTED, "t2", payload=sub_payload)
    await rig2.store.log.append(EventType.STEP_STARTED, "t2", "a", attempt=1)
    again2 = await rig2.reopen(diamond(calls))
    async with asyncio.timeout(10):
        await again2.engine.wait("t2")
    assert calls[:2] == ["undo-a", "a:2"]
    await again2.engine.stop()
    await again2.store.close()


async def test_idempotency_keys_return_the_same_task_within_their_ttl(rig_factory: Any) -> None:
    from apollo11.scheduler.examples import etl

    rig = await rig_factory(etl)
    first, second = await asyncio.gather(
        rig.engine.submit("etl", {"step_seconds": 0}, idempotency_key="order-7"),
        rig.engine.submit("etl", {"step_seconds": 0}, idempotency_key="order-7"),
    )
    assert first.task_id == second.task_id and first.created != second.created
    third = await rig.engine.submit("etl", {"step_seconds": 0}, idempotency_key="order-7")
    assert third.task_id == first.task_id and not third.created
    rig.clock.advance(rig.engine.idempotency_ttl_s + 1)
    fourth = await rig.engine.submit("etl", {"step_seconds": 0}, idempotency_key="order-7")
    assert fourth.created and fourth.task_id != first.task_id
    with pytest.raises(NotFoundError, match=r"unknown workflow 'nope' \(loaded: etl\)"):
        await rig.engine.submit("nope")


async def test_a_key_reused_for_another_submission_is_refused(rig_factory: Any) -> None:
    from apollo11.scheduler.engine import SubmitItem
    from apollo11.scheduler.errors import AlreadyExistsError
    from apollo11.scheduler.examples import etl

    rig = await rig_factory(etl)
    first = await rig.engine.submit("etl", {"step_seconds": 0}, idempotency_key="order-8")
    with pytest.raises(AlreadyExistsError, match=rf"'order-8' already names task {first.task_id}"):
        await rig.engine.submit("etl", {"step_seconds": 1}, idempotency_key="order-8")
    # ...while the first is still being written, too
    a, b = await asyncio.gather(
        rig.engine.submit("etl", {"n": 1}, idempotency_key="order-9"),
        rig.engine.submit("etl", {"n": 2}, idempotency_key="order-9"),
        return_exceptions=True,
    )
    assert not isinstance(a, BaseException) and isinstance(b, AlreadyExistsError)
    # a batch is refused whole, naming the item, and writes nothing
    before = rig.store.log.next_id
    with pytest.raises(AlreadyExistsError, match=r"tasks\[1\]: .*'order-8'"):
        await rig.engine.submit_many(
            [SubmitItem("etl", {"x": 1}), SubmitItem("etl", {"step_seconds": 2}, "order-8")]
        )
    with pytest.raises(AlreadyExistsError, match=r"tasks\[1\]: .*used by tasks\[0\]"):
        await rig.engine.submit_many(
            [SubmitItem("etl", {"x": 1}, "k-new"), SubmitItem("etl", {"x": 2}, "k-new")]
        )
    assert rig.store.log.next_id == before
    # the same submission again is the same task, as before
    again = await rig.engine.submit("etl", {"step_seconds": 0}, idempotency_key="order-8")
    assert again.task_id == first.task_id and not again.created


async def test_a_key_still_dedupes_once_its_task_is_archived_and_after_a_restart(
    rig_factory: Any,
) -> None:
    from apollo11.scheduler.examples import etl

    rig = await rig_factory(etl)
    first = await rig.engine.submit("etl", {"step_seconds": 0}, idempotency_key="nightly-1")
    await rig.engine.wait(first.task_id)
    for _ in range(30):  # enough events for snapshots to archive and evict it
        await rig.run("etl", {"step_seconds": 0})
    await rig.store.wait_snapshot()
    assert first.task_id not in rig.store.state.tasks, "archived and out of memory"
    assert "nightly-1" not in rig.store.state.idempotency, "its key left the snapshot too"

    again = await rig.engine.submit("etl", {"step_seconds": 0}, idempotency_key="nightly-1")
    rig = await rig.reopen(etl)
    after_restart = await rig.engine.submit("etl", {"step_seconds": 0}, idempotency_key="nightly-1")

    assert again.task_id == after_restart.task_id == first.task_id
    assert not again.created and not after_restart.created
    await rig.engine.stop()
    await rig.store.close()


async def test_submit_many_shares_keys_with_concurrent_submits_and_writes_all_or_nothing(
    rig_factory: Any,
) -> None:
    from apollo11.scheduler.engine import SubmitItem
    from apollo11.scheduler.examples import etl

    rig = await rig_factory(etl)
    single, batch = await asyncio.gather(
        rig.engine.submit("etl", {"step_seconds": 0}, idempotency_key="k"),
        rig.engine.submit_many(
            [SubmitItem("etl", {"step_seconds": 0}, "k"), SubmitItem("etl", {"step_seconds": 0})]
        ),
    )
    assert batch[0].task_id == single.task_id
    assert [single.created, batch[0].created, batch[1].created].count(True) == 2
    end = rig.store.log.durable_id
    with pytest.raises(NotFoundError, match=r"tasks\[1\]: unknown workflow"):
        await rig.engine.submit_many([SubmitItem("etl"), SubmitItem("nope")])
    with pytest.raises(InvalidArgumentError, match=r"tasks\[0\]: idempotency_key must be"):
        await rig.engine.submit_many([SubmitItem("etl", None, "x" * 300)])
    assert rig.store.log.durable_id == end, "a refused batch writes nothing"
    assert await rig.engine.submit_many([]) == []
    for sub in (single, batch[1]):
        async with asyncio.timeout(20):
            await rig.engine.wait(sub.task_id)


async def test_waiting_tasks_get_freed_slots_even_when_one_of_them_no_longer_needs_it(
    rig_factory: Any,
) -> None:
    gate = asyncio.Event()
    ran: list[str] = []
    wf = Workflow("slow")

    @wf.step(idempotency=Idempotent())
    async def only(ctx: StepContext) -> None:
        ran.append(ctx.task_id)
        await gate.wait()

    rig = await rig_factory(wf, concurrency=1)
    a = await rig.engine.submit("slow")
    b = await rig.engine.submit("slow")
    c = await rig.engine.submit("slow")
    while len(ran) < 1:
        await asyncio.sleep(0.01)
    # b and c wait for the one slot; b is cancelled while it waits
    await rig.engine.cancel_task(b.task_id, operator="o", reason="not needed")
    gate.set()
    async with asyncio.timeout(20):
        for sub in (a, b, c):
            await rig.engine.wait(sub.task_id)
    assert ran == [a.task_id, c.task_id]
    assert rig.engine.decisions < 40


async def test_shell_steps(rig_factory: Any, tmp_path: Path) -> None:
    rig = await rig_factory()
    out = tmp_path / "out"
    doc = {
        "name": "runbook",
        "steps": [
            {
                "name": "hello",
                "run": f"echo hello $APOLLO11_STEP > {out}; echo done",
                "idempotency": "idempotent",
            },
            {
                "name": "key",
                "run": "echo $APOLLO11_DEDUPE_KEY",
                "after": ["hello"],
                "idempotency": "dedupe_key",
            },
        ],
    }
    task_id = await rig.run("shell", doc)
    task = rig.store.state.peek(task_id)
    assert task is not None and task.status is TaskStatus.SUCCEEDED
    assert out.read_text() == "hello hello\n"
    assert task.steps["hello"].result == {"exit_code": 0, "output_tail": "done\n"}
    assert task.steps["key"].result["output_tail"] == f"{task_id}:key\n"

    bad = {
        "steps": [
            {
                "name": "boom",
                "run": "echo oops >&2; exit 3",
                "idempotency": "idempotent",
                "retry": {"attempts": 1},
            }
        ]
    }
    task_id = await rig.run("shell", bad)
    failed = [p for k, _, _, p in rig.events(task_id) if k == "STEP_FAILED"]
    assert failed == [
        {
            "error": "command exited with code 3",
            "exit_code": 3,
            "output_tail": "oops\n",
            "final": True,
            # the cause and the retry rule's verdict (issue 32)
            "cause": {
                "type": "apollo11.scheduler.workflow.StepError",
                "mro": [
                    "apollo11.scheduler.workflow.StepError",
                    "builtins.Exception",
                    "builtins.BaseException",
                ],
                "message": "command exited with code 3",
            },
            "rule": "default",
            "decision": {"failures": 1, "attempts": 1},
        }
    ]

    slow = {
        "steps": [
            {
                "name": "sleep",
                "run": "sleep 30",
                "timeout_s": 0.2,
                "idempotency": "idempotent",
                "retry": {"attempts": 1},
            }
        ]
    }
    task_id = await rig.run("shell", slow)
    step = rig.store.state.peek(task_id).steps["sleep"]  # type: ignore[union-attr]
    assert step.status is StepStatus.FAILED and step.error == "timed out after 0.2s"


async def test_lost_attempts_do_not_use_up_retries_but_are_capped(rig_factory: Any) -> None:
    calls: list[str] = []
    wf = diamond(calls, idem=Idempotent())
    a = wf.steps["a"]
    wf.steps["a"] = type(a)(
        **{**{f: getattr(a, f) for f in a.__slots__}, "retry": Retry(attempts=1, max_lost=3)}
    )
    rig = await rig_factory(wf)
    await rig.engine.stop()
    payload = {"workflow": "diamond", "version": 1, "steps": wf.deps}
    await rig.store.log.append(EventType.TASK_SUBMITTED, "t", payload=payload)
    for attempt in (1, 2):
        await rig.store.log.append(EventType.STEP_STARTED, "t", "a", attempt=attempt)
        await rig.store.log.append(
            EventType.STEP_FAILED, "t", "a", {"error": "lost", "lost": True}, attempt=attempt
        )
    # Two interruptions, attempts=1: the step still runs (losses are not its fault)...
    again = await rig.reopen(wf)
    async with asyncio.timeout(10):
        task = await again.engine.wait("t")
    assert task.status is TaskStatus.SUCCEEDED and calls.count("a:3") == 1
    await again.engine.stop()
    await again.store.close()

    # ...but a third interruption (max_lost=3) fails it for good.
    rig2 = await rig_factory(wf)
    await rig2.engine.stop()
    await rig2.store.log.append(EventType.TASK_SUBMITTED, "u", payload=payload)
    for attempt in (1, 2):
        await rig2.store.log.append(EventType.STEP_STARTED, "u", "a", attempt=attempt)
        await rig2.store.log.append(
            EventType.STEP_FAILED, "u", "a", {"error": "lost", "lost": True}, attempt=attempt
        )
    await rig2.store.log.append(EventType.STEP_STARTED, "u", "a", attempt=3)
    again2 = await rig2.reopen(wf)
    async with asyncio.timeout(10):
        task = await again2.engine.wait("u")
    assert (
        task.status is TaskStatus.FAILED and task.steps["a"].losses == 3 and task.steps["a"].final
    )
    await again2.engine.stop()
    await again2.store.close()


async def test_compensation_and_overrides_wait_for_the_commit(tmp_path: Path) -> None:
    """Nothing is acted on, or acknowledged, before it is committed."""
    from apollo11.scheduler.errors import LeaseLostError

    undone: list[str] = []
    fenced = False
    wf = Workflow("pay")

    async def charge(ctx: StepContext) -> None:
        nonlocal fenced
        fenced = True  # the lease is lost while the step fails
        raise RuntimeError("declined")

    async def refund(ctx: StepContext) -> None:
        undone.append(ctx.step)

    wf.step(name="charge", idempotency=NotIdempotent(compensate=refund), retry=Retry(attempts=1))(
        charge
    )
    reg = Registry()
    reg.register(wf)
    store = Store.open(tmp_path / "d", config=CFG, instance_id="n1")

    async def commit(event_id: int) -> None:
        if fenced:
            raise LeaseLostError("fenced")

    engine = Engine(store, reg, node_id="n1", commit=commit)
    await engine.start()
    sub = await engine.submit("pay")
    for _ in range(200):
        t = store.state.tasks[sub.task_id]
        if t.steps["charge"].status is StepStatus.FAILED:
            break
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.3)
    assert undone == [], "a compensation never runs before its COMPENSATING is committed"
    with pytest.raises((LeaseLostError, NotLeaderError)):
        await engine.skip_step(sub.task_id, "charge", operator="o", reason="r")
    await engine.stop()
    await store.close()


async def test_compensation_waits_for_every_downstream_step(rig_factory: Any) -> None:
    """A -> B -> C, B idempotent: A's compensation still waits for C's (not only B's)."""
    order: list[str] = []
    wf = Workflow("chain")

    async def work(ctx: StepContext) -> None:
        order.append(f"run-{ctx.step}")

    async def undo(ctx: StepContext) -> None:
        order.append(f"undo-{ctx.step}-start")
        await asyncio.sleep(0.05 if ctx.step == "c" else 0)
        order.append(f"undo-{ctx.step}-end")

    wf.step(name="a", idempotency=NotIdempotent(compensate=undo))(work)
    wf.step(name="b", after=["a"], idempotency=Idempotent())(work)

    async def slow(ctx: StepContext) -> None:
        order.append("run-c")
        await asyncio.sleep(30)

    wf.step(name="c", after=["b"], idempotency=NotIdempotent(compensate=undo))(slow)
    rig = await rig_factory(wf)
    sub = await rig.engine.submit("chain")
    async with asyncio.timeout(10):
        while "run-c" not in order:
            await asyncio.sleep(0.01)
    await rig.engine.cancel_task(sub.task_id, operator="o", reason="r")
    async with asyncio.timeout(10):
        await rig.engine.wait(sub.task_id)
    assert order.index("undo-c-end") < order.index("undo-a-start"), order


async def test_a_timed_out_thread_step_is_not_retried_beside_itself(rig_factory: Any) -> None:
    import threading

    spans: list[tuple[int, float, float]] = []
    lock = threading.Lock()
    wf = Workflow("thready")

    def blocking(ctx: StepContext) -> None:
        import time

        t0 = time.monotonic()
        time.sleep(0.4 if ctx.attempt == 1 else 0)
        with lock:
            spans.append((ctx.attempt, t0, time.monotonic()))

    wf.step(name="s", idempotency=Checkpoint(), timeout=0.1, retry=Retry(attempts=2, backoff_s=0))(
        blocking
    )
    rig = await rig_factory(wf)
    task_id = await rig.run("thready")
    assert rig.store.state.peek(task_id).status is TaskStatus.SUCCEEDED  # type: ignore[union-attr]
    (a1, _, end1), (a2, start2, _) = sorted(spans)
    assert (a1, a2) == (1, 2)
    assert start2 >= end1, "attempt 2 started only once the abandoned attempt 1 had ended"


async def test_steps_run_only_once_their_started_is_committed_one_wait_per_pass(
    tmp_path: Path,
) -> None:
    """Steps started in one scheduling pass share one commit wait; none runs before it."""
    ran: list[str] = []
    wf = Workflow("one")

    async def work(ctx: StepContext) -> None:
        ran.append(ctx.task_id)

    wf.step(name="s", idempotency=Idempotent())(work)
    reg = Registry()
    reg.register(wf)
    store = Store.open(tmp_path / "d", config=CFG, instance_id="n1")
    commits: list[int] = []
    release = asyncio.Event()

    async def commit(event_id: int) -> None:
        (event,) = store.log.read(event_id, event_id)
        if event.event_type is EventType.STEP_STARTED:  # hold the starts, not the submits
            commits.append(event_id)
            await release.wait()

    engine = Engine(store, reg, node_id="n1", commit=commit)
    await engine.start()
    subs = await asyncio.gather(*(engine.submit("one") for _ in range(20)))
    await asyncio.sleep(0.2)
    started = [e for e in store.log.read() if e.event_type is EventType.STEP_STARTED]
    assert len(started) == 20, "every STARTED is durable"
    assert ran == [], "no step runs before its STARTED is committed"
    assert 1 <= len(commits) < 20, f"starts share commit waits: {commits}"
    assert max(commits) == started[-1].event_id
    release.set()
    for s in subs:
        await engine.wait(s.task_id)
    assert sorted(ran) == sorted(s.task_id for s in subs)
    await engine.stop()
    await store.close()


async def test_each_submission_call_is_timed_to_its_commit(rig_factory: Any) -> None:
    from apollo11.scheduler import metrics
    from apollo11.scheduler.engine import SubmitItem
    from apollo11.scheduler.examples import etl

    rig = await rig_factory(etl)
    hist = metrics.SUBMIT_COMMIT_SECONDS

    def count() -> float:
        return next(s.value for s in hist.collect()[0].samples if s.name.endswith("_count"))

    before = count()
    await rig.engine.submit("etl", {"step_seconds": 0})
    await rig.engine.submit_many([SubmitItem("etl", {"step_seconds": 0})] * 3)
    assert count() == before + 2, "one observation per call, after its commit"
    await rig.engine.submit("etl", {"step_seconds": 0}, idempotency_key="same")
    await rig.engine.submit("etl", {"step_seconds": 0}, idempotency_key="same")
    assert count() == before + 3, "a duplicate that writes nothing is not timed"


async def _fenced_engine(
    tmp_path: Path, wf: Workflow, commit: Any, lease_valid: Callable[[], bool]
) -> tuple[Store, Engine]:
    reg = Registry()
    reg.register(wf)
    store = Store.open(tmp_path / "d", config=CFG, instance_id="n1")
    store.log.term = 7
    engine = Engine(store, reg, node_id="n1", commit=commit, lease_valid=lease_valid)
    await engine.start()
    return store, engine


@pytest.mark.parametrize("kind", ["async", "thread"])
async def test_no_attempt_begins_once_the_lease_check_says_no(tmp_path: Path, kind: str) -> None:
    """The commit's lease check passed, then the node lost its lease (paused, say)
    before the step began: the attempt never begins, and nothing records an outcome
    (its STARTED is committed: the next leader fails it as lost)."""
    ran: list[int] = []
    wf = Workflow("once")

    if kind == "async":

        async def work(ctx: StepContext) -> None:
            ran.append(ctx.attempt)

    else:

        def work(ctx: StepContext) -> None:  # type: ignore[misc]
            ran.append(ctx.attempt)

    wf.step(name="s", idempotency=Idempotent())(work)
    valid = True

    async def commit(event_id: int) -> None:
        nonlocal valid
        (event,) = store.log.read(event_id, event_id)
        if event.event_type is EventType.STEP_STARTED:
            valid = False  # the check inside the commit passed; the lease lapses just after

    store, engine = await _fenced_engine(tmp_path, wf, commit, lambda: valid)
    sub = await engine.submit("once")
    await asyncio.sleep(0.3)
    assert ran == [], "an attempt began after the lease check said no"
    kinds = [e.event_type for e in store.log.read() if e.task_id == sub.task_id]
    assert kinds == [EventType.TASK_SUBMITTED, EventType.STEP_STARTED]
    assert not engine.leading, "the engine decides nothing more"
    await engine.stop()
    await store.close()


async def test_no_started_is_written_once_the_lease_check_says_no(tmp_path: Path) -> None:
    ran: list[int] = []
    wf = Workflow("once")

    async def work(ctx: StepContext) -> None:
        ran.append(ctx.attempt)

    wf.step(name="s", idempotency=Idempotent())(work)
    valid = True

    async def commit(event_id: int) -> None:
        nonlocal valid
        valid = False  # the submission is acknowledged, then the lease lapses

    store, engine = await _fenced_engine(tmp_path, wf, commit, lambda: valid)
    sub = await engine.submit("once")
    await asyncio.sleep(0.3)
    assert ran == []
    kinds = [e.event_type for e in store.log.read() if e.task_id == sub.task_id]
    assert kinds == [EventType.TASK_SUBMITTED], "no STARTED after the lease lapsed"
    await engine.stop()
    await store.close()


async def test_every_attempt_carries_its_fencing_token(rig_factory: Any) -> None:
    from apollo11.scheduler.workflow import FencingToken

    tokens: list[FencingToken] = []
    wf = Workflow("fenced")

    async def work(ctx: StepContext) -> None:
        tokens.append(ctx.fencing_token)
        if ctx.attempt < 3:
            raise RuntimeError("again")

    wf.step(name="s", idempotency=Idempotent(), retry=Retry(attempts=3, backoff_s=0))(work)
    rig = await rig_factory(wf)
    term = rig.store.log.term
    await rig.run("fenced")
    assert tokens == [(term, 1), (term, 2), (term, 3)]
    assert str(tokens[-1]) == f"{term}:3"
    assert tokens == sorted(tokens) and FencingToken(term + 1, 1) > tokens[-1], (
        "a later term's attempt outranks every earlier term's"
    )


async def _quiet(engine: Engine) -> None:
    async with asyncio.timeout(20):
        while engine.dispatching():
            await asyncio.sleep(0.01)


async def test_dispatching_lasts_from_a_submission_to_its_start(rig_factory: Any) -> None:
    running, release = asyncio.Event(), asyncio.Event()
    wf = Workflow("held")

    async def hold(ctx: StepContext) -> None:
        running.set()
        await release.wait()

    wf.step(name="hold", idempotency=Idempotent())(hold)
    rig = await rig_factory(wf)
    await _quiet(rig.engine)  # at rest: an export's reads go at full speed
    sub = asyncio.create_task(rig.engine.submit("held"))
    await asyncio.sleep(0)  # the submission appended, not yet durable
    assert rig.engine.dispatching()
    await sub
    async with asyncio.timeout(20):
        await running.wait()
    await _quiet(rig.engine)  # a step that runs is not dispatch: reads need not wait
    release.set()
