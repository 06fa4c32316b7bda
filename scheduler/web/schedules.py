"""The Schedules pages (issue 30, item 8): every schedule with its next times and last
outcome, one schedule with its recent occurrences, and an operator's pause, unpause
and trigger.

Reading is the node's own state, as on every page (a standby shows the schedules it
has applied). The next times are computed here from the spec by the same pure
function the primary fires by (`schedules.nominal_times`), after the wall clock: they
are shown, never acted on. A schedule's occurrences are the fold's list, oldest
first, which only grows; the page shows them newest first, a page at a time, by
their place in that list, so the link to an older page stays good as new ones come.

Acting: guard.py first (our own form's CSRF token and origin, role operator), then
the primary's engine, as the signed-in principal. A standby does not forward these
as it forwards a task's retry: the schedules' verbs have no RPC yet. It shows no
buttons and says where the primary is, and a post that reaches it anyway (a page
left open across a failover) is refused with the same words.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

from fastapi import FastAPI, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from apollo11.scheduler.errors import ApolloError
from apollo11.scheduler.nodeview import MAX_REASON, NodeView, leading_engine, optional
from apollo11.scheduler.schedules import EPOCH, in_words, in_zone, iso, nominal_times
from apollo11.scheduler.web.flash import Notice
from apollo11.scheduler.web.guard import Gate, may, needed

if TYPE_CHECKING:
    from apollo11.scheduler.schedules import ScheduleSpec
    from apollo11.scheduler.state import OccurrenceRecord, ScheduleState

Render = Callable[..., HTMLResponse]
ScheduleAction = Literal["pause", "unpause", "trigger"]
SCHEDULE_ACTIONS: tuple[ScheduleAction, ...] = ("pause", "unpause", "trigger")
ACT = "/schedules/{schedule_id}/{kind}"  # the actions' route (its role: security/roles.py)
LIST_LIMIT = 200  # schedules a page, by id
OCCURRENCES_PAGE = 100
NEXT_LISTED = 1  # next times on the list: each costs a few µs, 10,000 schedules a page
NEXT_SHOWN = 5  # on a schedule's own page


@dataclass(frozen=True, slots=True)
class When:
    """An instant as the pages show it: in UTC, and on the schedule's wall clock."""

    utc: str
    local: str


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One row of a schedule's page."""

    index: int  # its place in the schedule's list, oldest first
    nominal: When
    outcome: str
    reason: str
    task_id: str | None


@dataclass(frozen=True, slots=True)
class Listed:
    """One row of /schedules."""

    schedule_id: str
    workflow: str
    words: str
    paused: bool
    next: tuple[When, ...]
    last: Occurrence | None


@dataclass(frozen=True, slots=True)
class FiredBy:
    """The task page's line for a task a schedule fired: the occurrence it is."""

    schedule_id: str
    nominal: str  # ISO-8601 UTC
    local: str  # the nominal time in the schedule's zone; "" for UTC or a deleted one
    triggered: bool
    exists: bool  # the schedule is still there (its page can be linked)


def fired_by(fired: dict[str, Any] | None, schedules: dict[str, ScheduleState]) -> FiredBy | None:
    """What the task's `schedule` field says, in the schedule's zone while it exists."""
    if fired is None:
        return None
    sid = str(fired["id"])
    instant = _instant(int(fired["nominal_ms"]))
    s = schedules.get(sid)
    local = when(instant, s.spec).local if s is not None and s.spec.tz != "UTC" else ""
    return FiredBy(sid, iso(instant), local, bool(fired.get("triggered")), s is not None)


def when(instant: datetime, spec: ScheduleSpec) -> When:
    local = in_zone(instant, spec)
    return When(iso(instant), local.strftime("%Y-%m-%d %H:%M:%S %Z"))


def next_times(spec: ScheduleSpec, now: datetime, count: int) -> tuple[When, ...]:
    """The schedule's next `count` nominal times after `now` (none: it is over)."""
    return tuple(when(t, spec) for t in nominal_times(spec, now, count=count))


def occurrence(s: ScheduleState, index: int, o: OccurrenceRecord) -> Occurrence:
    return Occurrence(index, when(_instant(o.nominal_ms), s.spec), o.outcome, o.reason, o.task_id)


def listed(s: ScheduleState, now: datetime) -> Listed:
    n = len(s.occurrences)
    last = occurrence(s, n - 1, s.occurrences[-1]) if n else None
    nxt = next_times(s.spec, now, NEXT_LISTED)
    return Listed(s.schedule_id, s.workflow, in_words(s.spec), s.paused, nxt, last)


def recent(
    s: ScheduleState, before: int | None, size: int = OCCURRENCES_PAGE
) -> tuple[list[Occurrence], int | None]:
    """A page of occurrences, newest first, of those before place `before` (None: the
    newest); and the place to ask for the next, older page (None: this is the last)."""
    n = len(s.occurrences)
    end = n if before is None else max(0, min(before, n))
    start = max(0, end - size)
    rows = [occurrence(s, i, s.occurrences[i]) for i in range(end - 1, start - 1, -1)]
    return rows, (start if start > 0 else None)


