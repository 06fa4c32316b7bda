"""Schedules: `schedule create|list|describe|update|pause|unpause|trigger|backfill|
delete|next`.

The node checks every field of a spec and refuses a bad one naming it and why
(`cron "61 * * * *": minute 61 is outside 0-59`): the command sends what it was
given, so that its words and the API's are the same. `next` alone computes here,
from the spec `describe` returns (the schedules' pure part, loaded by that command
only), so it can list more times than a node's answer carries.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import typer

from apollo11.scheduler.cli._output import escape
from apollo11.scheduler.cli._shared import (
    AsJson,
    Grid,
    Server,
    client,
    fail,
    out,
    print_json,
    read_json,
    run,
)

LIST_PAGE = 1000  # the server's limit per ListSchedules and DescribeSchedule page
SHOWN = 20  # occurrences `describe` prints by default (--json: every one)

ScheduleId = Annotated[str, typer.Argument(help="The schedule's id.", show_default=False)]
Cron = Annotated[
    str | None, typer.Option("--cron", help='Five fields or an alias: "0 3 * * *", @daily.')
]
Every = Annotated[str | None, typer.Option("--every", help="Elapsed time: 90s, 15m, 1h30m, 2d.")]
At = Annotated[
    str | None,
    typer.Option("--at", help="Once, ISO-8601 (without an offset: a wall-clock time in --tz)."),
]
Tz = Annotated[str | None, typer.Option("--tz", help="IANA zone of --cron and --at (default UTC).")]
Input = Annotated[str | None, typer.Option("--input", help="JSON, or @file with JSON.")]
OverlapOpt = Annotated[
    str | None,
    typer.Option(
        "--overlap",
        help="While the previous one runs: skip (default), buffer-one, buffer-all, "
        "cancel-other, allow-all.",
    ),
]
CatchupWindow = Annotated[
    str | None,
    typer.Option("--catchup-window", help="How late one may start (default 1d); older: missed."),
]
Jitter = Annotated[
    str | None, typer.Option("--jitter", help="Start each up to this much late (default 0s).")
]
Start = Annotated[
    str | None,
    typer.Option("--start", help="No time before this (ISO-8601 with an offset: Z, +02:00)."),
]
End = Annotated[
    str | None,
    typer.Option("--end", help="No time after this (ISO-8601 with an offset: Z, +02:00)."),
]
NonexistentOpt = Annotated[
    str | None,
    typer.Option("--nonexistent", help="A local time in a DST gap: next (default), skip."),
]
AmbiguousOpt = Annotated[
    str | None,
    typer.Option(
        "--ambiguous", help="A local time that occurs twice: first (default), last, both."
    ),
]
Note = Annotated[str | None, typer.Option("--note", help="Kept on the schedule and its event.")]


def _spec(**given: str | None) -> dict[str, str | None]:
    """The spec's flags, checked for one `when` at most (the node checks the rest)."""
    when = [f"--{name}" for name in ("cron", "every", "at") if given.get(name) is not None]
    if len(when) > 1:
        raise fail(f"give one of --cron, --every or --at, not {' and '.join(when)}", 2)
    return given


def create(
    schedule_id: ScheduleId,
    workflow: Annotated[
        str, typer.Option("--workflow", help="The workflow each time submits.", show_default=False)
    ],
    cron: Cron = None,
    every: Every = None,
    at: At = None,
    tz: Tz = None,
    input: Input = None,
    overlap: OverlapOpt = None,
    catchup_window: CatchupWindow = None,
    jitter: Jitter = None,
    start: Start = None,
    end: End = None,
    nonexistent: NonexistentOpt = None,
    ambiguous: AmbiguousOpt = None,
    note: Note = None,
    server: Server = None,
    as_json: AsJson = False,
) -> None:
    """Create a schedule: its workflow submitted at each time of --cron, --every or --at."""
    spec = _spec(
        cron=cron,
        every=every,
        at=at,
        tz=tz,
        overlap=overlap,
        catchup_window=catchup_window,
        jitter=jitter,
        start=start,
        end=end,
        nonexistent=nonexistent,
        ambiguous=ambiguous,
    )
    if cron is None and every is None and at is None:
        raise fail("give one of --cron, --every or --at", 2)
    data = read_json(input)

    async def go() -> Any:
        async with client(server) as c:
            return await c.create_schedule(schedule_id, workflow, data, note=note or "", **spec)

    _done(run(go()), "created", as_json)


