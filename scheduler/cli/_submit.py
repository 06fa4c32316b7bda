"""What creates work: `submit`, `submit-many` and `event send`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer

from apollo11.scheduler.cli._shared import (
    AsJson,
    Server,
    client,
    fail,
    out,
    print_json,
    read_json,
    run,
)
from apollo11.scheduler.cli._show import EventLines, show_task_view

SUBMIT_BATCH = 1000  # the server's limit per SubmitTasks call
PRIORITIES = range(1, 6)  # 1 first; none given: the node's default, 3
SUBMIT_BATCH_BYTES = 8 * 1024 * 1024


def submit(
    workflow: Annotated[str, typer.Argument(help="A workflow name, or 'shell' for a JSON DAG.")],
    input: Annotated[str | None, typer.Option("--input", help="JSON, or @file with JSON.")] = None,
    idempotency_key: Annotated[
        str | None, typer.Option("--idempotency-key", help="The same key returns the same task.")
    ] = None,
    priority: Annotated[
        int | None,
        typer.Option(
            "--priority", help="1 (first) to 5 among tasks waiting for a slot; default 3."
        ),
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Show progress; exit 1 unless it succeeds.")
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option("--quiet", "-q", help="Print the task id alone: tid=$(apollo11 submit -q …)."),
    ] = False,
    server: Server = None,
    as_json: AsJson = False,
) -> None:
    """Submit a task (for 'shell', --input is the DAG document)."""
    data = read_json(input)
    if quiet and (wait or as_json):
        raise fail("--quiet prints the task id alone: not with --wait or --json", 2)
    if priority is not None and priority not in PRIORITIES:
        raise fail(f"--priority must be 1 to 5 (1 first), got {priority}", 2)
    if priority is not None and workflow == "shell":
        raise fail("--priority is for a workflow's tasks, not a shell DAG", 2)

    async def go() -> int:
        async with client(server) as c:
            if workflow == "shell":
                sub = await c.submit_shell(data, idempotency_key=idempotency_key)
            else:
                sub = await c.submit(
                    workflow, data, idempotency_key=idempotency_key, priority=priority
                )
            if as_json and not wait:
                print_json({"task_id": sub.task_id, "created": sub.created})
                return 0
            if quiet:
                out.print(sub.task_id, markup=False)
                return 0
            if not as_json:
                verb = "submitted" if sub.created else "already submitted (same idempotency key)"
                out.print(f"{verb}: task [bold]{sub.task_id}[/bold]")
            if not wait:
                return 0
            lines = EventLines()
            async for ev in c.watch(sub.task_id):
                if not as_json:
                    lines.show(ev)
            task = await c.task(sub.task_id)
            if as_json:
                print_json(task.to_json())
            else:
                show_task_view(task)
            return 0 if task.state == "SUCCEEDED" else 1

    raise typer.Exit(run(go()))


def submit_many(
    path: Annotated[
        str,
        typer.Argument(
            help='JSON lines, one task each: {"workflow": ..., "input": ..., '
            '"idempotency_key": ..., "priority": 1-5}; - for standard input.'
        ),
    ],
    server: Server = None,
    as_json: AsJson = False,
) -> None:
    """Submit many tasks, 1000 per call (one write and one fsync on the primary for each
    call). Every line is checked before anything is sent; give each task an
    idempotency key to make running the command again safe."""
    batches = _batches(_read_lines(path))

    async def go() -> list[Any]:
        async with client(server) as c:
            subs: list[Any] = []
            for batch in batches:
                subs += await c.submit_many(batch)
            return subs

    subs = run(go())
    if as_json:
        print_json([{"task_id": s.task_id, "created": s.created} for s in subs])
        return
    created = sum(1 for s in subs if s.created)
    out.print(
        f"{created} submitted, {len(subs) - created} already submitted (same idempotency key)"
    )
    for s in subs:
        out.print(s.task_id)


def _read_lines(path: str) -> list[dict[str, Any]]:
    """Every task of a JSON-lines file, each checked before anything is sent."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as e:
        raise fail(f"cannot read {path}: {e}", 2) from None
    items: list[dict[str, Any]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise fail(f"line {n}: not JSON: {e}", 2) from None
        if not isinstance(item, dict) or not isinstance(item.get("workflow"), str):
            raise fail(f'line {n}: expected an object with a "workflow" string', 2)
        rank = item.get("priority")
        if rank is not None and (type(rank) is not int or rank not in PRIORITIES):
            raise fail(f"line {n}: priority must be 1 to 5 (1 first), got {rank!r}", 2)
        items.append(item)
    if not items:
        raise fail(f"{path}: no tasks", 2)
    return items


def _batches(items: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Calls of at most SUBMIT_BATCH tasks and about SUBMIT_BATCH_BYTES of JSON (the
    server takes messages up to 16 MiB)."""
    batches: list[list[dict[str, Any]]] = [[]]
    size = 0
    for item in items:
        n = len(orjson.dumps(item))
        if batches[-1] and (len(batches[-1]) == SUBMIT_BATCH or size + n > SUBMIT_BATCH_BYTES):
            batches.append([])
            size = 0
        batches[-1].append(item)
        size += n
    return batches


def event_send(
    key: Annotated[str, typer.Argument(help="The key durable tasks wait on.")],
    payload: Annotated[
        str | None, typer.Option("--payload", help="JSON, or @file with JSON (default null).")
    ] = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option("--idempotency-key", help="The same key records the event once."),
    ] = None,
    server: Server = None,
    as_json: AsJson = False,
) -> None:
    """Send an event: the durable tasks waiting on KEY (or that will) receive it."""
    data = read_json(payload, "--payload")

    async def go() -> Any:
        async with client(server) as c:
            return await c.send_event(key, data, idempotency_key=idempotency_key)

    sent = run(go())
    if as_json:
        print_json({"event_id": sent.event_id, "created": sent.created})
    elif sent.created:
        out.print(f"event {key!r} recorded as event {sent.event_id}")
    else:
        out.print(f"already recorded (same idempotency key) as event {sent.event_id}")
