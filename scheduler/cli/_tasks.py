"""Tasks once submitted: `tasks`, `task`, `events`, and the audited operator actions
`retry`, `skip`, `cancel` and `redact`."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import orjson
import typer

from apollo11.scheduler.cli._shared import (
    AsJson,
    Grid,
    Server,
    client,
    clock,
    err,
    fail,
    out,
    print_json,
    run,
)
from apollo11.scheduler.cli._show import EventLines, show_failures, show_task_view
from apollo11.scheduler.taskstatus import TaskStatus

TASK_STATES = tuple(s.value for s in TaskStatus)


def tasks(
    state: Annotated[str | None, typer.Option("--state", help=", ".join(TASK_STATES) + ".")] = None,
    workflow: Annotated[str, typer.Option("--workflow", help="Only this workflow.")] = "",
    schedule: Annotated[
        str, typer.Option("--schedule", help="Only the tasks this schedule fired.")
    ] = "",
    held: Annotated[
        bool, typer.Option("--held", help="Only the tasks under a legal hold (apollo11 hold).")
    ] = False,
    limit: Annotated[int, typer.Option("--limit", help="How many (newest first).")] = 50,
    server: Server = None,
    as_json: AsJson = False,
) -> None:
    """List tasks, newest first."""
    if state is not None:
        state = state.upper()
        if state not in TASK_STATES:
            raise fail(f"--state {state} is not a task state: one of {', '.join(TASK_STATES)}", 2)

    async def go() -> Any:
        async with client(server) as c:
            rows: list[Any] = []
            token = ""
            while len(rows) < limit:
                page = await c.tasks(
                    state=state,
                    workflow=workflow,
                    schedule=schedule,
                    page_size=min(1000, limit - len(rows)),
                    page_token=token,
                    held=held,
                )
                rows.extend(page.tasks)
                token = page.next_page_token
                if not token:
                    break
            return rows

    rows = run(go())
    if as_json:
        print_json([r.to_json() for r in rows])
        return
    table = Grid("task", "workflow", "state", "steps", "submitted", "updated")
    for r in rows:
        table.add_row(
            r.task_id,
            r.name or r.workflow,  # "shell nightly": a shell DAG under its own name
            r.state,
            f"{r.steps_done}/{r.steps_total}",
            clock(r.submitted_ms),
            clock(r.updated_ms),
        )
    table.show()


def task(
    task_id: Annotated[str, typer.Argument(help="The task id.")],
    as_of: Annotated[
        int, typer.Option("--as-of", help="Show it as of this event id (time travel).")
    ] = 0,
    server: Server = None,
    as_json: AsJson = False,
) -> None:
    """A task's steps: state, attempt, duration, error."""

    async def go() -> Any:
        async with client(server) as c:
            t = await c.task(task_id, as_of=as_of)
            return t, ([], "") if as_json else await _task_events(c, task_id, as_of)

    t, (evs, note) = run(go())
    if as_json:
        print_json(t.to_json())
    else:
        show_task_view(t)
        show_failures(evs)
        if note:
            err.print(f"({note})", markup=False)


FAILURES_SCAN = 5_000  # a task's events read for its failed attempts, at most


async def _task_events(c: Any, task_id: str, as_of: int) -> tuple[list[Any], str]:
    """The task's events up to `as_of` (0: all), the first FAILURES_SCAN of them; and
    where the older ones came from, when not the node's disk ("" otherwise)."""
    found: list[Any] = []
    nxt = 0
    note = ""
    while len(found) < FAILURES_SCAN:
        page = await c.events_page(task_id=task_id, from_id=nxt, to_id=as_of, limit=1000)
        found += page.events
        note = note or page.note
        if not page.next_id:
            break
        nxt = page.next_id
    return found, note