def update(
    schedule_id: ScheduleId,
    workflow: Annotated[str | None, typer.Option("--workflow", help="Another workflow.")] = None,
    cron: Cron = None,
    every: Every = None,
    at: At = None,
    tz: Tz = None,
    input: Input = None,
    overlap: OverlapOpt = None,
    catchup_window: CatchupWindow = None,
    jitter: Jitter = None,
    start: Annotated[
        str | None,
        typer.Option(
            "--start", help='No time before this (with an offset: Z, +02:00); "" removes it.'
        ),
    ] = None,
    end: Annotated[
        str | None,
        typer.Option(
            "--end", help='No time after this (with an offset: Z, +02:00); "" removes it.'
        ),
    ] = None,
    nonexistent: NonexistentOpt = None,
    ambiguous: AmbiguousOpt = None,
    note: Note = None,
    server: Server = None,
    as_json: AsJson = False,
) -> None:
    """Change a schedule: what is given changes, the rest stays."""
    spec = _spec(
        cron=cron,
        every=every,
        at=at,
        tz=tz,
        overlap=overlap,
        catchup_window=catchup_window,
        jitter=jitter,
        start=start,
        end=end,
        nonexistent=nonexistent,
        ambiguous=ambiguous,
    )
    changes: dict[str, Any] = {"workflow": workflow, "note": note, **spec}
    if input is not None:
        changes["input"] = read_json(input)
    if all(v is None for v in changes.values()):
        raise fail("nothing to update: give a field to change (apollo11 schedule update --help)", 2)

    async def go() -> Any:
        async with client(server) as c:
            return await c.update_schedule(schedule_id, **changes)

    _done(run(go()), "updated", as_json)


def pause(
    schedule_id: ScheduleId, note: Note = None, server: Server = None, as_json: AsJson = False
) -> None:
    """Pause a schedule: its times are recorded skipped until it is unpaused."""

    async def go() -> Any:
        async with client(server) as c:
            return await c.pause_schedule(schedule_id, note=note or "")

    _done(run(go()), "paused", as_json)


def unpause(
    schedule_id: ScheduleId, note: Note = None, server: Server = None, as_json: AsJson = False
) -> None:
    """Unpause a schedule: it fires again from its next time."""

    async def go() -> Any:
        async with client(server) as c:
            return await c.unpause_schedule(schedule_id, note=note or "")

    _done(run(go()), "unpaused", as_json)


def trigger(schedule_id: ScheduleId, server: Server = None, as_json: AsJson = False) -> None:
    """Fire a schedule once now, beside its own times; prints the task id."""

    async def go() -> str:
        async with client(server) as c:
            return str(await c.trigger_schedule(schedule_id))

    task_id = run(go())
    if as_json:
        print_json({"id": schedule_id, "task_id": task_id})
    else:
        out.print(f"triggered {escape(schedule_id)}: task [bold]{escape(task_id)}[/bold]")