def add_schedule_pages(app: FastAPI, node: NodeView, gate: Gate, render: Render) -> None:
    def schedules() -> dict[str, ScheduleState]:
        assert node.store is not None
        found: dict[str, ScheduleState] = node.store.state.schedules
        return found

    def elsewhere() -> str:
        """Why this node takes no action now, and where to go ("" on the primary)."""
        engine = node.engine
        if engine is not None and engine.leading:
            return ""
        return str(node.not_leader())

    @app.get("/schedules", response_class=HTMLResponse)
    async def schedule_list(request: Request, after: str = "") -> HTMLResponse:
        viewer = gate.reader(request)
        known = schedules()
        ids = sorted(i for i in known if i > after)
        now = datetime.now(UTC)
        rows = [listed(known[i], now) for i in ids[:LIST_LIMIT]]
        more = ids[LIST_LIMIT - 1] if len(ids) > LIST_LIMIT else None
        return render(
            "schedules.html",
            viewer=viewer,
            rows=rows,
            total=len(known),
            after=after,
            more=more,
            limit=LIST_LIMIT,
        )

    @app.get("/schedules/{schedule_id}", response_class=HTMLResponse)
    async def schedule_page(request: Request, schedule_id: str, before: str = "") -> HTMLResponse:
        viewer = gate.reader(request)
        if before.strip() and not before.strip().isdigit():
            return render("base.html", 400, viewer=viewer, error="before must be a number")
        s = schedules().get(schedule_id)
        if s is None:
            return render("base.html", 404, viewer=viewer, error=f"no schedule {schedule_id!r}")
        rows, older = recent(s, int(before) if before.strip() else None)
        path = f"/schedules/{schedule_id}"
        # the notice of the action that redirected here: from our own cookie, never the URL
        notice = gate.flash.take(request, path)
        response = render(
            "schedule.html",
            viewer=viewer,
            s=s,
            words=in_words(s.spec),
            spec_json=s.spec.to_json(),
            next=next_times(s.spec, datetime.now(UTC), NEXT_SHOWN),
            watermark=_at_ms(s.watermark_ms, s.spec),
            created=_at_ms(s.created_ms, s.spec),
            updated=_at_ms(s.updated_ms, s.spec),
            rows=rows,
            total=len(s.occurrences),
            newest=not before.strip(),
            older=older,
            page_size=OCCURRENCES_PAGE,
            can_act=may(viewer.principal, f"POST {ACT}"),
            act_role=needed(f"POST {ACT}"),
            elsewhere=elsewhere(),
            message=notice.message if notice else "",
            error=notice.error if notice else "",
        )
        if notice is not None:
            gate.flash.clear(response)
        return response

    @app.post(ACT)
    async def schedule_action(
        request: Request, schedule_id: str, kind: str, note: str = Form(""), csrf: str = Form("")
    ) -> Response:
        # before anything else: a forged or cross-site post is refused whole (403)
        viewer = gate.actor(request, csrf)
        if kind not in SCHEDULE_ACTIONS:
            raise HTTPException(status_code=404)
        operator = viewer.principal.name
        try:
            said = await act(node, kind, schedule_id, operator=operator, note=note)
        except ApolloError as e:
            return _back(gate, schedule_id, error=f"{kind} refused: {e}")
        return _back(gate, schedule_id, message=said)


async def act(node: NodeView, kind: str, schedule_id: str, *, operator: str, note: str = "") -> str:
    """Do `kind` on the primary's engine as `operator`; the sentence the notice shows.
    On a standby, the refusal (NotLeaderError) names the primary."""
    engine = leading_engine(node)
    if kind == "trigger":
        task_id = await engine.schedules.trigger(schedule_id, operator=operator)
        return f"triggered by {operator}: task {task_id}"
    text = optional(note.strip(), "note", MAX_REASON) or ""
    pause = kind == "pause"
    assert node.store is not None
    before = node.store.state.schedules.get(schedule_id)
    was = before is not None and before.paused == pause  # the engine then writes nothing
    if pause:
        await engine.schedules.pause(schedule_id, note=text, operator=operator)
    else:
        await engine.schedules.unpause(schedule_id, note=text, operator=operator)
    done = "paused" if pause else "unpaused"
    return f"already {done}: nothing recorded" if was else f"{done} by {operator}"


def _at_ms(ms: int | None, spec: ScheduleSpec) -> When | None:
    return when(_instant(ms), spec) if ms else None


def _instant(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


def _back(gate: Gate, schedule_id: str, *, message: str = "", error: str = "") -> Response:
    """Back to the schedule's page, with the notice in a signed cookie (flash.py)."""
    response = RedirectResponse(f"/schedules/{quote(schedule_id)}", status_code=303)
    gate.flash.set(response, f"/schedules/{schedule_id}", Notice(message=message, error=error))
    return response