def events(
    task_id: Annotated[str, typer.Option("--task", help="Only this task's events.")] = "",
    from_id: Annotated[int, typer.Option("--from", help="Start at this event id.")] = 0,
    follow: Annotated[bool, typer.Option("--follow", help="Keep printing new events.")] = False,
    limit: Annotated[
        int, typer.Option("--limit", help="At most this many (without --follow).")
    ] = 100,
    server: Server = None,
    as_json: AsJson = False,
) -> None:
    """The event log: one task's, or a range; --follow tails it."""
    import asyncio

    def prefix(ev: Any) -> str:
        # one print, one line: grep and awk see the node and term beside the event
        task = f"{ev.task_id} " if ev.task_id and not task_id else ""
        return f"{ev.instance_id} t{ev.term} {task}"

    lines = EventLines(prefix)

    def show(ev: Any) -> None:
        if as_json:
            sys.stdout.write(orjson.dumps(ev.to_json()).decode() + "\n")
            sys.stdout.flush()
        else:
            lines.show(ev)

    async def go() -> None:
        async with client(server) as c:
            if follow and task_id:
                async for ev in c.watch(task_id):
                    if ev.event_id >= from_id:
                        show(ev)
                return
            nxt = from_id
            shown = 0
            noted = ""
            while True:
                got = await c.events_page(
                    task_id=task_id,
                    from_id=nxt,
                    limit=min(1000, max(1, limit - shown)) if not follow else 1000,
                )
                page, after = got.events, got.next_id
                if got.note and got.note != noted:  # once, before the events it is about
                    noted = got.note
                    err.print(f"({got.note})", markup=False)
                for ev in page:
                    show(ev)
                shown += len(page)
                if page:
                    nxt = page[-1].event_id + 1
                if after:
                    nxt = after
                if not follow and (not after or shown >= limit):
                    return
                if follow and not after:
                    await asyncio.sleep(0.5)

    try:
        run(go())
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


Reason = Annotated[str, typer.Option("--reason", help="Why (kept in the audit log).")]
Operator = Annotated[str | None, typer.Option("--operator", help="Who (default: your login name).")]


def _operator(value: str | None) -> str:
    import getpass

    return value or getpass.getuser()


def _act(action: str, server: str | None, **kw: Any) -> None:
    """An operator action through the client; prints the audit event's id."""

    async def go() -> int:
        async with client(server) as c:
            fn = {
                "retry": c.retry_step,
                "skip": c.skip_step,
                "cancel": c.cancel,
                "redact": c.redact,
            }[action]
            return int(await fn(**kw))

    out.print(f"{action} recorded as event {run(go())}")


def retry(
    task_id: Annotated[str, typer.Argument()],
    reason: Reason,
    step: Annotated[
        str,
        typer.Argument(help="The step; none: every step failed for good (resumes a PAUSED task)."),
    ] = "",
    operator: Operator = None,
    server: Server = None,
) -> None:
    """Run a failed step again, with fresh retry budgets (an audited event). Without a
    step: every step failed for good, which resumes a PAUSED task."""
    _act("retry", server, task_id=task_id, step=step, operator=_operator(operator), reason=reason)


def skip(
    task_id: Annotated[str, typer.Argument()],
    step: Annotated[str, typer.Argument()],
    reason: Reason,
    operator: Operator = None,
    server: Server = None,
) -> None:
    """Mark a step done without running it (an audited event)."""
    _act("skip", server, task_id=task_id, step=step, operator=_operator(operator), reason=reason)


def cancel(
    task_id: Annotated[str, typer.Argument()],
    reason: Reason,
    operator: Operator = None,
    server: Server = None,
) -> None:
    """Cancel a task: running steps stop, compensation follows (an audited event)."""
    _act("cancel", server, task_id=task_id, operator=_operator(operator), reason=reason)


def redact(
    task_id: Annotated[str, typer.Argument()],
    reason: Reason,
    operator: Operator = None,
    server: Server = None,
) -> None:
    """Remove a finished task's input and outputs on every node (an audited event;
    docs/archive.md, "Redaction")."""
    _act("redact", server, task_id=task_id, operator=_operator(operator), reason=reason)
