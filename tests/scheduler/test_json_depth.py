"""JSON the cluster makes itself (results, ctx.step outputs, heartbeat details) nests at
most json_max_depth, like JSON a client sends (tests/api/test_limits.py); and a log
holding a deeper value, written before the limit existed, still snapshots, recovers
and is followed by a standby."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from apollo11.scheduler import jsondepth
from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.durable import DurableContext, DurableWorkflow, Idempotent
from apollo11.scheduler.log import EventType, eventlog
from apollo11.scheduler.log.record import encode_payload
from apollo11.scheduler.state import StepStatus, TaskStatus
from apollo11.scheduler.state.store import Store
from apollo11.scheduler.worker import _outcome
from apollo11.scheduler.workflow import Idempotent as StepIdempotent
from apollo11.scheduler.workflow import Retry, StepContext, Workflow
from tests.replicator.test_receiver import _batch, _following
from tests.scheduler.test_engine import CFG, Rig, make_rig

LIMIT = 64  # json_max_depth's default


def deep(depth: int) -> Any:
    """A value whose lists nest `depth` levels deep."""
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def _limit_said(what: str, depth: int) -> str:
    return f"{what} is nested {depth} levels deep, over the limit of {LIMIT} (json_max_depth)"


def _types(rig: Rig, task_id: str) -> list[str]:
    return [e.event_type.name for e in rig.store.log.read() if e.task_id == task_id]


async def _snapshot_works(store: Store) -> None:
    written = await store.snapshot_now()
    assert written.info.watermark == store.log.next_id - 1


async def test_a_result_nested_past_json_max_depth_fails_its_attempt_naming_the_limit(
    tmp_path: Path,
) -> None:
    """A result 250 levels deep was taken, and then every snapshot of the node failed
    ("Recursion limit reached", for good); one 900 deep was refused in orjson's words.
    Now it is refused like a result over payload_max_bytes: the attempt fails for good,
    saying which limit, and no SUCCEEDED is written."""
    depths = {"at": LIMIT, "over": LIMIT + 1, "d250": 250, "d252": 252, "d900": 900}
    wf = Workflow("deep")
    for name, depth in depths.items():

        async def fn(ctx: StepContext, depth: int = depth) -> Any:
            return deep(depth)

        wf.step(name=name, idempotency=StepIdempotent(), retry=Retry(attempts=3))(fn)
    rig = await make_rig(tmp_path / "d", FakeClock(), wf)
    try:
        task_id = await rig.run("deep")
        task = rig.store.state.peek(task_id)
        assert task is not None
        assert task.steps["at"].status is StepStatus.SUCCEEDED
        for name, depth in depths.items():
            if name == "at":
                continue
            step = task.steps[name]
            assert step.status is StepStatus.FAILED and step.final and step.attempt == 1
            assert step.error == (
                f"result rejected: {_limit_said('a value in the payload', depth)}. Return a "
                f"small JSON summary (counts, checksums, a path or URL) and store bulk "
                f"output elsewhere"
            )
        succeeded = [
            e.step_name for e in rig.store.log.read() if e.event_type is EventType.STEP_SUCCEEDED
        ]
        assert succeeded == ["at"]
        await _snapshot_works(rig.store)
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_heartbeat_details_nested_past_json_max_depth_are_refused_in_the_step(
    tmp_path: Path,
) -> None:
    """Details are written in the attempt's FAILED (for the retry's ctx.last_heartbeat):
    252 levels there broke every later snapshot. ctx.heartbeat refuses them, as a
    worker refuses details over 64 KiB."""
    said: dict[int, str] = {}
    wf = Workflow("beats")

    async def beat(ctx: StepContext) -> None:
        ctx.heartbeat(deep(LIMIT))
        for depth in (LIMIT + 1, 252, 900):
            try:
                ctx.heartbeat(deep(depth))
            except ValueError as e:
                said[depth] = str(e)
        raise RuntimeError("fails, to write its details")

    wf.step(name="beat", idempotency=StepIdempotent(), retry=Retry(attempts=1))(beat)
    rig = await make_rig(tmp_path / "d", FakeClock(), wf)
    try:
        task_id = await rig.run("beats")
        assert said == {
            d: f"{_limit_said('ctx.heartbeat details', d)}: report progress (a cursor, a "
            f"count), not data"
            for d in (LIMIT + 1, 252, 900)
        }
        step = rig.store.state.peek(task_id).steps["beat"]  # type: ignore[union-attr]
        assert step.status is StepStatus.FAILED and step.heartbeat == deep(LIMIT)
        await _snapshot_works(rig.store)
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_a_ctx_step_output_nested_past_json_max_depth_fails_that_step_naming_it(
    tmp_path: Path,
) -> None:
    """A durable main's ctx.step output is a checkpoint: 251 levels broke every later
    snapshot, 900 were refused in orjson's words. The ctx.step fails for good (its
    error recorded, the main told by DurableStepError), naming the limit."""
    caught: list[str] = []
    wf = DurableWorkflow("deepmain")

    @wf.main
    async def run(ctx: DurableContext, depths: list[int]) -> str:
        for i, depth in enumerate(depths):
            try:
                await ctx.step(f"s{i}", deep, depth, idempotency=Idempotent())
            except Exception as e:
                caught.append(str(e))
        return "done"

    rig = await make_rig(tmp_path / "d", FakeClock(), wf)
    try:
        task_id = await rig.run("deepmain", [LIMIT, LIMIT + 1, 251, 900])
        task = rig.store.state.peek(task_id)
        assert task is not None and task.status is TaskStatus.SUCCEEDED
        assert caught == [f"StepError: {_limit_said('output', d)}" for d in (LIMIT + 1, 251, 900)]
        assert task.durable is not None
        outputs = [c.get("output") for c in task.durable.checkpoints]
        assert outputs == [deep(LIMIT), None, None, None]
        await _snapshot_works(rig.store)
    finally:
        await rig.engine.stop()
        await rig.store.close()


def test_a_worker_refuses_what_no_node_would_take() -> None:
    """A worker does not know its node's json_max_depth; past the most it may be (128)
    it refuses in the step, as it does past 1 MiB; the node refuses the rest."""
    ok = _outcome.succeeded(deep(jsondepth.MAX_DEPTH))
    assert isinstance(ok, _outcome.Succeeded)
    for depth in (jsondepth.MAX_DEPTH + 1, 900):
        out = _outcome.succeeded(deep(depth))
        assert isinstance(out, _outcome.Failed) and out.error_type == "ResultTooDeep"
        assert out.message.startswith(
            f"the step's result is nested {depth} levels deep, over the limit of 128 "
        )
        with pytest.raises(ValueError, match=f"details is nested {depth} levels deep"):
            _outcome.encode_details(deep(depth))


def _before_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The log writes as a node before json_max_depth did: orjson's 254 levels only."""

    def unbounded(*args: Any) -> bytes:
        return encode_payload(*args[:3], max_depth=jsondepth.ENCODER_LIMIT, levels=0)

    monkeypatch.setattr(eventlog, "encode_payload", unbounded)


