"""The schedule RPCs: their requests checked, the engine's verbs called, the answers built.

Writes go to the leading engine, as submissions do, with the authenticated
principal as the operator it records (never a name the caller typed). Reads
(ListSchedules, DescribeSchedule) answer from the store's state on any node: a
standby holds the schedules too. A schedule's next times are computed here, from
its spec, after now and after the last nominal time the log has decided, on the
node's clock (a test's fake clock too).

Occurrences page by position in the schedule's list (one per nominal time, oldest
first, appended as they are decided): "at:N" is where the next page starts, or,
newest first, where it ends.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from apollo11.scheduler.api import codec
from apollo11.scheduler.clock import Clock
from apollo11.scheduler.errors import InvalidArgumentError, NotFoundError
from apollo11.scheduler.nodeview import MAX_REASON, NodeView, leading_engine, optional, required
from apollo11.scheduler.schedules import EPOCH, nominal_times
from apollo11.scheduler.security import current_principal
from apollo11.scheduler.shell import SHELL_WORKFLOW
from apollo11.v1 import scheduler_pb2 as pb

if TYPE_CHECKING:
    from apollo11.scheduler.engine import Engine
    from apollo11.scheduler.state import ScheduleState

MAX_PAGE = 1000
DEFAULT_PAGE = 100
MAX_NEXT = 100
DEFAULT_NEXT = 5  # what a single schedule's answer shows; a listed one shows one
_TOKEN = "at:"
_AFTER = "after:"


class ScheduleCalls:
    """What the Scheduler service's schedule methods do (server.py delegates each)."""

    def __init__(
        self,
        node: NodeView,
        clock: Clock,
        read_json: Callable[[str, str], Any],
        state: Callable[[], Any],
    ) -> None:
        """`read_json(text, name)`: a JSON field within the node's limits; `state()`:
        the store's state now (NodeUnavailableError while it is reopened)."""
        self.node = node
        self.clock = clock
        self._read_json = read_json
        self._state = state

    def _engine(self) -> Engine:
        return leading_engine(self.node)

    def _schedule(self, schedule_id: str) -> ScheduleState:
        return _found(self._state(), schedule_id)

    def next_times(self, s: ScheduleState, count: int) -> list[datetime]:
        now = self.clock.now_ms()
        after = max(now, s.watermark_ms) if s.watermark_ms is not None else now
        return nominal_times(s.spec, EPOCH + timedelta(milliseconds=after), count=count)

    def _answer(self, s: ScheduleState, count: int = DEFAULT_NEXT) -> pb.Schedule:
        return codec.schedule_to_pb(s, self.next_times(s, count))

    # ------------------------------------------------------------------ writes

    async def create(self, r: pb.CreateScheduleRequest) -> pb.Schedule:
        schedule_id = required(r.schedule_id, "schedule_id")
        workflow = _workflow(required(r.workflow, "workflow"))
        if not r.HasField("spec"):
            raise InvalidArgumentError("spec is required: one of cron, every or at")
        spec = codec.spec_from_pb(r.spec)
        data = self._read_json(r.input_json, "input_json")
        note = optional(r.note, "note", MAX_REASON) or ""
        created = await self._engine().schedules.create(
            schedule_id, workflow, spec, data, note=note, operator=current_principal().name
        )
        return self._answer(created)

    async def update(self, r: pb.UpdateScheduleRequest) -> pb.Schedule:
        schedule_id = required(r.schedule_id, "schedule_id")
        engine = self._engine()
        changes: dict[str, Any] = {}
        if r.workflow:
            changes["workflow"] = _workflow(required(r.workflow, "workflow"))
        if r.HasField("spec"):
            changes["spec"] = codec.spec_updated(self._schedule(schedule_id).spec, r.spec)
        if r.HasField("input_json"):
            changes["input"] = self._read_json(r.input_json, "input_json")
        if r.HasField("note"):
            changes["note"] = optional(r.note, "note", MAX_REASON) or ""
        if not changes:
            raise InvalidArgumentError("nothing to update: give workflow, spec, input_json or note")
        updated = await engine.schedules.update(
            schedule_id, operator=current_principal().name, **changes
        )
        return self._answer(updated)

    async def pause(self, r: pb.PauseScheduleRequest) -> pb.Schedule:
        schedule_id = required(r.schedule_id, "schedule_id")
        note = optional(r.note, "note", MAX_REASON) or ""
        paused = await self._engine().schedules.pause(
            schedule_id, note=note, operator=current_principal().name
        )
        return self._answer(paused)

    async def unpause(self, r: pb.UnpauseScheduleRequest) -> pb.Schedule:
        schedule_id = required(r.schedule_id, "schedule_id")
        note = optional(r.note, "note", MAX_REASON) or ""
        resumed = await self._engine().schedules.unpause(
            schedule_id, note=note, operator=current_principal().name
        )
        return self._answer(resumed)

    async def trigger(self, r: pb.TriggerScheduleRequest) -> pb.TriggerScheduleResponse:
        schedule_id = required(r.schedule_id, "schedule_id")
        task_id = await self._engine().schedules.trigger(
            schedule_id, operator=current_principal().name
        )
        return pb.TriggerScheduleResponse(task_id=task_id)

    async def backfill(self, r: pb.BackfillScheduleRequest) -> pb.BackfillScheduleResponse:
        schedule_id = required(r.schedule_id, "schedule_id")
        start = _instant(r.from_time, "from_time")
        end = _instant(r.to_time, "to_time")
        started = await self._engine().schedules.backfill(
            schedule_id,
            start,
            end,
            overlap=r.overlap or "allow-all",
            operator=current_principal().name,
        )
        return pb.BackfillScheduleResponse(backfill_id=started.backfill_id, times=started.times)

    async def delete(self, r: pb.DeleteScheduleRequest) -> pb.DeleteScheduleResponse:
        schedule_id = required(r.schedule_id, "schedule_id")
        await self._engine().schedules.delete(schedule_id, operator=current_principal().name)
        return pb.DeleteScheduleResponse()

    # ------------------------------------------------------------------- reads

    def listed(self, r: pb.ListSchedulesRequest) -> pb.ListSchedulesResponse:
        size = _size(r.page_size, DEFAULT_PAGE, MAX_PAGE, "page_size")
        token = r.page_token
        if token and not token.startswith(_AFTER):
            raise InvalidArgumentError("page_token is not one this server issued")
        after = token.removeprefix(_AFTER)
        schedules: dict[str, ScheduleState] = self._state().schedules
        ids = sorted(i for i in schedules if i > after)
        page = ids[:size]
        return pb.ListSchedulesResponse(
            schedules=[self._answer(schedules[i], 1) for i in page],
            next_page_token=f"{_AFTER}{page[-1]}" if len(ids) > size else "",
        )

    def describe(self, r: pb.DescribeScheduleRequest) -> pb.DescribeScheduleResponse:
        size = _size(r.page_size, DEFAULT_PAGE, MAX_PAGE, "page_size")
        count = _size(r.next_count, DEFAULT_NEXT, MAX_NEXT, "next_count")
        s = self._schedule(required(r.schedule_id, "schedule_id"))
        held = s.occurrences
        n = len(held)
        at = _position(r.page_token, n)
        if r.newest_first:
            end = n if at is None else at
            start = max(0, end - size)
            page = held[start:end][::-1]
            more = f"{_TOKEN}{start}" if start > 0 else ""
        else:
            start = 0 if at is None else at
            end = min(n, start + size)
            page = held[start:end]
            more = f"{_TOKEN}{end}" if end < n else ""
        return pb.DescribeScheduleResponse(
            schedule=self._answer(s, count),
            occurrences=[codec.occurrence_to_pb(o) for o in page],
            next_page_token=more,
        )


