"""Schedules on a real store and engine, with a fake clock: what fires, what is
recorded missed or skipped, and that a replay of the log holds the same."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.engine import schedules as engine_schedules
from apollo11.scheduler.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
)
from apollo11.scheduler.log import EventType
from apollo11.scheduler.schedules import Schedule, ScheduleSpec
from apollo11.scheduler.state import ScheduleState
from apollo11.scheduler.state.store import Store
from apollo11.scheduler.workflow import Idempotent, StepContext, Workflow
from tests.scheduler.test_engine import CFG, Rig, make_rig

nightly = Workflow("nightly", version=1)


@nightly.step(idempotency=Idempotent())
def work(ctx: StepContext) -> dict[str, Any]:
    return {"ok": True}


held = Workflow("held", version=1)
RELEASE: list[asyncio.Event] = []  # the running test's: a held task ends when it is set


@held.step(idempotency=Idempotent())
async def wait_for_release(ctx: StepContext) -> None:
    await RELEASE[-1].wait()


T0 = 1_700_000_000.0  # the fake clock's start: 2023-11-14 22:13:20 UTC
MINUTE = 60_000


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat()


async def _until(check: Callable[[], bool], what: str) -> None:
    async with asyncio.timeout(20):
        while not check():
            await asyncio.sleep(0.01)
    assert check(), what


def _outcomes(s: ScheduleState) -> list[tuple[int, str]]:
    return [((o.nominal_ms - int(T0 * 1000)) // MINUTE, o.outcome) for o in s.occurrences]


async def _rig(tmp_path: Path) -> Rig:
    return await make_rig(tmp_path / "d", FakeClock(start=T0), nightly, held)


def _every_minute(minutes: int, **kw: Any) -> ScheduleSpec:
    # every minute from T0 through T0 + `minutes` (start and end both count: T0 is the
    # creation time, and the times are those after it)
    return ScheduleSpec(
        every="1m", start=_utc(T0), end=_utc(T0 + 60 * minutes), overlap="allow-all", **kw
    )


async def test_each_nominal_time_fires_once_with_its_key_and_a_replay_agrees(
    tmp_path: Path,
) -> None:
    rig = await _rig(tmp_path)
    try:
        s = await rig.engine.schedules.create("every-minute", "nightly", _every_minute(10))
        await _until(lambda: s.watermark_ms == int(T0 * 1000) + 10 * MINUTE, "all ten decided")
        assert _outcomes(s) == [(m, "fired") for m in range(1, 11)]
        tasks = [o.task_id for o in s.occurrences]
        assert len(set(tasks)) == 10 and None not in tasks
        keys = {rig.store.state.tasks[t].idempotency_key for t in tasks if t is not None}
        first = datetime.fromtimestamp(T0 + 60, UTC).isoformat().replace("+00:00", "Z")
        assert f"schedule:every-minute:{first}" in keys and len(keys) == 10
        types = [e.event_type for e in rig.store.log.read() if not e.task_id]
        assert types.count(EventType.SCHEDULE) == 1
        before = s.to_dict()
        await rig.engine.stop()
        await rig.store.close()
        again = Store.open(rig.root, config=CFG, instance_id="n1", clock=rig.clock.now_ms)
        try:
            assert again.state.schedules["every-minute"].to_dict() == before
        finally:
            await again.close()
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_a_new_primary_catches_up_inside_the_window_and_records_the_rest_missed(
    tmp_path: Path,
) -> None:
    rig = await _rig(tmp_path)
    try:
        await rig.engine.schedules.create(
            "catchup", "nightly", _every_minute(10, catchup_window="3m")
        )
        await rig.engine.stop()  # at once: no primary while ten minutes pass
        rig.clock.advance(600)
        await rig.engine.start()
        s = rig.store.state.schedules["catchup"]
        await _until(lambda: len(s.occurrences) == 10, "every time decided")
        assert _outcomes(s) == [(m, "missed") for m in range(1, 7)] + [
            (m, "fired") for m in range(7, 11)
        ]
        assert "past the catch-up window of 3m" in s.occurrences[0].reason
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_times_while_paused_are_skipped_as_paused(tmp_path: Path) -> None:
    # (the fake clock moves as the schedule's timer sleeps: every time comes while paused)
    rig = await _rig(tmp_path)
    try:
        s = await rig.engine.schedules.create("p", "nightly", _every_minute(10))
        await rig.engine.schedules.pause("p", note="maintenance", operator="ana")
        assert s.paused and s.note == "maintenance" and s.by == "ana"
        await _until(lambda: len(s.occurrences) == 10, "every time decided")
        paused_at = max(
            e.event_id for e in rig.store.log.read() if e.event_type is EventType.SCHEDULE
        )
        after = [o for o in s.occurrences if o.event_id > paused_at]
        # (the timer may have fired the first time before the pause was written)
        assert len(after) >= 9 and {(o.outcome, o.reason) for o in after} == {("skipped", "paused")}
        assert [o.outcome for o in s.occurrences[: 10 - len(after)]] == ["fired"] * (
            10 - len(after)
        )
        await rig.engine.schedules.unpause("p", operator="bo")
        assert not s.paused and s.by == "bo"
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_a_trigger_fires_once_outside_the_times(tmp_path: Path) -> None:
    rig = await _rig(tmp_path)
    try:
        s = await rig.engine.schedules.create("t", "nightly", ScheduleSpec(cron="@yearly"))
        mark = s.watermark_ms
        task = await rig.engine.schedules.trigger("t", operator="ana")
        assert rig.store.state.tasks[task].workflow == "nightly"
        last = s.last()
        assert last is not None and last.task_id == task and last.reason == "triggered by ana"
        assert s.watermark_ms == mark, "a trigger is no nominal time"
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_refusals_name_what_is_wrong(tmp_path: Path) -> None:
    rig = await _rig(tmp_path)
    try:
        spec = ScheduleSpec(cron="@daily")
        with pytest.raises(InvalidArgumentError, match="schedule id"):
            await rig.engine.schedules.create("no spaces", "nightly", spec)
        with pytest.raises(NotFoundError, match="nope"):
            await rig.engine.schedules.create("a", "nope", spec)
        await rig.engine.schedules.create("a", "nightly", spec)
        with pytest.raises(AlreadyExistsError, match="'a' already exists"):
            await rig.engine.schedules.create("a", "nightly", spec)
        with pytest.raises(NotFoundError, match="no schedule 'b'"):
            await rig.engine.schedules.pause("b")
        await rig.engine.schedules.delete("a", operator="ana")
        assert "a" not in rig.store.state.schedules
        assert not [e for e in rig.store.log.read() if e.event_type is EventType.TASK_SUBMITTED]
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_creates_in_flight_count_once_against_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A create's schedule is in the state from its append, before its commit returns:
    counted there and as in flight too, the last creates of a full cluster made side by
    side were refused (64 at a time: the 9,9xxth of `bench schedules --failover`)."""
    monkeypatch.setattr(engine_schedules, "MAX_SCHEDULES", 4)
    rig = await _rig(tmp_path)
    gate = asyncio.Event()
    commit = rig.engine.wait_commit

    async def held(event_id: int) -> None:
        await gate.wait()
        await commit(event_id)

    monkeypatch.setattr(rig.engine, "wait_commit", held)
    spec = ScheduleSpec(cron="@daily")
    try:
        made = [
            asyncio.create_task(rig.engine.schedules.create(f"s{i}", "nightly", spec))
            for i in range(3)
        ]
        await _until(lambda: len(rig.store.state.schedules) == 3, "three appended")
        made.append(asyncio.create_task(rig.engine.schedules.create("s3", "nightly", spec)))
        await asyncio.sleep(0)  # its checks ran, its write waits for the gate
        gate.set()
        await asyncio.gather(*made)
        assert sorted(rig.store.state.schedules) == ["s0", "s1", "s2", "s3"]
        with pytest.raises(ResourceExhaustedError, match="at most 4 schedules"):
            await rig.engine.schedules.create("s4", "nightly", spec)
    finally:
        await rig.engine.stop()
        await rig.store.close()