def backfill(
    schedule_id: ScheduleId,
    start: Annotated[
        str,
        typer.Option("--from", help="The first time, ISO-8601 with an offset.", show_default=False),
    ],
    end: Annotated[
        str,
        typer.Option(
            "--to", help="The last time (past), ISO-8601 with an offset.", show_default=False
        ),
    ],
    overlap: Annotated[
        str,
        typer.Option("--overlap", help="allow-all (all at once) or buffer-all (one by one)."),
    ] = "allow-all",
    server: Server = None,
    as_json: AsJson = False,
) -> None:
    """Fire a schedule's past times in a range that have not fired (20 a second)."""

    async def go() -> Any:
        async with client(server) as c:
            return await c.backfill_schedule(schedule_id, start, end, overlap=overlap)

    started = run(go())
    if as_json:
        print_json({"id": schedule_id, **started.to_json()})
        return
    out.print(
        f"backfill {started.backfill_id} of schedule [bold]{escape(schedule_id)}[/bold]: "
        f"{started.times:,} nominal times from {escape(start)} to {escape(end)}; those not "
        f"fired before fire, 20 a second (apollo11 tasks --schedule {escape(schedule_id)})"
    )


def delete(schedule_id: ScheduleId, server: Server = None, as_json: AsJson = False) -> None:
    """Delete a schedule: it fires no more (its tasks stay)."""

    async def go() -> None:
        async with client(server) as c:
            await c.delete_schedule(schedule_id)

    run(go())
    if as_json:
        print_json({"id": schedule_id, "deleted": True})
    else:
        out.print(f"deleted schedule {escape(schedule_id)}")


def list_(server: Server = None, as_json: AsJson = False) -> None:
    """List schedules: when, next time, last outcome, paused."""

    async def go() -> list[Any]:
        async with client(server) as c:
            rows: list[Any] = []
            token = ""
            while True:
                page = await c.list_schedules(page_size=LIST_PAGE, page_token=token)
                rows.extend(page.schedules)
                token = page.next_page_token
                if not token:
                    return rows

    rows = run(go())
    if as_json:
        print_json([s.to_json() for s in rows])
        return
    table = Grid("schedule", "workflow", "when", "tz", "next (UTC)", "last", "paused")
    for s in rows:
        last = "" if s.last is None else f"{s.last.outcome} {s.last.nominal_time}"
        table.add_row(
            s.schedule_id,
            s.workflow,
            s.spec.when,
            s.spec.tz,
            s.next[0] if s.next else "none",
            last,
            "paused" if s.paused else "",
        )
    table.show()


def describe(
    schedule_id: ScheduleId,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit", help=f"The last N occurrences (default {SHOWN}; with --json, all of them)."
        ),
    ] = None,
    server: Server = None,
    as_json: AsJson = False,
) -> None:
    """A schedule: its spec, next times (UTC and its zone) and occurrences."""
    if limit is not None and limit < 0:
        raise fail(f"--limit must be 0 or more, got {limit}", 2)
    want = limit if limit is not None else (None if as_json else SHOWN)

    async def go() -> tuple[Any, list[Any]]:
        async with client(server) as c:
            got: list[Any] = []
            token = ""
            if want is not None:  # the newest `want`, a page at a time, shown oldest first
                while True:
                    page = await c.describe_schedule(
                        schedule_id,
                        page_size=max(1, min(want - len(got), LIST_PAGE)),
                        page_token=token,
                        newest_first=True,
                    )
                    got.extend(page.occurrences)
                    token = page.next_page_token
                    if len(got) >= want or not token:
                        return page.schedule, got[:want][::-1]
            while True:
                page = await c.describe_schedule(schedule_id, page_size=LIST_PAGE, page_token=token)
                got.extend(page.occurrences)
                token = page.next_page_token
                if not token:
                    return page.schedule, got

    schedule, occurrences = run(go())
    if as_json:
        print_json({**schedule.to_json(), "occurrences": [o.to_json() for o in occurrences]})
        return
    _show(schedule)
    shown = f"the last {len(occurrences)} of " if len(occurrences) < schedule.occurrences else ""
    out.print(f"occurrences: {shown}{schedule.occurrences}")
    if occurrences:
        table = Grid("nominal time (UTC)", "outcome", "task", "reason")
        for o in occurrences:
            table.add_row(o.nominal_time, o.outcome, o.task_id or "", o.reason)
        table.show()


