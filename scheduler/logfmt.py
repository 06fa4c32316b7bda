"""How the processes log: text for people, or one JSON object a line for a log
pipeline (`apollo11 --log-format json node ...`, or APOLLO11_LOG_FORMAT=json).

A line logged while a step's attempt runs (the engine's own lines about it, and
the step's own `logging` calls, in its coroutine or its thread) carries the
attempt's task id, step, attempt and term: `tag_task` sets them in the asyncio
task that runs the attempt (the engine's step runner, a worker's attempt), and
asyncio hands them on to what it starts.
"""

from __future__ import annotations

import contextvars
import datetime
import logging
from typing import Any

import orjson

FORMATS = ("text", "json")
TEXT = "%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s"

_ATTEMPT: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "apollo11_attempt", default=None
)


def tag_task(task_id: str, step: str, attempt: int, term: int) -> None:
    """Every log line of the current asyncio task from now on carries these: for a
    task that runs one attempt and ends (the engine's step runner). Other tasks,
    and the caller's own context, are not touched: a task runs in a copy."""
    _ATTEMPT.set({"task_id": task_id, "step": step, "attempt": attempt, "term": term})


class JsonFormatter(logging.Formatter):
    """{"ts", "level", "logger", "message"[, "task_id", "step", "attempt", "term"]
    [, "exc"]}: one line each, UTC timestamps to the millisecond."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC)
        out: dict[str, Any] = {
            "ts": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = _ATTEMPT.get()
        if fields:
            out.update(fields)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


def configure(fmt: str = "text", level: int = logging.WARNING) -> None:
    """The root logger's one handler (stderr), in `fmt`."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT, datefmt="%H:%M:%S"))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level)