def test_the_fake_clock_starts_where_the_tables_say() -> None:
    assert _utc(T0) == "2023-11-14T22:13:20+00:00"
    assert timedelta(minutes=1) // timedelta(milliseconds=1) == MINUTE


async def test_a_snapshot_holds_the_schedules_and_each_task_its_occurrence(
    tmp_path: Path,
) -> None:
    rig = await _rig(tmp_path)
    try:
        s = await rig.engine.schedules.create("snap", "nightly", _every_minute(3), input={"n": 1})
        await _until(lambda: len(s.occurrences) == 3, "three decided")
        task = rig.store.state.tasks[s.occurrences[0].task_id or ""]
        assert task.schedule == {"id": "snap", "nominal_ms": int(T0 * 1000) + MINUTE}
        assert task.input == {"n": 1}
        await rig.store.snapshot_now()
        before = rig.store.state.to_dict()
        assert "schedules" in before
        await rig.engine.stop()
        await rig.store.close()
        again = Store.open(rig.root, config=CFG, instance_id="n1", clock=rig.clock.now_ms)
        try:
            assert "snapshot" in str(again.recovery)
            assert again.state.to_dict() == before
        finally:
            await again.close()
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_a_declared_schedule_is_created_then_updated_but_an_api_one_is_left(
    tmp_path: Path,
) -> None:
    rig = await _rig(tmp_path)
    try:
        spec = {"cron": "@yearly"}
        rig.registry.schedules["declared"] = Schedule("declared", workflow=nightly, **spec)
        rig.registry.schedules["mine"] = Schedule("mine", workflow="nightly", cron="@daily")
        await rig.engine.schedules.create("mine", "nightly", ScheduleSpec(cron="@hourly"))
        await rig.engine.stop()
        await rig.engine.start()  # a new term: the declarations are reconciled
        known = rig.store.state.schedules
        await _until(lambda: "declared" in known, "created")
        assert known["declared"].source == "code" and known["declared"].spec.cron == "@yearly"
        assert known["mine"].source == "api" and known["mine"].spec.cron == "@hourly"
        rig.registry.schedules["declared"] = Schedule(
            "declared", workflow=nightly, cron="@monthly", note="moved"
        )
        await rig.engine.stop()
        await rig.engine.start()
        await _until(lambda: known["declared"].note == "moved", "updated")
        assert known["declared"].spec.cron == "@monthly"
        assert known["mine"].spec.cron == "@hourly", "made through the API: left alone"
    finally:
        await rig.engine.stop()
        await rig.store.close()