def scheduled_tasks(state: Any, schedule_id: str) -> list[str]:
    """The tasks a schedule fired, by its recorded occurrences (ListTasks' filter)."""
    return [o.task_id for o in _found(state, schedule_id).occurrences if o.task_id]


def _found(state: Any, schedule_id: str) -> ScheduleState:
    found: ScheduleState | None = state.schedules.get(schedule_id)
    if found is None:
        raise NotFoundError(f"no schedule {schedule_id!r} (apollo11 schedule list)")
    return found


def _workflow(name: str) -> str:
    if name == SHELL_WORKFLOW:
        # A shell DAG runs commands on the nodes, and only where every node allows it,
        # checked at each submission: a schedule would submit one unasked, for ever.
        raise InvalidArgumentError(
            "workflow 'shell' cannot be scheduled: schedule a workflow whose steps run the commands"
        )
    return name


def _instant(text: str, name: str) -> datetime:
    """A backfill's bound: ISO-8601 with its offset (a wall-clock time would be read
    in which zone? the schedule's own may change before the backfill ends)."""
    value = required(text, name)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidArgumentError(
            f'{name} "{value}": not an ISO-8601 time (like 2025-06-01T03:00:00Z)'
        ) from None
    if moment.utcoffset() is None:
        raise InvalidArgumentError(f'{name} "{value}": needs a UTC offset (like Z or +02:00)')
    return moment.astimezone(UTC)


def _size(value: int, default: int, limit: int, name: str) -> int:
    if value > limit:
        raise InvalidArgumentError(f"{name} is {value}, over the limit of {limit}")
    return value or default


def _position(token: str, held: int) -> int | None:
    if not token:
        return None
    text = token.removeprefix(_TOKEN)
    if token == text or not text.isdigit() or int(text) > held:
        raise InvalidArgumentError("page_token is not one this server issued")
    return int(text)
