"""Golden logs replay to known states; a corrupted one is refused.

See tests/golden/make_golden.py for how they were made.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from apollo11.scheduler.durable import DedupeKey, DurableContext, DurableWorkflow
from apollo11.scheduler.errors import CorruptLogError
from apollo11.scheduler.state import TaskState
from apollo11.scheduler.state.store import Store, state_at
from apollo11.scheduler.workflow import StepContext, StepError

GOLDEN = Path(__file__).parent / "golden"


def _expected(root: Path, name: str = "expected.json") -> object:
    return json.loads((root / name).read_text())


def _normal(state: dict[str, object]) -> object:
    return json.loads(json.dumps(state, sort_keys=True))


@pytest.mark.parametrize(
    "name", ["etl-happy", "eventful", "anomalous", "durable", "durable-children", "retained"]
)
def test_golden_log_replays_to_its_known_state(name: str) -> None:
    root = GOLDEN / name
    assert _normal(state_at(root).to_dict()) == _expected(root)


def test_golden_time_travel() -> None:
    root = GOLDEN / "eventful"
    state = state_at(root, until=12)
    assert state.last_event_id == 12
    assert _normal(state.to_dict()) == _expected(root, "expected-at-12.json")


def test_golden_logs_span_segments_and_terms() -> None:
    assert len(list((GOLDEN / "etl-happy" / "log").glob("*.seg"))) >= 2
    assert _expected(GOLDEN / "eventful")["terms"] == [[3, 1], [7, 11]]  # type: ignore[index]


def test_golden_retention_purges_all_but_the_held_until_released() -> None:
    state = state_at(GOLDEN / "retained")
    assert sorted(state.to_dict()["tasks"]) == ["etl-4", "etl-5", "etl-6", "etl-7"]
    assert state.holds == {}
    assert "refused: held" in state.anomalies[0]
    assert state.not_found("etl-2") == "task 'etl-2' was purged by retention (event 91)"
    assert state.task_for_key("batch-2") is None
    held = state_at(GOLDEN / "retained", until=91)  # the first purge, before the release
    assert held.holds["etl-1"]["by"] == "ann" and held.peek("etl-1") is not None


def test_golden_anomaly_is_flagged() -> None:
    task = state_at(GOLDEN / "anomalous").to_dict()["tasks"]["a1"]
    assert task["steps"][0]["status"] == "COMPENSATED"
    assert "without a new start" in task["anomalies"][0]


def test_corrupted_golden_log_is_refused(tmp_path: Path) -> None:
    root = GOLDEN / "corrupt-sealed"
    with pytest.raises(CorruptLogError) as exc:
        state_at(root)
    assert exc.value.path.endswith("00000000000000000001.seg")
    assert exc.value.offset <= 300
    # A node refuses to start on it too (and leaves it untouched for a peer to repair).
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    before = sorted((p.name, p.read_bytes()) for p in (copy / "log").glob("*.seg"))
    with pytest.raises(CorruptLogError):
        Store.open(copy)
    after = sorted((p.name, p.read_bytes()) for p in (copy / "log").glob("*.seg"))
    assert before == after


class _Recorded:
    """A finished task's checkpoints, as a journal that must never be written to."""

    def __init__(self, task: TaskState) -> None:
        assert task.durable is not None
        self.checkpoints: Sequence[Mapping[str, Any]] = task.durable.checkpoints
        self.wait: Mapping[str, Any] | None = task.durable.wait
        self.first_event_id = task.first_event_id

    def first_event(self, key: str, since: int) -> tuple[int, Any] | None:
        raise AssertionError("a replay of a finished history looks up no event")

    def now_ms(self) -> int:
        raise AssertionError("a replay of a finished history reads no clock")

    async def sleep(self, seconds: float) -> None:
        raise AssertionError("a replay of a finished history sleeps not")

    async def record(self, checkpoints: Any, wait: Any = None) -> None:
        raise AssertionError(f"a replay of a finished history records nothing: {checkpoints}")


