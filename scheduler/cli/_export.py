"""`apollo11 export`: tasks and their events as JSON lines, through the client API
(ListTasks, GetTasks, GetEvents: the reader role is enough, and any node answers).

The file's shape, order, resume point and references are `_exportfile.py`'s. Here:
list the tasks once (the set is fixed when the export starts), skip those an earlier,
interrupted run already wrote, and write each line whole, in order, after the values
it refers to: whatever instant the export stops at, the file is complete lines and
every reference in them names a file that is there.
"""

from __future__ import annotations

import asyncio
import collections
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any, BinaryIO

import typer

from apollo11.scheduler.cli._exportfile import (
    DEFAULT_INLINE_MAX_BYTES,
    ExportError,
    order_key,
    parse_time,
    resume_point,
    selected,
    task_line,
)
from apollo11.scheduler.cli._exportflight import in_flight
from apollo11.scheduler.cli._shared import Server, client, fail, run
from apollo11.scheduler.cli._tasks import TASK_STATES
from apollo11.scheduler.errors import NotFoundError

# Tasks read at once (one GetTasks call): fewer calls cost the node less (each is a
# turn of gRPC's machinery), more hold its event loop longer between two turns of
# its own work (the node yields between tasks, not within one, and the reply is
# made in one turn): at 64 an unpaced export added 1.8x to the primary's dispatch
# p99, at 4 about 1.05x (docs/benchmarks.md, "Export").
_WINDOW = 4
Line = tuple[bytes, dict[str, bytes], bool]
_EVENTS_PAGE = 10000  # GetEvents' most
# The listing's page: each is one turn of the node's loop (a page of 1,000 took
# ~3 ms of it, added to a submission that arrived meanwhile), so smaller pages.
_LIST_PAGE = 200


def export(
    workflow: Annotated[str, typer.Option("--workflow", help="Only this workflow.")] = "",
    since: Annotated[
        str | None,
        typer.Option("--since", help="Submitted at or after this time (ISO-8601; UTC if bare)."),
    ] = None,
    until: Annotated[
        str | None, typer.Option("--until", help="Submitted before this time (ISO-8601).")
    ] = None,
    state: Annotated[str | None, typer.Option("--state", help=", ".join(TASK_STATES) + ".")] = None,
    fmt: Annotated[str, typer.Option("--format", help="jsonl: a task a line.")] = "jsonl",
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            help="The file; an existing one is resumed after its last complete line. "
            "Standard output when omitted.",
        ),
    ] = None,
    inline_max_bytes: Annotated[
        int,
        typer.Option(
            "--inline-max-bytes",
            help="A value (input, result, payload field) whose JSON is longer goes to "
            "the refs directory, named by its SHA-256, and the line refers to it.",
        ),
    ] = DEFAULT_INLINE_MAX_BYTES,
    refs_dir: Annotated[
        Path | None,
        typer.Option("--refs-dir", help="Where referenced values go (default OUTPUT.refs)."),
    ] = None,
    rate: Annotated[
        float,
        typer.Option(
            "--rate",
            help="At most this many tasks a second (0: as fast as the node answers), to "
            "spare a busy primary (or ask a standby with --server).",
        ),
    ] = 0,
    server: Server = None,
) -> None:
    """Export tasks with their events as JSON lines, oldest submission first
    (docs/archive.md, "Export"). Run again with the same flags and --output, it goes on
    where an interrupted run stopped; on a finished one it adds nothing."""
    if fmt != "jsonl":
        raise fail(f"--format {fmt} is not supported: jsonl", 2)
    if state is not None:
        state = state.upper()
        if state not in TASK_STATES:
            raise fail(f"--state {state} is not a task state: one of {', '.join(TASK_STATES)}", 2)
    if rate < 0:
        raise fail(f"--rate {rate} is negative: 0 (no limit) or more", 2)
    if inline_max_bytes < 2:
        raise fail(f"--inline-max-bytes {inline_max_bytes} is too small: at least 2", 2)
    try:
        since_ms = parse_time("--since", since)
        until_ms = parse_time("--until", until)
        start = resume_point(str(output)) if output is not None else None
    except ExportError as e:
        raise fail(str(e), 2) from e
    if since_ms is not None and until_ms is not None and until_ms <= since_ms:
        raise fail(f"--until {until} is not after --since {since}", 2)
    refs = refs_dir or Path(f"{output}.refs" if output is not None else "apollo11-export.refs")
    began = time.monotonic()
    if output is None:
        sink = _Sink(sys.stdout.buffer, refs, inline_max_bytes)
        written, skipped, gone, partial = run(
            _export(server, workflow, state, since_ms, until_ms, None, sink, rate)
        )
    else:
        assert start is not None
        with open(output, "ab") as f:
            f.truncate(start.keep_bytes)  # a line cut by an interrupted run
        with open(output, "ab") as f:
            sink = _Sink(f, refs, inline_max_bytes)
            after = start.after
            written, skipped, gone, partial = run(
                _export(server, workflow, state, since_ms, until_ms, after, sink, rate)
            )
            f.flush()
            os.fsync(f.fileno())
    took = time.monotonic() - began
    speed = written / took if took > 0 else 0.0
    print(
        f"exported {written} tasks ({skipped} already in the file) in {took:.1f} s, "
        f"{speed:.0f} tasks/s",
        file=sys.stderr,
    )
    if gone:
        print(
            f"not exported: {gone} listed task(s) gone when read (NOT_FOUND: purged by "
            "retention since the listing)",
            file=sys.stderr,
        )
    if partial:
        print(
            f"incomplete: {partial} exported task(s) lack their oldest events: the node's "
            "log retention dropped them and no bucket gave them back (a node without "
            '--archive-url); their lines say so ("events_from", "incomplete"). '
            "Export through a node with --archive-url, to a new --output file (a resumed "
            "export keeps the lines it wrote), for the whole history.",
            file=sys.stderr,
        )


