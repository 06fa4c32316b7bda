"""The export file (`apollo11 export`): what a line holds, its order, where an
interrupted export resumes, and which values go out by reference. Pure functions
over views and bytes; the command (`_export.py`) does the reading and writing.

A line is one task, as it stands, with its events (oldest first), as one JSON object
with sorted keys: the same task exports to the same bytes. Lines are in the order
of `order_key` (submission time, then task id), a total order that does not depend
on the node asked or on when: two exports of the same finished tasks are the same
file, and an interrupted export resumes after the key of its last complete line.

Large values go out by reference (seed §2.3: bulk output belongs in object storage,
the record carries a reference): a task's input, a step's result or a top-level
value of an event's payload whose JSON is over the limit is written once to the refs
directory under its SHA-256 and replaced in the line by
`{"$ref": "sha256-<hex>.json", "sha256": "<hex>", "bytes": n}`. Content-addressed, a
value written twice is one file, and a resumed export rewrites nothing.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any, NamedTuple

import orjson

if TYPE_CHECKING:  # the CLI's help loads no grpc (tests/scheduler/cli/test_imports.py)
    from apollo11.scheduler.client import EventView, TaskSummaryView, TaskView

DEFAULT_INLINE_MAX_BYTES = 64 * 1024
# fields of a task's view that say how this node sees it now, not what the task is:
# left out so that the primary and a standby, today and tomorrow, export one file; and
# the live legal hold (`held`), which its TASK_HELD events in the line already record
_VOLATILE = ("as_of_event_id", "blocked", "waiting", "held")
_TAIL_CHUNK = 64 * 1024


class ExportError(Exception):
    """A flag or an existing output the export cannot work with; the message names it."""


class OrderKey(NamedTuple):
    submitted_ms: int
    task_id: str


class ResumePoint(NamedTuple):
    keep_bytes: int  # the output's complete lines: anything after them is cut
    after: OrderKey | None  # the last complete line's task; None: start from the first


def order_key(task: TaskSummaryView | TaskView) -> OrderKey:
    return OrderKey(task.submitted_ms, task.task_id)


def parse_time(flag: str, value: str | None) -> int | None:
    """An ISO-8601 time (UTC when it names no offset) as ms since the epoch."""
    if value is None:
        return None
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        raise ExportError(
            f"{flag} {value!r} is not a time: ISO-8601, e.g. 2026-12-06T20:00:00Z"
        ) from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return int(t.timestamp() * 1000)


def selected(
    rows: Iterable[TaskSummaryView], since_ms: int | None, until_ms: int | None
) -> list[TaskSummaryView]:
    """The tasks submitted in [since, until), in export order."""
    keep = [
        r
        for r in rows
        if (since_ms is None or r.submitted_ms >= since_ms)
        and (until_ms is None or r.submitted_ms < until_ms)
    ]
    keep.sort(key=order_key)
    return keep


def resume_point(path: str) -> ResumePoint:
    """Where an export into `path` goes on: after its last complete line (a line cut
    by an interrupted write is dropped). A last complete line that is not an exported
    task is refused: that file is not this command's, or it is damaged."""
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        return ResumePoint(0, None)
    with open(path, "rb") as f:
        end = _last_newline(f, size)
        if end < 0:
            return ResumePoint(0, None)
        start = _last_newline(f, end) + 1
        f.seek(start)
        line = f.read(end - start)
    try:
        task = orjson.loads(line)
        after = OrderKey(int(task["submitted_ms"]), str(task["task_id"]))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        raise ExportError(
            f"--output {path}: its last complete line (at byte {start}) is not an exported "
            "task; give another file, or remove this one to start over"
        ) from None
    return ResumePoint(end + 1, after)


def _last_newline(f: IO[bytes], before: int) -> int:
    """The offset of the last b"\\n" before `before`; -1 when there is none."""
    pos = before
    while pos > 0:
        step = min(_TAIL_CHUNK, pos)
        pos -= step
        f.seek(pos)
        at: int = f.read(step).rfind(b"\n")
        if at >= 0:
            return pos + at
    return -1


def by_reference(value: Any, limit: int, refs: dict[str, bytes]) -> Any:
    """`value`, or a reference to it when its JSON is over `limit` bytes (its bytes
    added to `refs` under their file name)."""
    data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    if len(data) <= limit:
        return value
    digest = hashlib.sha256(data).hexdigest()
    name = f"sha256-{digest}.json"
    refs[name] = data
    return {"$ref": name, "sha256": digest, "bytes": len(data)}


def task_line(
    task: TaskView,
    events: Iterable[EventView],
    limit: int,
    *,
    gone_before: int = 0,
    gone_note: str = "",
) -> tuple[bytes, dict[str, bytes]]:
    """One task's line (with its b"\\n") and the values it refers to by name.
    `gone_before`: the node no longer holds the task's events below this id (its log
    retention dropped them, and no bucket gave them back); the line says so, in
    `events_from` and `incomplete` (`gone_note`, the node's sentence), never a
    shorter history passed off as the whole."""
    refs: dict[str, bytes] = {}
    body = task.to_json()
    for key in _VOLATILE:
        body.pop(key, None)
    if gone_before:
        body["events_from"] = gone_before
        body["incomplete"] = gone_note
    body["first_event_id"] = task.first_event_id
    body["idempotency_key"] = task.idempotency_key
    body["input"] = by_reference(task.input, limit, refs)
    for step in body["steps"]:
        step["result"] = by_reference(step["result"], limit, refs)
    body["events"] = [_event(e, limit, refs) for e in events]
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS) + b"\n", refs


def _event(e: EventView, limit: int, refs: dict[str, bytes]) -> dict[str, Any]:
    out = e.to_json()
    del out["task_id"]  # the line's
    if isinstance(e.payload, dict):
        out["payload"] = {k: by_reference(v, limit, refs) for k, v in e.payload.items()}
    return out
