"""The operator's pages: server-rendered HTML, no front-end build step.

Every page reads the node's live state (a standby shows its own, with its
applied position). Actions (retry, skip, cancel, hold, release, redact) ask for
a reason and a confirmation (a redaction, which cannot be undone: the task id
typed again) and produce the same audited events as the CLI: on the primary
through its engine, on a standby forwarded to the primary over gRPC with the
session's token, so either way the event names the signed-in principal (and
the display name typed beside it). guard.py decides who may read and act;
scheduler/nodeview/actions.py checks and does the action, as for gRPC, and
scheduler/nodeview/listing.py reads tasks and pages of events for both.
The Schedules pages are schedules.py's, the Limits page limits.py's.
"""

from __future__ import annotations

import datetime
import getpass
import os
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from fastapi import FastAPI, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape

from apollo11.scheduler import stepwords, waits
from apollo11.scheduler.errors import ApolloError, BucketError, NotFoundError
from apollo11.scheduler.flow import DEFAULT_PRIORITY
from apollo11.scheduler.nodeview import (
    ACTION_KINDS,
    MAX_REASON,
    ActionKind,
    BeyondTheLog,
    NodeView,
    blocked,
    operator_action,
    perform,
    read_events,
    task_as_of,
    task_now,
    waiting,
)
from apollo11.scheduler.state import TaskStatus
from apollo11.scheduler.taskname import ListedNames, task_name
from apollo11.scheduler.web import attempts, timeline
from apollo11.scheduler.web.flash import Notice
from apollo11.scheduler.web.guard import Gate, LoginRequired, PageRefused, may, needed
from apollo11.scheduler.web.limits import add_limit_pages
from apollo11.scheduler.web.login import add_login
from apollo11.scheduler.web.schedules import add_schedule_pages, fired_by

if TYPE_CHECKING:
    from apollo11.scheduler.state import Store

HERE = os.path.dirname(__file__)
LIST_LIMIT = 200
SHELL_NAMES = 10_000  # shell tasks' names kept for the lists (a few hundred KB)
EVENTS_PAGE = 200
TIMELINE_EVENTS = 2_000
ACT = "/tasks/{task_id}/{kind}"  # the actions' route (its role: security/roles.py)


def _clock(ms: int | None) -> str:
    if not ms:
        return ""
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def make_env() -> Environment:
    env = Environment(
        loader=FileSystemLoader(os.path.join(HERE, "templates")),
        autoescape=select_autoescape(["html"]),
    )
    env.filters["clock"] = _clock
    env.filters["who"] = timeline.who
    env.filters["wait_words"] = waits.describe
    env.globals["spawned"] = waits.spawned
    env.globals["words"] = stepwords  # a step as `apollo11 task` says it
    env.globals["task_name"] = task_name
    return env


