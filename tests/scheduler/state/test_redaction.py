"""Redaction in the state and the answers (issue 34, part 6): a TASK_REDACTED removes
the task's input and outputs from its state, from every read of its events (the
task's history, a range of the log, its past states) and from the snapshots, and a
replay of the log from the start agrees."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from apollo11.scheduler.engine.intake import refuse_redact
from apollo11.scheduler.errors import FailedPreconditionError
from apollo11.scheduler.log import EventType, FsyncPolicy, LogConfig, expunge
from apollo11.scheduler.state import TaskStatus, apply_all, state_at
from apollo11.scheduler.state.store import Store, StoreConfig
from apollo11.scheduler.testing.history import etl_history
from tests.scheduler.engine.histories import E, History

LOG = LogConfig(segment_max_bytes=16 * 1024, fsync=FsyncPolicy.UNSAFE_NEVER)


def _store(root: Path) -> Store:
    return Store.open(root, config=StoreConfig(log=LOG, snapshot_interval=50), instance_id="n1")


async def _write(store: Store, n_tasks: int, seed: int) -> None:
    it = etl_history(n_tasks, seed=seed, concurrency=4, fail_rate=0, cancel_rate=0)
    while chunk := list(itertools.islice(it, 20)):
        await store.log.append_many(chunk)
        await store.wait_snapshot()


async def test_a_redacted_task_shows_no_input_or_output_anywhere(tmp_path: Path) -> None:
    store = _store(tmp_path)
    await _write(store, 6, seed=1)
    task = next(t for t in store.state.iter_tasks() if t.status is TaskStatus.SUCCEEDED)
    other = next(t for t in store.state.iter_tasks() if t.task_id != task.task_id)
    before = task.last_event_id
    assert task.input is not None and any(s.result is not None for s in task.steps.values())
    red = await store.log.append(
        EventType.TASK_REDACTED, task.task_id, payload={"operator": "ana", "reason": "GDPR"}
    )
    mark = {"$redacted": red.event_id}

    now = store.state.peek(task.task_id)
    assert now is not None
    assert now.redacted == {"operator": "ana", "reason": "GDPR", "event_id": red.event_id}
    assert now.input == mark
    assert {str(s.result) for s in now.steps.values() if s.result is not None} == {str(mark)}
    assert now.status is TaskStatus.SUCCEEDED  # the skeleton stays
    untouched = store.state.peek(other.task_id)
    assert untouched is not None and untouched.input == other.input

    events, _ = store.task_events(now)
    by_type = {e.event_type: e.payload for e in events}
    assert by_type[EventType.TASK_SUBMITTED]["input"] == mark
    assert by_type[EventType.TASK_SUBMITTED]["workflow"] == "etl"
    assert by_type[EventType.STEP_SUCCEEDED]["result"] == mark
    assert by_type[EventType.TASK_REDACTED] == {"operator": "ana", "reason": "GDPR"}
    every = store.shown(list(store.log.read(1, store.log.durable_id)))
    assert not [e for e in every if e.task_id == task.task_id and "batch" in str(e.payload)]
    past = store.task_at(task.task_id, before)  # time travel: redacted there too
    assert past is not None and past.input == mark and past.redacted is None

    store.redactor.drain()  # its records rewritten on disk, the same size
    sizes = [seg.size for seg in store.log.segments]
    on_disk = store.log.read_ids([i for i in now.event_ids or () if i < red.event_id])
    assert len(on_disk) == 11  # submitted, and each of its 5 steps started and succeeded
    for e in on_disk:
        for key in ("input", "result"):
            assert e.payload.get(key) in (None, 0, mark), e
    assert any(e.payload.get("input") == mark for e in on_disk)
    assert expunge(store.log.segments, [e.event_id for e in on_disk], red.event_id) == 0
    assert [seg.size for seg in store.log.segments] == sizes

    await _write(store, 6, seed=2)  # snapshots after the redaction
    state = store.state.to_dict()
    await store.close()
    again = _store(tmp_path)
    assert again.recovery.snapshot is not None
    assert again.recovery.snapshot > red.event_id  # its watermark
    assert again.state.to_dict() == state
    assert again.state.redacted == {task.task_id: red.event_id}
    full = apply_all(again.state.__class__(), again.log.read(1, again.log.durable_id))
    assert full.to_dict() == state  # a replay from the first event agrees
    await again.close()


def test_only_a_finished_task_not_yet_redacted_may_be_redacted() -> None:
    running = History({"a": []}).add(E.STEP_STARTED, "a", 1)
    with pytest.raises(FailedPreconditionError, match="RUNNING and not finished"):
        refuse_redact(running.task, busy=False)
    done = running.add(E.STEP_SUCCEEDED, "a", 1, {"result": 1})
    refuse_redact(done.task, busy=False)
    with pytest.raises(FailedPreconditionError, match="not finished"):
        refuse_redact(done.task, busy=True)  # a compensation of it still runs
    redacted = done.add(E.TASK_REDACTED, payload={"operator": "ana", "reason": "r"})
    with pytest.raises(FailedPreconditionError, match="already redacted"):
        refuse_redact(redacted.task, busy=False)


async def test_a_snapshot_from_before_the_records_were_kept_still_finds_them(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path / "n1")
    await _write(store, 10, seed=3)
    task = next(t for t in store.state.iter_tasks() if t.status is TaskStatus.SUCCEEDED)
    assert task.event_ids is not None
    red = await store.log.append(
        EventType.TASK_REDACTED, task.task_id, payload={"operator": "a", "reason": "r"}
    )
    kept = store.state.redacted_records[task.task_id]
    assert kept == [i for i in task.event_ids if i < red.event_id]
    old = {"redacted": {task.task_id: red.event_id}}  # the form snapshots had before
    store.state.load_redacted(old)
    assert store.state.redacted_records == {task.task_id: kept}
    await store.close()


async def test_time_travel_by_a_full_replay_hides_a_later_redaction(tmp_path: Path) -> None:
    store = _store(tmp_path / "n1")  # a snapshot every 50 events
    await _write(store, 20, seed=4)
    await store.wait_snapshot()
    task = next(t for t in store.state.iter_tasks() if t.status is TaskStatus.SUCCEEDED)
    data = task.input
    red = await store.log.append(
        EventType.TASK_REDACTED, task.task_id, payload={"operator": "a", "reason": "r"}
    )
    store.redactor.drain()
    at = red.event_id - 1
    # what NodeViews.task_at falls back to: the state rebuilt from the newest
    # snapshot at or before `at`, taken before the redaction
    rebuilt = state_at(tmp_path / "n1", at).peek(task.task_id)
    assert rebuilt is not None and rebuilt.input != data  # state_at hides it itself
    past = store.hide_since(rebuilt, at)
    fast = store.task_at(task.task_id, at)
    assert past is not None and fast is not None
    assert past.input == fast.input == {"$redacted": red.event_id}
    assert [s.result for s in past.steps.values()] == [s.result for s in fast.steps.values()]
    assert store.hide_since(state_at(tmp_path / "n1").peek(task.task_id), red.event_id) == (
        store.state.peek(task.task_id)
    )
    await store.close()


async def test_an_offline_replay_until_before_a_redaction_hides_it(tmp_path: Path) -> None:
    """`apollo11 replay --until N`, N before a redaction, rebuilds from a snapshot taken
    before it, which still holds the data: every read path shows the redaction, this
    one too (the task's whole state, and the listing in JSON)."""
    from typer.testing import CliRunner

    from apollo11.scheduler.cli import app

    store = _store(tmp_path / "n1")  # a snapshot every 50 events
    await _write(store, 20, seed=4)
    await store.wait_snapshot()
    task = next(t for t in store.state.iter_tasks() if t.status is TaskStatus.SUCCEEDED)
    red = await store.log.append(
        EventType.TASK_REDACTED, task.task_id, payload={"operator": "a", "reason": "r"}
    )
    store.redactor.drain()
    await store.close()
    at = str(red.event_id - 1)
    mark = {"$redacted": red.event_id}
    runner = CliRunner()
    d = str(tmp_path / "n1")
    res = runner.invoke(
        app, ["replay", "--data-dir", d, "--until", at, "--task", task.task_id, "--json"]
    )
    assert res.exit_code == 0, res.output
    shown = json.loads(res.stdout)
    assert shown["input"] == mark
    assert all(s["result"] in (None, mark) for s in shown["steps"])
    assert "redacted" not in shown  # as of then it was not redacted yet: only hidden
    res = runner.invoke(app, ["replay", "--data-dir", d, "--until", at, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["tasks"][task.task_id]["input"] == mark
