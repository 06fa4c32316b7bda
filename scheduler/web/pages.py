"""The operator's pages: server-rendered HTML, no front-end build step.

Every page reads the node's live state (a standby shows its own, with its
applied position). Actions (retry, skip, cancel) ask for a reason and a
confirmation and produce the same audited events as the CLI: on the primary
through its engine, on a standby forwarded to the primary over gRPC.
"""

from __future__ import annotations

import datetime
import getpass
import os
import time
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape

from scheduler.errors import ApolloError, FailedPreconditionError, NotFoundError
from scheduler.replay import TaskStatus
from scheduler.web import timeline

if TYPE_CHECKING:
    from scheduler.node import Node

HERE = os.path.dirname(__file__)
LIST_LIMIT = 200
EVENTS_PAGE = 200
TIMELINE_EVENTS = 2_000


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
    return env


def add_pages(app: FastAPI, node: Node) -> None:
    env = make_env()
    app.mount("/static", StaticFiles(directory=os.path.join(HERE, "static")), name="static")

    def render(name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        ctx.setdefault("node_id", node.settings.node_id)
        ctx.setdefault("role", node.role)
        return HTMLResponse(env.get_template(name).render(**ctx), status_code=status)

    def state() -> Any:
        assert node.store is not None
        return node.store.state

    def recent(status: str | None = None, workflow: str = "") -> list[Any]:
        rows: list[Any] = state().list_filtered(status, workflow, None, LIST_LIMIT)[0]
        return rows

    @app.get("/", response_class=HTMLResponse)
    async def cluster(request: Request) -> HTMLResponse:
        return render(
            "cluster.html",
            s=node.status(),
            tasks=recent()[:20],
            message=request.query_params.get("message"),
        )

    @app.get("/tasks", response_class=HTMLResponse)
    async def tasks(request: Request, workflow: str = "") -> HTMLResponse:
        st = (request.query_params.get("state") or "").upper()
        if st and st not in TaskStatus.__members__:
            return render(
                "tasks.html",
                400,
                tasks=[],
                states=list(TaskStatus.__members__),
                state="",
                workflow=workflow,
                limit=LIST_LIMIT,
                error=f"state {st!r} is not a task state",
            )
        return render(
            "tasks.html",
            tasks=recent(st or None, workflow),
            states=list(TaskStatus.__members__),
            state=st,
            workflow=workflow,
            limit=LIST_LIMIT,
        )

    @app.get("/tasks/{task_id}", response_class=HTMLResponse)
    async def task(task_id: str, request: Request, as_of: str = "") -> HTMLResponse:
        q = request.query_params
        at: int | None = None
        if as_of.strip():
            if not as_of.strip().isdigit():
                return render("base.html", 400, error="as_of must be an event id (a number)")
            at = int(as_of)
            durable = node.durable_id()
            if at > durable:
                return render(
                    "base.html", 400, error=f"as of event {at}: the log ends at {durable}"
                )
            t = await node.task_at(task_id, at)
        else:
            t = state().peek(task_id)
        if t is None:
            where = f" as of event {at}" if at else ""
            return render("base.html", 404, error=f"no task {task_id!r}{where}")
        assert node.store is not None
        # the timeline of the first TIMELINE_EVENTS events (the page stays cheap)
        events = node.store.task_events(t, to_id=at or None, limit=TIMELINE_EVENTS)[0]
        bars = timeline.bars(events)
        svg = timeline.layout(list(t.steps), bars, int(time.time() * 1000))
        return render(
            "task.html",
            t=t,
            svg=svg,
            as_of=at,
            operator=_default_operator(),
            message=q.get("message"),
            error=q.get("error"),
        )

    @app.get("/events", response_class=HTMLResponse)
    async def events(request: Request) -> HTMLResponse:
        assert node.store is not None
        log = node.store.log
        q = request.query_params
        task_id = q.get("task", "")
        raw_from = q.get("from", "")
        if raw_from and not raw_from.isdigit():
            return render("base.html", 400, error="from must be an event id (a number)")
        durable = log.durable_id
        if task_id:
            t = state().peek(task_id)
            if t is None:
                return render("base.html", 404, error=f"no task {task_id!r}")
            rows, nxt = node.store.task_events(t, int(raw_from or 0), durable, EVENTS_PAGE)
            prev = None
        else:
            start = int(raw_from) if raw_from else max(log.first_id, durable - EVENTS_PAGE + 1)
            start = max(start, log.first_id, 1)
            end = min(durable, start + EVENTS_PAGE - 1)
            rows = list(log.read(start, end)) if start <= durable else []
            nxt = end + 1 if end < durable else 0
            prev = max(log.first_id, start - EVENTS_PAGE) if start > log.first_id else None
        return render("events.html", events=rows, durable=durable, task=task_id, nxt=nxt, prev=prev)

    async def act(
        task_id: str, action: str, step: str, operator: str, reason: str, confirm: str
    ) -> Response:
        if confirm != "yes":
            return _back(task_id, error="tick 'I am sure' to confirm")
        if not reason.strip() or not operator.strip():
            return _back(task_id, error="an operator and a reason are required")
        try:
            event_id = await _perform(node, task_id, action, step, operator.strip(), reason.strip())
        except (NotFoundError, FailedPreconditionError, ApolloError) as e:
            return _back(task_id, error=f"{action} refused: {e}")
        what = f"{action} of {step}" if step else action
        return _back(task_id, message=f"{what} recorded as event {event_id} by {operator}")

    @app.post("/tasks/{task_id}/retry")
    async def retry(
        task_id: str,
        step: str = Form(""),
        operator: str = Form(""),
        reason: str = Form(""),
        confirm: str = Form(""),
    ) -> Response:
        return await act(task_id, "retry", step, operator, reason, confirm)

    @app.post("/tasks/{task_id}/skip")
    async def skip(
        task_id: str,
        step: str = Form(""),
        operator: str = Form(""),
        reason: str = Form(""),
        confirm: str = Form(""),
    ) -> Response:
        return await act(task_id, "skip", step, operator, reason, confirm)

    @app.post("/tasks/{task_id}/cancel")
    async def cancel(
        task_id: str, operator: str = Form(""), reason: str = Form(""), confirm: str = Form("")
    ) -> Response:
        return await act(task_id, "cancel", "", operator, reason, confirm)


def _back(task_id: str, *, message: str = "", error: str = "") -> RedirectResponse:
    from urllib.parse import quote

    q = f"message={quote(message)}" if message else f"error={quote(error)}"
    return RedirectResponse(f"/tasks/{quote(task_id)}?{q}", status_code=303)


def _default_operator() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return ""


async def _perform(
    node: Node, task_id: str, action: str, step: str, operator: str, reason: str
) -> int:
    """The same audited events as the CLI: the engine on the primary, else gRPC to it."""
    engine = node.engine
    if node.role == "primary" and engine is not None and engine.leading:
        if action == "retry":
            return (
                await engine.retry_step(task_id, step, operator=operator, reason=reason)
            ).event_id
        if action == "skip":
            return (
                await engine.skip_step(task_id, step, operator=operator, reason=reason)
            ).event_id
        return (await engine.cancel_task(task_id, operator=operator, reason=reason)).event_id
    leader = node.leader
    if leader is None:
        raise FailedPreconditionError("no primary is known right now; try again shortly")
    from scheduler.client import Client

    async with Client(leader.address, retries=1) as c:
        if action == "retry":
            return await c.retry_step(task_id, step, operator=operator, reason=reason)
        if action == "skip":
            return await c.skip_step(task_id, step, operator=operator, reason=reason)
        return await c.cancel(task_id, operator=operator, reason=reason)