def test_a_declaration_with_a_bad_spec_fails_naming_it() -> None:
    with pytest.raises(ValueError, match=r"schedule 'bad': cron \"61 \* \* \* \*\""):
        Schedule("bad", workflow=nightly, cron="61 * * * *")


async def test_a_backfill_fires_each_past_time_once_and_twice_fires_nothing_new(
    tmp_path: Path,
) -> None:
    rig = await _rig(tmp_path)
    try:
        # a schedule made now, for times that were before it: an hourly one, five hours
        # back (it ends now: the fake clock jumps as timers sleep, and its own times would
        # fire meanwhile)
        spec = ScheduleSpec(cron="0 * * * *", end=_utc(T0))
        s = await rig.engine.schedules.create("hourly", "nightly", spec)
        start = datetime.fromtimestamp(T0, UTC) - timedelta(hours=5)
        end = datetime.fromtimestamp(T0, UTC)
        started = await rig.engine.schedules.backfill("hourly", start, end, operator="ana")
        assert started.times == 5
        await _until(lambda: not s.backfills, "the backfill ended")
        hours = [o for o in s.occurrences if o.outcome == "fired"]
        # 17:13 to 22:13 UTC: 18:00, 19:00, 20:00, 21:00, 22:00
        assert [datetime.fromtimestamp(o.nominal_ms / 1000, UTC).hour for o in hours] == [
            18,
            19,
            20,
            21,
            22,
        ]
        assert {o.reason for o in hours} == {"backfill by ana"}
        assert s.watermark_ms == int(T0 * 1000), "a backfill moves no watermark"
        again = await rig.engine.schedules.backfill("hourly", start, end, operator="ana")
        assert again.backfill_id != started.backfill_id
        await _until(lambda: not s.backfills, "the second backfill ended")
        submitted = [e for e in rig.store.log.read() if e.event_type is EventType.TASK_SUBMITTED]
        assert len(submitted) == 5, "the same range twice fires nothing new"
        with pytest.raises(InvalidArgumentError, match="in the future"):
            await rig.engine.schedules.backfill("hourly", start, end + timedelta(hours=2))
        with pytest.raises(InvalidArgumentError, match="before start"):
            await rig.engine.schedules.backfill("hourly", end, start)
        with pytest.raises(InvalidArgumentError, match="more than 10,000"):
            every = await rig.engine.schedules.create("s", "nightly", ScheduleSpec(every="1s"))
            assert every is not None
            await rig.engine.schedules.backfill("s", start, end)
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_a_trigger_on_a_nominal_times_millisecond_takes_nothing_of_it(
    tmp_path: Path,
) -> None:
    rig = await _rig(tmp_path)
    try:
        spec = ScheduleSpec(every="1m", start=_utc(T0), end=_utc(T0 + 60), overlap="allow-all")
        s = await rig.engine.schedules.create("same-ms", "nightly", spec)
        rig.clock.t = T0 + 60  # the trigger lands on the nominal time's millisecond
        await rig.engine.schedules.trigger("same-ms", operator="ana")
        await rig.engine.schedules.fire_due("same-ms")
        assert sorted((o.outcome, o.triggered) for o in s.occurrences) == [
            ("fired", False),
            ("fired", True),
        ]
        assert {o.nominal_ms for o in s.occurrences} == {int((T0 + 60) * 1000)}
        again = ScheduleState.from_dict(s.to_dict())
        assert again.to_dict() == s.to_dict()
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_buffer_one_waits_for_the_running_one_then_starts_and_skips_the_rest(
    tmp_path: Path,
) -> None:
    RELEASE.append(asyncio.Event())
    rig = await _rig(tmp_path)
    try:
        spec = ScheduleSpec(every="1m", start=_utc(T0), end=_utc(T0 + 180), overlap="buffer-one")
        s = await rig.engine.schedules.create("buf", "held", spec)
        await _until(lambda: len(s.occurrences) == 3, "every time decided")
        assert _outcomes(s) == [(1, "fired"), (2, "buffered"), (3, "skipped")]
        assert "an occurrence already waits" in s.occurrences[2].reason
        RELEASE[-1].set()  # the first ends: the buffered one starts
        await _until(lambda: s.occurrences[1].outcome == "fired", "the buffered one started")
        assert s.occurrences[1].task_id not in (None, s.occurrences[0].task_id)
        assert "buffered" in s.occurrences[1].reason
        assert s.buffered() == []
    finally:
        RELEASE[-1].set()
        await rig.engine.stop()
        await rig.store.close()