def add_pages(app: FastAPI, node: NodeView, gate: Gate) -> None:
    env = make_env()
    # Open to all: the login page needs it, and it is the same for everyone.
    app.mount("/static", StaticFiles(directory=os.path.join(HERE, "static")), name="static")

    def render(name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        ctx.setdefault("node_id", node.settings.node_id)
        ctx.setdefault("role", node.role)
        ctx.setdefault("viewer", None)
        return HTMLResponse(env.get_template(name).render(**ctx), status_code=status)

    @app.exception_handler(LoginRequired)
    async def to_login(request: Request, exc: LoginRequired) -> Response:
        return RedirectResponse(f"/login?next={quote(exc.next_url, safe='')}", status_code=303)

    @app.exception_handler(PageRefused)
    async def refused(request: Request, exc: PageRefused) -> Response:
        return render("base.html", exc.status, error=exc.message, viewer=gate.viewer(request))

    add_login(app, gate, render)
    add_schedule_pages(app, node, gate, render)
    add_limit_pages(app, node, gate, render)

    def store() -> Store:
        assert node.store is not None
        return node.store

    def state() -> Any:
        return store().state

    def recent(status: str | None = None, workflow: str = "") -> list[Any]:
        rows: list[Any] = state().list_filtered(status, workflow, None, LIST_LIMIT)[0]
        return rows

    listed = ListedNames(SHELL_NAMES)

    def names(rows: list[Any]) -> dict[str, str]:
        return listed.of(rows, state().peek)

    @app.get("/", response_class=HTMLResponse)
    async def cluster(request: Request) -> HTMLResponse:
        viewer = gate.reader(request)
        rows = recent()[:20]
        return render("cluster.html", viewer=viewer, s=node.status(), tasks=rows, names=names(rows))

    @app.get("/tasks", response_class=HTMLResponse)
    async def tasks(request: Request, workflow: str = "") -> HTMLResponse:
        viewer = gate.reader(request)
        q = request.query_params
        st = (q.get("state") or "").upper()
        prefix = (q.get("prefix") or "").strip()
        before = q.get("before") or None
        form = {
            "state": st,
            "workflow": workflow,
            "prefix": prefix,
            "since": q.get("since") or "",
            "until": q.get("until") or "",
        }
        shown: dict[str, Any] = {
            "viewer": viewer,
            "states": list(TaskStatus.__members__),
            "limit": LIST_LIMIT,
            **form,
        }
        try:
            if st and st not in TaskStatus.__members__:
                raise ValueError(f"state {st!r} is not a task state")
            since = _utc_ms(form["since"], "since")
            until = _utc_ms(form["until"], "until")
        except ValueError as e:
            return render("tasks.html", 400, tasks=[], names={}, error=str(e), nxt=None, **shown)

        rows, nxt = state().list_filtered(
            st or None,
            workflow,
            before,
            LIST_LIMIT,
            prefix=prefix,
            since_ms=since,
            until_ms=until,
        )
        older = None
        if nxt is not None:
            older = "/tasks?" + urlencode({k: v for k, v in form.items() if v} | {"before": nxt})
        return render("tasks.html", tasks=rows, names=names(rows), nxt=older, **shown)

    @app.get("/tasks/{task_id}", response_class=HTMLResponse)
    async def task(task_id: str, request: Request, as_of: str = "") -> HTMLResponse:
        viewer = gate.reader(request)
        at: int | None = None
        if as_of.strip() and not as_of.strip().isdigit():
            return render(
                "base.html", 400, viewer=viewer, error="as_of must be an event id (a number)"
            )
        try:
            if as_of.strip():
                at = int(as_of)
                t = await task_as_of(node, task_id, at)
            else:
                t = await task_now(store(), task_id)
        except BeyondTheLog as e:
            error = f"as of event {e.at}: the log ends at {e.durable}"
            return render("base.html", 400, viewer=viewer, error=error)
        except NotFoundError as e:
            return render("base.html", 404, viewer=viewer, error=str(e))
        # the timeline and attempts of the first TIMELINE_EVENTS events (the page stays
        # cheap): the task's own events through its index, never a scan of the log
        # older than this node's disk (log retention): from the bucket, and it says so
        try:
            read = await read_events(store(), t, 0, at or 0, TIMELINE_EVENTS)
        except BucketError as e:
            return render("base.html", 503, viewer=viewer, error=f"the task's history: {e}")
        events, more = read.events, read.next_id
        redacted_at = await _redacted_at(store(), t, events)
        bars = timeline.bars(events)
        acts = timeline.actions(events)
        svg = timeline.layout(
            list(t.steps), bars, int(time.time() * 1000), acts, timeline.term_changes(events)
        )
        # the notice of the action that redirected here: from our own cookie, never the URL
        notice = gate.flash.take(request, f"/tasks/{task_id}")
        response = render(
            "task.html",
            viewer=viewer,
            can_act=may(viewer.principal, f"POST {ACT}"),
            act_role=needed(f"POST {ACT}"),
            t=t,
            blocked="" if at else blocked(node, task_id),
            waiting="" if at else waiting(node, task_id),
            # a task under flow control, or submitted with another priority than 3
            priority=None if t.flow is None else t.flow.get("priority", DEFAULT_PRIORITY),
            fired=fired_by(t.schedule, store().state.schedules),
            # a legal hold is the state's now (a past state does not keep one)
            hold=None if at else store().state.holds.get(task_id),
            redacted_at=redacted_at,
            svg=svg,
            acts=acts,
            tries=attempts.in_step_order(attempts.attempts(events), list(t.steps)),
            tries_cut=TIMELINE_EVENTS if more else 0,
            history=read.note,
            tail_chars=attempts.TAIL,
            as_of=at,
            display="" if gate.enabled else _default_display(),
            message=notice.message if notice else "",
            error=notice.error if notice else "",
        )
        if notice is not None:
            gate.flash.clear(response)
        return response

    @app.get("/events", response_class=HTMLResponse)
    async def events(request: Request) -> HTMLResponse:
        viewer = gate.reader(request)
        log = store().log
        q = request.query_params
        task_id = q.get("task", "")
        raw_from = q.get("from", "")
        if raw_from and not raw_from.isdigit():
            return render(
                "base.html", 400, viewer=viewer, error="from must be an event id (a number)"
            )
        prev = None
        if task_id:
            try:
                t = await task_now(store(), task_id)
            except NotFoundError as e:
                return render("base.html", 404, viewer=viewer, error=str(e))
            try:
                page = await read_events(store(), t, int(raw_from or 0), 0, EVENTS_PAGE)
            except BucketError as e:
                return render("base.html", 503, viewer=viewer, error=f"the task's events: {e}")
        else:
            # without a start, the log's last page (a start before this node's disk:
            # read from the bucket, when there is one)
            bottom = 1 if store().older is not None else log.first_id
            tail = max(log.first_id, log.durable_id - EVENTS_PAGE + 1)
            start = max(int(raw_from) if raw_from else tail, bottom, 1)
            try:
                page = await read_events(store(), None, start, 0, EVENTS_PAGE)
            except BucketError as e:
                return render("base.html", 503, viewer=viewer, error=f"the event log: {e}")
            if start > bottom:
                prev = max(bottom, start - EVENTS_PAGE)
        return render(
            "events.html",
            viewer=viewer,
            events=page.events,
            durable=page.durable,
            task=task_id,
            nxt=page.next_id,
            prev=prev,
            history=page.note,
        )

    async def act(
        request: Request,
        task_id: str,
        kind: ActionKind,
        step: str,
        display: str,
        reason: str,
        confirm: str,
        csrf: str,
    ) -> Response:
        # before anything else: a forged or cross-site post is refused whole (403)
        viewer = gate.actor(request, csrf)
        if kind == "redact" and confirm.strip() != task_id:
            # it cannot be undone: the id typed again, not a tick made out of habit
            error = f"type the task id ({task_id}) to confirm: a redaction cannot be undone"
            return _back(gate, task_id, error=error)
        if kind != "redact" and confirm != "yes":
            return _back(gate, task_id, error="tick 'I am sure' to confirm")
        if not reason.strip() and kind != "release":
            return _back(gate, task_id, error=f"reason is required (up to {MAX_REASON} characters)")
        shown = display.strip() or None
        if shown == viewer.principal.name:
            shown = None  # the engine keeps no "as" that repeats the principal
        try:
            op = operator_action(
                kind, task_id, step=step, reason=reason.strip(), display=shown or ""
            )
            event_id = await perform(node, op, operator=viewer.principal.name, token=viewer.token)
        except ApolloError as e:
            return _back(gate, task_id, error=f"{kind} refused: {e}")
        # op's display, not the form's: a hold keeps none (its event records `by` only)
        who = timeline.who({"operator": viewer.principal.name, "as": op.display})
        return _back(
            gate, task_id, message=f"{op.describe()} recorded as event {event_id} by {who}"
        )

    # One route for the actions: the form differs only in its step field (only retry
    # and skip have one) and the kind in the path; any other kind is 404. The route's
    # role is each kind's RPC's (tests/web/test_routes.py holds them equal).
    @app.post(ACT)
    async def action(
        request: Request,
        task_id: str,
        kind: str,
        step: str = Form(""),
        display: str = Form(""),
        reason: str = Form(""),
        confirm: str = Form(""),
        csrf: str = Form(""),
    ) -> Response:
        which = ACTIONS.get(kind)
        if which is None:
            raise HTTPException(status_code=404)
        if which not in ("retry", "skip"):
            step = ""
        return await act(request, task_id, which, step, display, reason, confirm, csrf)


ACTIONS: dict[str, ActionKind] = {k: k for k in ACTION_KINDS}


def _back(gate: Gate, task_id: str, *, message: str = "", error: str = "") -> RedirectResponse:
    """Back to the task's page, with the notice in a signed cookie (flash.py): a
    notice in the query string would let any link speak as the node."""
    response = RedirectResponse(f"/tasks/{quote(task_id)}", status_code=303)
    gate.flash.set(response, f"/tasks/{task_id}", Notice(message=message, error=error))
    return response


async def _redacted_at(store: Store, t: Any, events: list[Any]) -> int | None:
    """When the task was redacted (its TASK_REDACTED's time), None if it was not: from
    the page's events when they reach it, else that one event read."""
    if t.redacted is None:
        return None
    rid = int(t.redacted["event_id"])
    found = [e for e in events if e.event_id == rid]
    if not found:
        try:
            found = (await read_events(store, t, rid, rid, 1)).events
        except BucketError:
            return None  # the page still says who and why; only the time is missing
    return int(found[0].timestamp) if found else None


def _default_display() -> str:
    """On an open loopback node everyone is "anonymous": the local user's name, shown
    beside it, at least says who sat at the machine."""
    try:
        return getpass.getuser()
    except Exception:
        return ""


def _utc_ms(text: str, what: str) -> int | None:
    """A `since`/`until` filter: an ISO 8601 date or time (UTC unless it says), in ms."""
    if not text.strip():
        return None
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{what} must be an ISO 8601 date or time (2026-12-01 or 2026-12-01T17:30), "
            f"got {text!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)