async def _replay(wf: DurableWorkflow, task: TaskState) -> Any:
    ctx = StepContext(
        task_id=task.task_id,
        step="main",
        attempt=99,
        input=task.input,
        results={},
        node_id="golden",
        workflow=wf.name,
        version=wf.version,
        journal=_Recorded(task),
    )
    return await wf.steps["main"].fn(ctx)


def test_golden_durable_states() -> None:
    tasks = state_at(GOLDEN / "durable").tasks
    assert {t: v.status.value for t, v in tasks.items()} == {
        "p1": "SUCCEEDED",
        "p2": "SUCCEEDED",
        "p3": "NONDETERMINISTIC",
        "p4": "WAITING",
    }
    state = state_at(GOLDEN / "durable")
    assert len(state.events["approval:p1"]) == 1, "the duplicate event is recorded once"
    assert state.waits == {"approval:p4": {"p4"}}


async def test_golden_durable_history_replays_against_the_approval_example() -> None:
    from apollo11.scheduler.examples import approval

    task = state_at(GOLDEN / "durable").tasks["p1"]
    assert await _replay(approval, task) == task.steps["main"].result


async def test_a_changed_main_replayed_against_the_golden_history_names_the_position() -> None:
    changed = DurableWorkflow("approval", version=1)

    @changed.main
    async def main(ctx: DurableContext, order: dict[str, Any]) -> Any:
        from apollo11.scheduler.examples import charge_card

        await ctx.step("charge", charge_card, order, idempotency=DedupeKey())
        await ctx.sleep(60)  # new: where the log holds the wait for approval
        return None

    task = state_at(GOLDEN / "durable").tasks["p1"]
    with pytest.raises(StepError) as exc:
        await _replay(changed, task)
    report = exc.value.details["nondeterminism"]
    assert report["seq"] == 1
    assert report["expected"]["kind"] == "event" and report["expected"]["name"] == "approval:p1"
    assert report["got"]["kind"] == "sleep"
    assert str(exc.value).startswith("non-determinism at checkpoint 1: the log holds event")


async def test_the_golden_durable_state_survives_a_snapshot(tmp_path: Path) -> None:
    """A snapshot carries the checkpoints, the wait and the event index; the derived
    waits index and matches are rebuilt when it is loaded."""
    copy = tmp_path / "copy"
    shutil.copytree(GOLDEN / "durable", copy)
    (copy / "snapshots").mkdir(exist_ok=True)
    store = Store.open(copy)
    before = _normal(store.state.to_dict())
    await store.snapshot_now()
    await store.close()
    again = Store.open(copy)
    try:
        assert again.recovery.snapshot is not None and again.recovery.replayed == 0
        assert _normal(again.state.to_dict()) == before
        assert again.state.waits == {"approval:p4": {"p4"}}
        assert again.state.event_keys == {"ap-p1": 6}
    finally:
        await again.close()


async def test_golden_children_history_replays_against_the_fulfil_example() -> None:
    from apollo11.scheduler.examples import fulfil

    tasks = state_at(GOLDEN / "durable-children").tasks
    assert {t: v.status.value for t, v in tasks.items()} == {
        "f1": "SUCCEEDED",
        "c1": "SUCCEEDED",
        "c2": "SUCCEEDED",
        "f2": "CANCELLED",
        "c3": "CANCELLED",
    }
    assert tasks["c3"].parent == {"task_id": "f2", "seq": 1, "close": "cancel"}
    assert tasks["c3"].cancelled is not None and tasks["c3"].cancelled["operator"] == "alice"
    f1 = tasks["f1"]
    assert f1.durable is not None
    assert [c["kind"] for c in f1.durable.checkpoints] == ["step", "spawn", "spawn", "all", "step"]
    # the example's code replays this history to the same result, recording nothing
    assert await _replay(fulfil, f1) == f1.steps["main"].result