async def test_replay_until_an_event_shows_each_schedule_as_it_was(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from apollo11.scheduler.cli import app

    rig = await _rig(tmp_path)
    try:
        s = await rig.engine.schedules.create("every-minute", "nightly", _every_minute(3))
        await _until(lambda: len(s.occurrences) == 3, "three decided")
        second = s.occurrences[1].event_id
    finally:
        await rig.engine.stop()
        await rig.store.close()
    runner = CliRunner()
    res = runner.invoke(app, ["replay", "--data-dir", str(tmp_path / "d")])
    assert res.exit_code == 0, res.output
    row = next(line for line in res.stdout.splitlines() if "every-minute" in line)
    assert "2023-11-14T22:16:20Z" in row and "fired" in row, row  # the third, T0 + 3 min
    res = runner.invoke(app, ["replay", "--data-dir", str(tmp_path / "d"), "--until", str(second)])
    row = next(line for line in res.stdout.splitlines() if "every-minute" in line)
    assert "2023-11-14T22:15:20Z" in row and "2023-11-14T22:16:20Z" not in row, row


gone = Workflow("gone", version=1)


@gone.step(idempotency=Idempotent())
def gone_work(ctx: StepContext) -> None:
    return None


async def test_a_schedule_whose_workflow_is_not_loaded_holds_no_other_back(
    tmp_path: Path,
) -> None:
    rig = await make_rig(tmp_path / "d", FakeClock(start=T0), nightly, held, gone)
    await rig.engine.schedules.create("a-gone", "gone", _every_minute(5))
    await rig.engine.schedules.create("b-kept", "nightly", _every_minute(5))
    rig = await rig.reopen(nightly, held)  # a deploy without the module of `gone`
    try:
        a = rig.store.state.schedules["a-gone"]
        b = rig.store.state.schedules["b-kept"]
        decided = len(a.occurrences)  # (the first time may have come before the deploy)
        await _until(lambda: len(b.occurrences) == 5, "the other schedule decided")
        # on time: not held back (and recorded missed a day later) by the one that
        # cannot fire, which came due with it
        assert _outcomes(b) == [(m, "fired") for m in range(1, 6)]
        assert len(a.occurrences) == decided, "undecided: a primary with its workflow fires them"
        # and an operator may still pause it, or point it at a workflow that is loaded
        await rig.engine.schedules.pause("a-gone", operator="ana")
        await rig.engine.schedules.update("a-gone", workflow="nightly", operator="ana")
        assert a.paused and a.workflow == "nightly"
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_a_schedules_input_may_be_as_large_as_a_submissions(tmp_path: Path) -> None:
    # The SCHEDULE event carries the input its tasks will be submitted with: bounded by
    # submit_max_bytes as their TASK_SUBMITTED is, not by a step result's payload_max_bytes.
    config = CFG.log
    assert config.payload_max_bytes < 10_000 < config.submit_max_bytes
    big = {"rows": ["x" * 100] * 100}  # about 10 KB
    rig = await _rig(tmp_path)
    try:
        s = await rig.engine.schedules.create("big", "nightly", _every_minute(1), input=big)
        await rig.engine.schedules.update("big", input={**big, "more": 1})
        await _until(lambda: len(s.occurrences) == 1, "decided")
        task = rig.store.state.tasks[s.occurrences[0].task_id or ""]
        assert task.input["rows"] == big["rows"]
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_a_declared_schedules_changes_name_the_node_that_made_them(
    tmp_path: Path,
) -> None:
    rig = await _rig(tmp_path)
    try:
        rig.registry.schedules["declared"] = Schedule("declared", workflow=nightly, cron="@yearly")
        await rig.engine.stop()
        await rig.engine.start()  # a new term: the declaration is reconciled
        known = rig.store.state.schedules
        await _until(lambda: "declared" in known, "created")
        assert known["declared"].by == "node:n1", "no token made it: the primary did"
        await rig.engine.schedules.pause("declared", operator="ana")
        rig.registry.schedules["declared"] = Schedule("declared", workflow=nightly, cron="@daily")
        await rig.engine.stop()
        await rig.engine.start()
        await _until(lambda: known["declared"].spec.cron == "@daily", "updated")
        assert known["declared"].by == "node:n1"
        made = [
            e.payload.get("by") for e in rig.store.log.read() if e.event_type is EventType.SCHEDULE
        ]
        assert made == ["node:n1", "ana", "node:n1"], "on the record of each change"
    finally:
        await rig.engine.stop()
        await rig.store.close()
