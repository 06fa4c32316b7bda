"""Schedules on the primary: the verbs that change them, and their firing.

Every change and every outcome is an event (state/schedule.py folds them), so
what fires is decided from the log alone: at each schedule's next start the
primary asks `schedules.decide` what became of each nominal time since the
watermark, and writes the answer in one batch: a TASK_SUBMITTED for each time
fired (idempotency key `schedule:{id}:{nominal time}`, so a time fires at most
once whoever writes it), an OCCURRENCE for each one missed, skipped or
buffered. A new primary arms every schedule at once: the times that came while
no primary was there are caught up or recorded missed by the same rule.

A buffered occurrence starts when the task before it ends: the engine tells
`task_ended`, and the oldest waiting one is fired then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Hashable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, Protocol

from apollo11.scheduler import metrics
from apollo11.scheduler.clock import Clock
from apollo11.scheduler.engine.timers import Timers
from apollo11.scheduler.errors import (
    AlreadyExistsError,
    ApolloError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
)
from apollo11.scheduler.log import Draft, Event, EventType
from apollo11.scheduler.schedules import Decision, Outcome, ScheduleSpec, decide, nominal_times
from apollo11.scheduler.state import TERMINAL, ScheduleState, Store, spec_dict
from apollo11.scheduler.taskid import new_task_id
from apollo11.scheduler.workflow import Registry, Workflow

log = logging.getLogger("apollo11.scheduler.engine")

MAX_SCHEDULES = 10_000
ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
RETRY_S = 1.0  # a decision that failed (a write refused) is tried again this soon
# A schedule that cannot fire on this primary (its workflow is not loaded here, its
# input no longer fits the model) is looked at again this often: only an update or
# another primary changes that, and each look logs why.
HELD_RETRY_S = 60.0
MAX_BACKFILL = 10_000  # nominal times in one backfill
# A backfill fires at most so many a second: 10,000 times take about 8 minutes, and
# the other tasks' dispatch is not queued behind them (docs/schedules.md).
BACKFILL_PER_S = 20
BACKFILL_OVERLAPS = ("allow-all", "buffer-all")
UNSET: Any = object()


class BackfillStarted(NamedTuple):
    """A backfill's id (the event that started it) and how many nominal times its
    range holds (those fired before are left alone as it goes)."""

    backfill_id: int
    times: int


class Host(Protocol):
    """What the schedules need of the engine (engine.py's `Engine`)."""

    @property
    def node_id(self) -> str: ...
    @property
    def store(self) -> Store: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def leading(self) -> bool: ...
    @property
    def registry(self) -> Registry: ...

    def check_leading(self) -> None: ...
    def check_submission(self, workflow: str, input: Any) -> Workflow: ...
    async def wait_commit(self, event_id: int) -> None: ...
    async def cancel_task(self, task_id: str, *, operator: str, reason: str) -> Event: ...


class Schedules:
    def __init__(self, host: Host) -> None:
        self.host = host
        self._timers = Timers(host.clock, self._came_due)
        self._deciding: dict[str, asyncio.Task[None]] = {}
        self._creating: set[str] = set()
        self._again: set[str] = set()  # came due while being decided
        self._reconciling: asyncio.Task[None] | None = None
        self._backfills: set[asyncio.Task[None]] = set()
        # the CPU its decisions took (the decide and the drafts, not the writes): what
        # `apollo11 bench schedules --firing` reads
        self.decisions = 0
        self.decide_seconds = 0.0
        # One decision or change of a schedule at a time: a decision written after a
        # pause it computed before would fire a paused schedule, and two decisions of
        # the same times would fire them twice.
        self._locks: dict[str, asyncio.Lock] = {}

    def _lock(self, sid: str) -> asyncio.Lock:
        lock = self._locks.get(sid)
        if lock is None:
            lock = self._locks[sid] = asyncio.Lock()
        return lock

    # -------------------------------------------------------------- verbs

    async def create(
        self,
        schedule_id: str,
        workflow: str,
        spec: ScheduleSpec,
        input: Any = None,
        *,
        note: str = "",
        operator: str = "",
        source: str = "api",
    ) -> ScheduleState:
        h = self.host
        h.check_leading()
        if not ID.fullmatch(schedule_id):
            raise InvalidArgumentError(
                f"schedule id {schedule_id!r}: 1 to 128 of A-Z a-z 0-9 . _ : -"
            )
        known = h.store.state.schedules
        if schedule_id in known or schedule_id in self._creating:
            raise AlreadyExistsError(f"schedule {schedule_id!r} already exists")
        # a create's schedule is in the state from its append, before its commit returns
        # and it leaves `_creating`: counted once
        if len(known) + len(self._creating - known.keys()) >= MAX_SCHEDULES:
            raise ResourceExhaustedError(
                f"at most {MAX_SCHEDULES:,} schedules; delete one to make another"
            )
        h.check_submission(workflow, input)  # refused now, not at the first fire
        body = {
            "action": "create",
            "schedule": schedule_id,
            "workflow": workflow,
            "spec": spec_dict(spec),
            "input": input,
            "note": note,
            "by": operator,
            "source": source,
            "from_ms": h.clock.now_ms(),
        }
        self._creating.add(schedule_id)
        try:
            await self._write(body)
        finally:
            self._creating.discard(schedule_id)
        self._timers.arm(schedule_id, h.clock.now())
        return known[schedule_id]

    async def update(
        self,
        schedule_id: str,
        *,
        operator: str = "",
        workflow: str | None = None,
        spec: ScheduleSpec | None = None,
        input: Any = UNSET,
        note: str | None = None,
        source: str | None = None,
    ) -> ScheduleState:
        s = self._known(schedule_id)
        wf = s.workflow if workflow is None else workflow
        given = s.input if input is UNSET else input
        if workflow is not None or input is not UNSET:
            self.host.check_submission(wf, given)
        async with self._lock(schedule_id):
            await self._fire_due(schedule_id)  # the times before the change, by the old rules
            await self._write(_update(schedule_id, operator, workflow, spec, input, note, source))
        self._timers.arm(schedule_id, self.host.clock.now())
        return self._known(schedule_id)

    async def pause(self, schedule_id: str, *, note: str = "", operator: str = "") -> ScheduleState:
        return await self._set_paused(schedule_id, True, note, operator)

    async def unpause(
        self, schedule_id: str, *, note: str = "", operator: str = ""
    ) -> ScheduleState:
        return await self._set_paused(schedule_id, False, note, operator)

    async def _set_paused(
        self, schedule_id: str, paused: bool, note: str, operator: str
    ) -> ScheduleState:
        s = self._known(schedule_id)
        # What came before the change is decided as it was: fired (or missed) up to a
        # pause, skipped as paused up to an unpause.
        async with self._lock(schedule_id):
            await self._fire_due(schedule_id)
            if s.paused != paused:
                action = "pause" if paused else "unpause"
                body = {"action": action, "schedule": schedule_id, "note": note, "by": operator}
                await self._write(body)
        self._timers.arm(schedule_id, self.host.clock.now())
        return self._known(schedule_id)

    async def trigger(self, schedule_id: str, *, operator: str = "") -> str:
        """Fire once now, outside the schedule's times (its watermark stays)."""
        s = self._known(schedule_id)
        wf = self.host.check_submission(s.workflow, s.input)
        now_ms = self.host.clock.now_ms()
        fired = {"id": schedule_id, "nominal_ms": now_ms, "triggered": True}
        fired["reason"] = f"triggered by {operator}" if operator else "triggered"
        draft = Draft(EventType.TASK_SUBMITTED, new_task_id(), payload=_submission(wf, s, fired))
        (event,) = await self.host.store.log.append_many([draft])
        await self.host.wait_commit(event.event_id)
        return event.task_id

    async def backfill(
        self,
        schedule_id: str,
        start: datetime,
        end: datetime,
        *,
        overlap: str = "allow-all",
        operator: str = "",
    ) -> BackfillStarted:
        """Fire the schedule's nominal times in [start, end] (already past), those not
        fired before, at most BACKFILL_PER_S a second; what it started. The same
        backfill twice fires nothing new (each time's key is the schedule's own)."""
        s = self._known(schedule_id)
        if end < start:
            raise InvalidArgumentError(f"backfill: end {end.isoformat()} is before start")
        if end > _dt(self.host.clock.now_ms()):
            raise InvalidArgumentError(
                f"backfill: end {end.isoformat()} is in the future (the schedule fires those)"
            )
        if overlap not in BACKFILL_OVERLAPS:
            raise InvalidArgumentError(
                f"backfill: overlap {overlap!r}: one of {', '.join(BACKFILL_OVERLAPS)}"
            )
        times = nominal_times(
            s.spec, start - timedelta(milliseconds=1), until=end, count=MAX_BACKFILL + 1
        )
        if len(times) > MAX_BACKFILL:
            raise InvalidArgumentError(
                f"backfill: more than {MAX_BACKFILL:,} nominal times from {start.isoformat()} "
                f"to {end.isoformat()}; split the range"
            )
        body = {
            "action": "backfill",
            "schedule": schedule_id,
            "from_ms": _ms(start),
            "to_ms": _ms(end),
            "overlap": overlap,
            "by": operator,
        }
        draft = Draft(EventType.SCHEDULE, "", payload=body)
        (event,) = await self.host.store.log.append_many([draft])
        await self.host.wait_commit(event.event_id)
        self._run_backfill(schedule_id, event.event_id)
        return BackfillStarted(event.event_id, len(times))

    def _run_backfill(self, sid: str, bid: int) -> None:
        t = asyncio.create_task(self._backfilling(sid, bid), name=f"apollo11-backfill-{bid}")
        self._backfills.add(t)
        t.add_done_callback(self._backfills.discard)

    async def _backfilling(self, sid: str, bid: int) -> None:
        h = self.host
        state = h.store.state
        fired = 0
        s = state.schedules.get(sid)
        b = s.backfills.get(bid) if s is not None else None
        if s is None or b is None:
            return
        times = nominal_times(
            s.spec, _dt(b.from_ms - 1), until=_dt(b.to_ms), count=MAX_BACKFILL + 1
        )
        todo = [t for t in times if state.task_for_key(_key(sid, _ms(t))) is None]
        running: str | None = None
        try:
            while todo:
                s = state.schedules.get(sid)
                if s is None or bid not in s.backfills or not h.leading:
                    return
                if b.overlap == "buffer-all":
                    t = state.task(running) if running is not None else None
                    if t is not None and t.status not in TERMINAL:
                        await h.clock.sleep(0.2)  # one at a time: the previous one runs
                        continue
                    batch, todo = todo[:1], todo[1:]
                else:
                    batch, todo = todo[:BACKFILL_PER_S], todo[BACKFILL_PER_S:]
                reason = f"backfill by {b.by}" if b.by else "backfill"
                drafts = [
                    self._fire_draft(
                        s, {"id": sid, "nominal_ms": _ms(t), "backfill": bid, "reason": reason}
                    )
                    for t in batch
                ]
                events = await h.store.log.append_many(drafts)
                await h.wait_commit(events[-1].event_id)
                fired += len(events)
                running = events[-1].task_id
                metrics.SCHEDULE_OCCURRENCES.labels("fired").inc(len(events))
                if todo and b.overlap != "buffer-all":
                    await h.clock.sleep(1.0)
            done = {"action": "backfilled", "schedule": sid, "backfill": bid, "fired": fired}
            await self._write(done)
            log.info("schedule %s: backfill %d done: fired %d", sid, bid, fired)
        except Exception as e:  # stepping down, a failed log: the next primary resumes it
            log.warning("schedule %s: backfill %d stopped after %d: %s", sid, bid, fired, e)

    async def delete(self, schedule_id: str, *, operator: str = "") -> None:
        self._known(schedule_id)
        async with self._lock(schedule_id):
            await self._write({"action": "delete", "schedule": schedule_id, "by": operator})
        self._locks.pop(schedule_id, None)

    def _known(self, schedule_id: str) -> ScheduleState:
        self.host.check_leading()
        s = self.host.store.state.schedules.get(schedule_id)
        if s is None:
            raise NotFoundError(f"no schedule {schedule_id!r}")
        return s

    async def _write(self, body: dict[str, Any]) -> None:
        (event,) = await self.host.store.log.append_many(
            [Draft(EventType.SCHEDULE, "", payload=body)]
        )
        await self.host.wait_commit(event.event_id)

    # ------------------------------------------------------------- firing

    def start(self) -> None:
        """This node leads now: every schedule decides at once (catching up), and the
        schedules declared in code are reconciled into the log."""
        now = self.host.clock.now()
        self._timers.arm_many((sid, now) for sid in self.host.store.state.schedules)
        for sid, sch in self.host.store.state.schedules.items():
            for bid in sch.backfills:
                self._run_backfill(sid, bid)  # a backfill the last primary did not end
        if self.host.registry.schedules:
            self._reconciling = asyncio.create_task(self._reconcile(), name="apollo11-reconcile")

    def settled(self) -> bool:
        """No decision of a schedule that came due, and no reconciliation of the ones
        declared in code, still to write (a backfill's pacing sleeps on the clock, and
        is not waited for). Part of Engine.settled: the testing kit's "at rest"."""
        reconciling = self._reconciling is not None and not self._reconciling.done()
        return not (self._deciding or reconciling)

    async def _reconcile(self) -> None:
        known = self.host.store.state.schedules
        # no token asked for these changes: the record names the primary that made them
        by = f"node:{self.host.node_id}"
        for sid, d in sorted(self.host.registry.schedules.items()):
            try:
                s = known.get(sid)
                if s is None:
                    await self.create(
                        sid, d.workflow, d.spec, d.input, note=d.note, operator=by, source="code"
                    )
                    log.info("schedule %s: created as declared in code", sid)
                elif s.source != "code":
                    log.warning(
                        "schedule %s is declared in code but was made through the API: "
                        "left as it is (delete it to have the declared one)",
                        sid,
                    )
                elif (s.workflow, s.spec, s.input, s.note) != (d.workflow, d.spec, d.input, d.note):
                    await self.update(
                        sid,
                        operator=by,
                        workflow=d.workflow,
                        spec=d.spec,
                        input=d.input,
                        note=d.note,
                    )
                    log.info("schedule %s: updated to what the code declares", sid)
            except Exception as e:  # one bad declaration does not stop the others
                if not self.host.leading:
                    return
                log.warning("schedule %s: reconciling the declared schedule failed: %s", sid, e)

    async def stop(self) -> None:
        await self._timers.stop()
        if self._reconciling is not None:
            self._reconciling.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reconciling
            self._reconciling = None
        for t in [*self._deciding.values(), *self._backfills]:
            t.cancel()
        for t in [*self._deciding.values(), *self._backfills]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._deciding.clear()
        self._again.clear()

    def task_ended(self, task: str) -> None:
        """A task ended: if a schedule fired it and buffered others behind it, the
        schedule decides again now."""
        state = self.host.store.state
        t = state.tasks.get(task)
        fired = t.schedule if t is not None else None
        if fired is None:
            return
        sid = str(fired.get("id"))
        s = state.schedules.get(sid)
        last = s.last_fired() if s is not None else None
        if s is not None and last is not None and last.task_id == task and s.buffered():
            self._timers.arm(sid, self.host.clock.now())

    def _came_due(self, keys: list[Hashable]) -> None:
        if not self.host.leading:
            return
        due = []
        for key in keys:
            sid = str(key)
            if sid in self._deciding:
                self._again.add(sid)  # decided once more when that decision ends
            else:
                due.append(sid)
        if not due:
            return
        t = asyncio.create_task(self._decide_many(due), name="apollo11-schedules")
        for sid in due:
            self._deciding[sid] = t
        t.add_done_callback(self._decided)

    def _decided(self, t: asyncio.Task[None]) -> None:
        for sid, mine in list(self._deciding.items()):
            if mine is t:
                del self._deciding[sid]
                if sid in self._again:
                    self._again.discard(sid)
                    self._timers.arm(sid, self.host.clock.now())

    async def fire_due(self, sid: str) -> None:
        """Decide every nominal time of `sid` that has come, write the outcomes, and arm
        its next start."""
        async with self._lock(sid):
            await self._fire_due(sid)

    async def _fire_due(self, sid: str) -> None:
        plan = self._plan_or_hold(sid)
        if plan is not None:
            await self._apply([plan])

    def _plan_or_hold(self, sid: str) -> _Plan | None:
        """`_plan`, or None while `sid` cannot fire here (its workflow is not loaded
        on this primary, its input no longer fits): its times stay after the watermark,
        undecided, for an update or a primary that can fire them (late, within the
        catch-up window; missed past it). Refusing would hold back every schedule
        decided in the same batch, and a pause or an update of this one."""
        try:
            return self._plan(sid)
        except ApolloError as e:
            log.warning(
                "schedule %s cannot fire on this primary: %s; its times wait (looked at "
                "again in %gs)",
                sid,
                e,
                HELD_RETRY_S,
            )
            self._timers.arm(sid, self.host.clock.now() + HELD_RETRY_S)
            return None

    def _plan(self, sid: str) -> _Plan | None:
        """What `sid`'s due times become (the decision, the events to write), on the
        loop and without awaiting: a batch of schedules is planned, then written once."""
        h = self.host
        state = h.store.state
        s = state.schedules.get(sid)
        if s is None:
            return None
        t0 = time.perf_counter()
        now = _dt(h.clock.now_ms())
        last = s.last_fired()
        running_task = None
        if last is not None and last.task_id is not None:
            t = state.task(last.task_id)
            if t is not None and t.status not in TERMINAL:
                running_task = last.task_id
        waiting = s.buffered()
        drafts: list[Draft] = []
        if waiting and running_task is None:
            # the task before it ended: the oldest one buffered starts now
            first = waiting[0]
            reason = "buffered, started when the occurrence before it ended"
            fired = {"id": sid, "nominal_ms": first.nominal_ms, "reason": reason}
            drafts.append(self._fire_draft(s, fired))
            running_task, waiting = "(starting)", waiting[1:]
        mark = _dt(s.watermark_ms if s.watermark_ms is not None else s.created_ms)
        d = decide(
            s.spec,
            schedule_id=sid,
            watermark=mark,
            now=now,
            running=running_task is not None,
            buffered=len(waiting),
            paused=s.paused,
        )
        cancel: str | None = None
        for o in d.occurrences:
            nominal_ms = _ms(o.nominal_time)
            if o.outcome is Outcome.FIRED:
                if o.cancel_running and running_task not in (None, "(starting)"):
                    cancel = running_task
                if state.task_for_key(_key(sid, nominal_ms)) is not None:
                    continue  # fired already (a backfill ran it)
                fired = {"id": sid, "nominal_ms": nominal_ms, "reason": o.reason}
                drafts.append(self._fire_draft(s, fired))
            else:
                body = {
                    "schedule": sid,
                    "nominal_ms": nominal_ms,
                    "outcome": o.outcome.value,
                    "reason": o.reason,
                }
                drafts.append(Draft(EventType.OCCURRENCE, "", payload=body))
        self.decisions += 1
        self.decide_seconds += time.perf_counter() - t0
        return _Plan(sid, drafts, d, cancel, now)

    async def _apply(self, plans: list[_Plan]) -> None:
        """Write what the plans decided, in one batch, and arm each schedule's next."""
        h = self.host
        for p in plans:
            if p.cancel is not None:
                with contextlib.suppress(Exception):  # ended meanwhile: nothing to cancel
                    await h.cancel_task(
                        p.cancel, operator=f"schedule:{p.sid}", reason="overlap cancel-other"
                    )
        drafts = [d for p in plans for d in p.drafts]
        if drafts:
            events = await h.store.log.append_many(drafts)
            await h.wait_commit(events[-1].event_id)
        said = [p for p in plans if p.drafts]
        if 0 < len(said) <= 10:
            for p in said:
                log.info("schedule %s: %s", p.sid, p.decision.sentence)
        elif said:
            log.info("schedules: %d decided, %d events written", len(said), len(drafts))
        for p in said:
            for o in p.decision.occurrences:
                metrics.SCHEDULE_OCCURRENCES.labels(o.outcome.value).inc()
                if o.outcome is Outcome.FIRED:
                    late = (p.now - o.start_at).total_seconds()
                    metrics.SCHEDULE_FIRE_LATENESS.observe(max(0.0, late))
        for p in plans:
            d = p.decision
            if d.more:
                self._timers.arm(p.sid, h.clock.now() + RETRY_S)
            elif d.next_start is not None and p.sid in h.store.state.schedules:
                self._timers.arm(p.sid, d.next_start.timestamp())

    async def _decide_many(self, sids: list[str]) -> None:
        """Schedules that came due together: planned one by one, written in one batch
        (10,000 due in the same second are one append, not 10,000)."""
        held: list[str] = []
        try:
            for sid in sids:
                lock = self._lock(sid)
                if lock.locked():  # a change of it is being written: after that one
                    self._again.add(sid)
                    continue
                await lock.acquire()  # (free: it returns at once)
                held.append(sid)
            plans = [p for p in map(self._plan_or_hold, held) if p is not None]
            await self._apply(plans)
        except Exception as e:  # a write refused (stepping down, a failed log): again soon
            if self.host.leading:
                log.warning("schedules: deciding %d due ones failed: %s", len(held), e)
                for sid in held:
                    self._timers.arm(sid, self.host.clock.now() + RETRY_S)
        finally:
            for sid in held:
                mine = self._locks.get(sid)
                if mine is not None and mine.locked():
                    mine.release()

    def _fire_draft(self, s: ScheduleState, fired: dict[str, Any]) -> Draft:
        wf = self.host.check_submission(s.workflow, s.input)
        return Draft(EventType.TASK_SUBMITTED, new_task_id(), payload=_submission(wf, s, fired))


def _submission(wf: Workflow, s: ScheduleState, fired: dict[str, Any]) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "workflow": wf.name,
        "version": wf.version,
        "input": s.input,
        "steps": wf.deps,
        "schedule": fired,
    }
    if not fired.get("triggered"):
        payload["idempotency_key"] = _key(s.schedule_id, int(fired["nominal_ms"]))
    return payload


def _key(sid: str, nominal_ms: int) -> str:
    """A nominal time's idempotency key: whoever fires it, it fires once."""
    return f"schedule:{sid}:{_dt(nominal_ms).isoformat().replace('+00:00', 'Z')}"


def _dt(ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


def _ms(t: datetime) -> int:
    return (t - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


def _update(
    sid: str,
    operator: str,
    workflow: str | None,
    spec: ScheduleSpec | None,
    input: Any,
    note: str | None,
    source: str | None,
) -> dict[str, Any]:
    """An update's payload: the fields it changes only."""
    body: dict[str, Any] = {"action": "update", "schedule": sid, "by": operator}
    if workflow is not None:
        body["workflow"] = workflow
    if spec is not None:
        body["spec"] = spec_dict(spec)
    if input is not UNSET:
        body["input"] = input
    if note is not None:
        body["note"] = note
    if source is not None:
        body["source"] = source
    return body


@dataclass(frozen=True, slots=True)
class _Plan:
    sid: str
    drafts: list[Draft]
    decision: Decision
    cancel: str | None  # the running task that overlap cancel-other cancels
    now: datetime
