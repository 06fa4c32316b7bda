"""Snapshots written before each failed-for-good step kept its own on_exhausted (the
FAILED's `exhausted`): what a node starting from one does with a paused task whose
second step is failed for good too (issue 32)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
import pytest

from apollo11.scheduler.log import Draft, EventLog, EventType, FsyncPolicy, LogConfig, Position
from apollo11.scheduler.state import State, TaskStatus, apply_all
from apollo11.scheduler.state import snapshot as snapshot_module
from apollo11.scheduler.state.snapshot import Snapshots, capture
from apollo11.scheduler.state.store import Store, StoreConfig

LOG = LogConfig(segment_max_bytes=16 * 1024, fsync=FsyncPolicy.UNSAFE_NEVER)
E = EventType
DIAMOND = {"fetch": [], "left": ["fetch"], "right": ["fetch"], "join": ["left", "right"]}
FINAL = {"error": "broke", "final": True, "rule": "default", "exhausted": "pause"}


def _paused_with_right_failed_too(task_id: str) -> list[Draft]:
    """left's retries ran out under "pause" (the task PAUSED), then right's did too."""
    return [
        Draft(E.TASK_SUBMITTED, task_id, payload={"workflow": "w", "steps": DIAMOND}),
        Draft(E.STEP_STARTED, task_id, "fetch", attempt=1),
        Draft(E.STEP_SUCCEEDED, task_id, "fetch", {"result": 1}, 1),
        Draft(E.STEP_STARTED, task_id, "left", attempt=1),
        Draft(E.STEP_STARTED, task_id, "right", attempt=1),
        Draft(E.STEP_FAILED, task_id, "left", FINAL, 1),
        Draft(E.TASK_PAUSED, task_id, payload={"step": "left", "error": "broke"}),
        Draft(E.STEP_FAILED, task_id, "right", FINAL, 1),
    ]


def _retry(task_id: str, step: str) -> Draft:
    payload = {"action": "retry", "operator": "o", "reason": "r"}
    return Draft(E.MANUAL_OVERRIDE, task_id, step, payload)


def _without_modes(task_json: bytes) -> bytes:
    """A task's line as a snapshot wrote it before steps kept their own mode."""
    d = orjson.loads(task_json)
    for step in d["steps"]:
        step.pop("exhausted", None)
    return orjson.dumps(d)


async def _write(root: Path, drafts: list[Draft]) -> tuple[State, Position]:
    log = EventLog.open(root, config=LOG, instance_id="n1")
    events = await log.append_many(drafts)
    position = log.position_after(events[-1].event_id)
    await log.close()
    state = apply_all(State(), events)
    return state, position


def _old_snapshot(
    root: Path, state: State, position: Position, monkeypatch: pytest.MonkeyPatch
) -> int:
    """Write `state` as a snapshot of format 2 (before steps kept their own mode)."""
    cap = capture(state, position)
    old = dataclasses.replace(cap, tasks_json=[_without_modes(t) for t in cap.tasks_json])
    with monkeypatch.context() as m:
        m.setattr(snapshot_module, "SNAPSHOT_FORMAT", 2)
        Snapshots(str(root / "snapshots")).write(old)
    return cap.watermark


async def test_an_old_snapshot_of_a_paused_task_pauses_again_after_the_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "d"
    state, position = await _write(root, _paused_with_right_failed_too("t"))
    _old_snapshot(root, state, position, monkeypatch)
    store = Store.open(root, config=StoreConfig(log=LOG), instance_id="n1")
    try:
        await store.log.append_many([_retry("t", "left")])
        task = store.state.tasks["t"]
        # right is still failed for good under "pause": the task pauses again, for it,
        # as a full replay of the same log decides (never FAILED)
        assert task.exhausted == {"step": "right", "then": "pause"}
        assert task.status is not TaskStatus.FAILED
        assert store.recovery.snapshot is None  # the log was replayed instead
        full = apply_all(State(), list(store.log.read()))
        assert store.state.tasks["t"].to_dict() == full.tasks["t"].to_dict()
    finally:
        await store.close()


async def test_an_old_snapshot_without_such_a_task_is_still_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "d"
    *drafts, right_fails = _paused_with_right_failed_too("t")  # right is still running
    state, position = await _write(root, drafts)
    watermark = _old_snapshot(root, state, position, monkeypatch)
    store = Store.open(root, config=StoreConfig(log=LOG), instance_id="n1")
    try:
        assert store.recovery.snapshot == watermark
        assert store.state.tasks["t"].status is TaskStatus.PAUSED
        await store.log.append_many([right_fails, _retry("t", "left")])
        assert store.state.tasks["t"].exhausted == {"step": "right", "then": "pause"}
    finally:
        await store.close()


async def test_a_node_that_refused_its_newest_snapshot_writes_a_new_one_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Else the refused one stays its newest for up to a snapshot interval, and a
    standby being seeded then would be sent it (and refuse it too)."""
    root = tmp_path / "d"
    state, position = await _write(root, _paused_with_right_failed_too("t"))
    old = _old_snapshot(root, state, position, monkeypatch)
    store = Store.open(root, config=StoreConfig(log=LOG), instance_id="n1")
    try:
        await store.log.append_many([_retry("t", "left")])  # one batch, far below 1,000
        await store.wait_snapshot()
        newest = store.snapshots.watermarks()[0]
        assert newest > old
        _, loaded = store.snapshots.load(newest)  # format 3: read as it is
        assert loaded.tasks["t"].to_dict() == store.state.tasks["t"].to_dict()
    finally:
        await store.close()