def next_(
    schedule_id: ScheduleId,
    count: Annotated[int, typer.Option("--count", help="How many times.")] = 10,
    server: Server = None,
    as_json: AsJson = False,
) -> None:
    """A schedule's next times, in UTC and in its zone (computed here, from its spec)."""
    if count < 1:
        raise fail(f"--count must be at least 1, got {count}", 2)

    async def go() -> Any:
        async with client(server) as c:
            return (await c.describe_schedule(schedule_id, page_size=1, next_count=1)).schedule

    schedule = run(go())
    from apollo11.scheduler.schedules import ScheduleSpec, nominal_times

    spec = ScheduleSpec.model_validate(schedule.spec.to_json())
    after = datetime.now().astimezone()
    if schedule.watermark is not None:
        after = max(after, datetime.fromisoformat(schedule.watermark))
    times = nominal_times(spec, after, count=count)
    zone = _zone(spec.tz)
    if as_json:
        print_json(
            {
                "id": schedule.schedule_id,
                "tz": spec.tz,
                "next": [{"utc": _utc(t), "local": t.astimezone(zone).isoformat()} for t in times],
            }
        )
        return
    if not times:
        out.print(f"{escape(schedule_id)}: no more times (the schedule is over)")
        return
    table = Grid("UTC", spec.tz) if spec.tz != "UTC" else Grid("UTC")
    for t in times:
        if spec.tz != "UTC":
            table.add_row(_utc(t), _local(t, zone))
        else:
            table.add_row(_utc(t))
    table.show()


def _done(schedule: Any, verb: str, as_json: bool) -> None:
    if as_json:
        print_json(schedule.to_json())
        return
    nxt = schedule.next[0] if schedule.next else "none"
    out.print(
        f"{verb} schedule [bold]{escape(schedule.schedule_id)}[/bold]: "
        f"{escape(schedule.spec.when)} ({escape(schedule.spec.tz)}), next {nxt}"
        + (" (paused)" if schedule.paused else "")
    )


def _show(s: Any) -> None:
    spec = s.spec
    zone = _zone(spec.tz)
    out.print(
        f"schedule [bold]{escape(s.schedule_id)}[/bold]: workflow {escape(s.workflow)}"
        f"{' [yellow]paused[/yellow]' if s.paused else ''}",
    )
    lines = [
        ("when", f"{spec.when} in {spec.tz}"),
        ("overlap", spec.overlap),
        ("catch-up", f"window {spec.catchup_window}, jitter {spec.jitter}"),
        ("DST", f"nonexistent {spec.nonexistent}, ambiguous {spec.ambiguous}"),
    ]
    if spec.start or spec.end:
        lines.append(("bounds", f"start {spec.start or '-'}, end {spec.end or '-'}"))
    if s.note:
        lines.append(("note", s.note))
    lines.append(("changed by", f"{s.by} ({s.source})"))
    for b in s.backfills:
        lines.append(
            ("backfill", f"{b.backfill_id}: {b.from_time} to {b.to_time}, {b.overlap}, by {b.by}")
        )
    for label, text in lines:
        out.print(f"  {label:<11} {text}", markup=False, highlight=False)
    if not s.next:
        out.print("  next        none (the schedule is over)")
    for i, t in enumerate(s.next):
        local = "" if spec.tz == "UTC" else f"  ({_local(datetime.fromisoformat(t), zone)})"
        out.print(f"  {'next' if i == 0 else '':<11} {t}{local}", markup=False, highlight=False)


def _zone(key: str) -> Any:
    from zoneinfo import ZoneInfo

    return ZoneInfo(key)


def _utc(t: datetime) -> str:
    from datetime import UTC

    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _local(t: datetime, zone: Any) -> str:
    return t.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z")