class _Sink:
    """Writes each line whole, after the values it refers to."""

    def __init__(self, out: BinaryIO, refs: Path, limit: int) -> None:
        self.out, self.refs, self.limit = out, refs, limit

    def write(self, line: bytes, values: dict[str, bytes]) -> None:
        for name, data in values.items():
            path = self.refs / name
            if path.exists():
                continue  # content-addressed: the same bytes
            self.refs.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(data)
            tmp.replace(path)
        self.out.write(line)
        self.out.flush()


async def _export(
    server: str | None,
    workflow: str,
    state: str | None,
    since_ms: int | None,
    until_ms: int | None,
    after: Any,
    sink: _Sink,
    rate: float,
) -> tuple[int, int, int, int]:
    """(written, already in the file, gone: listed, then NOT_FOUND when read,
    incomplete: written without their oldest events, which the node no longer holds)."""
    async with client(server) as c:
        rows: list[Any] = []
        token = ""
        while True:
            page = await c.tasks(
                state=state, workflow=workflow, page_size=_LIST_PAGE, page_token=token
            )
            rows.extend(page.tasks)
            token = page.next_page_token
            if not token:
                break
        tasks = selected(rows, since_ms, until_ms)
        todo = [t for t in tasks if after is None or order_key(t) > after]
        window_size = _WINDOW if not rate else max(1, min(_WINDOW, int(rate / 10)))
        batched = True
        began = time.monotonic()
        gone = partial = 0

        async def fetch(window: list[str]) -> list[Line | None]:
            nonlocal batched
            if batched:
                try:
                    return await _lines(c, window, sink.limit)
                except Exception as e:
                    if not _unimplemented(e):
                        raise
                    batched = False  # a node of an older release: a task at a time
            return list(await asyncio.gather(*(_line(c, t, sink.limit) for t in window)))

        def write(lines: list[Line | None]) -> None:
            nonlocal gone, partial
            for got in lines:
                if got is None:
                    gone += 1
                else:
                    line, values, incomplete = got
                    sink.write(line, values)
                    partial += incomplete

        # Calls in flight (_exportflight.py), written in order.
        calls: collections.deque[tuple[float, asyncio.Task[list[Line | None]]]]
        calls = collections.deque()
        flight, fastest = 1, float("inf")

        async def oldest() -> None:
            nonlocal flight, fastest
            sent, call = calls.popleft()
            write(await call)
            took = time.monotonic() - sent
            fastest = min(fastest, took)
            flight = in_flight(flight, fastest, took)

        try:
            for i in range(0, len(todo), window_size):
                if rate:  # paced: the i-th task not before i / rate seconds in
                    await asyncio.sleep(max(0.0, began + i / rate - time.monotonic()))
                window = [t.task_id for t in todo[i : i + window_size]]
                calls.append((time.monotonic(), asyncio.create_task(fetch(window))))
                while len(calls) >= flight:
                    await oldest()
            while calls:
                await oldest()
        finally:
            for _, call in calls:
                call.cancel()
        return len(todo) - gone, len(tasks) - len(todo), gone, partial


def _unimplemented(e: Exception) -> bool:
    # grpc is imported by the client, not here: a node sets gRPC's environment before
    # anything imports it (cli/_grpcenv.py), and every command's module is loaded then
    import grpc

    from apollo11.scheduler.client import ApiError

    return isinstance(e, ApiError) and e.code is grpc.StatusCode.UNIMPLEMENTED


async def _lines(c: Any, task_ids: list[str], limit: int) -> list[Line | None]:
    """`_line` of each task, read in one call (GetTasks); a task whose events did not
    all fit in it reads the rest a page at a time."""
    out: list[Line | None] = []
    for read in await c.tasks_with_events(task_ids):
        try:
            out.append(None if read.task is None else await _built(c, read.task, read.page, limit))
        except NotFoundError:
            out.append(None)
    return out


async def _line(c: Any, task_id: str, limit: int) -> Line | None:
    """The task's line, its values by reference, and whether its oldest events are
    missing (the node's log retention dropped them and it has no bucket to read them
    from: the line says so); or None when the task is gone since the listing
    (retention purged it: NOT_FOUND), which is no reason to fail the rest of the export."""
    try:
        return await _built(c, await c.task(task_id), None, limit)
    except NotFoundError:
        return None


async def _built(c: Any, task: Any, got: Any, limit: int) -> Line:
    """The line of `task` from its events: `got` (the page GetTasks held, None for
    none) and the pages from where it ended (from the task's first event without it);
    the oldest of them that says events are gone names where they start."""
    pages = [] if got is None else [got]
    nxt = task.first_event_id if got is None else got.next_id
    while nxt:
        page = await c.events_page(
            task_id=task.task_id, from_id=nxt, to_id=task.last_event_id, limit=_EVENTS_PAGE
        )
        pages.append(page)
        nxt = page.next_id
    events = [e for page in pages for e in page.events]
    gone = max(pages, key=lambda page: page.gone_before, default=None)
    before, note = (gone.gone_before, gone.note) if gone and gone.gone_before else (0, "")
    line, values = task_line(task, events, limit, gone_before=before, gone_note=note)
    return line, values, bool(before)