async def _logged_deep(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> str:
    """A task whose step's result, 252 levels deep, was logged before the limit."""
    with monkeypatch.context() as m:
        _before_the_limit(m)
        return await rig.run("old")


def _old_workflow() -> Workflow:
    wf = Workflow("old")

    async def fn(ctx: StepContext) -> Any:
        return deep(252)

    wf.step(name="s", idempotency=StepIdempotent(), retry=Retry(attempts=1))(fn)
    return wf


async def test_a_deep_result_logged_before_the_limit_snapshots_and_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A result 252 levels deep sits 255 deep in its task's line of a snapshot, past
    orjson's limit: every snapshot failed, for good ("the log is unaffected; will
    retry"), so segments were never trimmed and recovery replayed everything. The
    snapshot encodes it (by the standard library's encoder past orjson's limit), and a
    node recovers the same state from that snapshot as from the log."""
    rig = await make_rig(tmp_path / "d", FakeClock(), _old_workflow())
    task_id = await _logged_deep(rig, monkeypatch)
    step = rig.store.state.peek(task_id).steps["s"]  # type: ignore[union-attr]
    assert step.status is StepStatus.SUCCEEDED and step.result == deep(252)
    await _snapshot_works(rig.store)
    # and again once the task is archived with the next snapshot
    await rig.run("old")  # fails now (past the limit): another event to snapshot past
    await _snapshot_works(rig.store)
    expected = rig.store.state.to_dict()
    await rig.engine.stop()
    await rig.store.close()
    store = Store.open(tmp_path / "d", config=CFG, instance_id="n1")
    try:
        assert store.recovery.snapshot == (store.log.next_id - 1), "recovered from the snapshot"
        assert store.state.to_dict() == expected
        assert (await store.lookup(task_id)).steps["s"].result == deep(252)  # type: ignore[union-attr]
    finally:
        await store.close()


async def test_a_standby_folds_and_snapshots_a_deep_payload_logged_before_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A standby applies what its primary logged, whatever its own settings say, and
    its snapshots must survive it too."""
    async with _following(tmp_path, 1) as (source, primary, node, _follower):
        await source.log.append(EventType.STEP_STARTED, "t0", "a", {}, attempt=1)
        with monkeypatch.context() as m:
            _before_the_limit(m)
            await source.log.append(
                EventType.STEP_SUCCEEDED, "t0", "a", {"result": deep(252)}, attempt=1
            )
        await asyncio.wait_for(primary.hellos.get(), 10)
        await primary.outgoing.put(_batch(source, 1))
        last = source.log.next_id - 1
        ack = await asyncio.wait_for(primary.acks.get(), 10)
        assert ack.durable_event_id == last, "acknowledged durable through the batch"
        async with asyncio.timeout(10):
            while node.store.state.last_event_id < last:  # folded by the loop
                await asyncio.sleep(0.01)
        assert node.store.state.tasks["t0"].steps["a"].result == deep(252)
        await _snapshot_works(node.store)
