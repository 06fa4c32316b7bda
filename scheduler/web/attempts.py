"""Every attempt of every step, with how it ended and the tail of what it said.

The steps table shows a step as it is now (its last attempt); an operator deciding
whether to retry wants each attempt: the error of each failure, the result of the
success, a shell command's output. All of it is in the task's own events (a
STARTED, then a SUCCEEDED or FAILED with the same attempt number), which the page
reads once for the timeline, so this costs no further read. A payload is capped
(4 KB), but a step retried many times would still make a long page: each text
keeps its last TAIL characters and says how many it dropped.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from apollo11.scheduler.cause import verdict_line
from apollo11.scheduler.log import Event, EventType

TAIL = 2_000  # characters kept of an attempt's output or error: its end, where the cause is


@dataclass(frozen=True, slots=True)
class Tail:
    text: str
    cut: int = 0  # characters dropped from its start


def tail(text: str, keep: int = TAIL) -> Tail:
    """The last `keep` characters of `text`, and how many went before them."""
    if len(text) <= keep:
        return Tail(text)
    return Tail(text[-keep:], len(text) - keep)


@dataclass(frozen=True, slots=True)
class AttemptRow:
    step: str
    kind: str  # "attempt" or "compensation"
    attempt: int
    outcome: str  # running, succeeded, failed, timed out, lost, waited (a durable main's
    # WAIT); compensating, compensated, compensation failed
    node: str
    started_ms: int
    ended_ms: int | None
    error: Tail  # a failure's own line ("RuntimeError: ...", "command exited with code 1")
    output: Tail  # a shell command's output, or a success's result as JSON
    # a failure's cause and the retry rule's verdict ("TimeoutError → retry 3/10 in
    # 0.5 s", scheduler/cause.py); "" when its FAILED records none
    decision: str = ""

    @property
    def duration_ms(self) -> int | None:
        return None if self.ended_ms is None else self.ended_ms - self.started_ms


_NONE = Tail("")


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _shell_output(value: Any) -> str | None:
    """A shell step's captured output (scheduler/shell.py puts it in its result or its
    failure's details as `output_tail`); None for any other step."""
    if isinstance(value, Mapping) and isinstance(value.get("output_tail"), str):
        return str(value["output_tail"])
    return None


def _ended(open_: AttemptRow, e: Event) -> AttemptRow:
    p = e.payload
    if e.event_type is EventType.STEP_SUCCEEDED:
        result = p.get("result")
        shown = _shell_output(result)
        out = tail(_json(result) if shown is None else shown)
        return dataclasses.replace(open_, outcome="succeeded", ended_ms=e.timestamp, output=out)
    if e.event_type is EventType.STEP_COMPENSATED:
        return dataclasses.replace(open_, outcome="compensated", ended_ms=e.timestamp)
    if open_.kind == "compensation":
        outcome = "compensation failed"
    elif p.get("lost"):
        outcome = "lost"
    elif p.get("timeout"):
        outcome = "timed out"
    else:
        outcome = "failed"
    return dataclasses.replace(
        open_,
        outcome=outcome,
        ended_ms=e.timestamp,
        error=tail(str(p.get("error", ""))),
        output=tail(_shell_output(p) or ""),
        decision=verdict_line(p) or "",
    )


def _waited(e: Event) -> str:
    """What a WAIT waits for, in a line: `sleep until 2026-12-02 15:00:00 UTC`, `event
    'approved:o-1'` (docs/durable.md, the WAIT record)."""
    p = e.payload
    what = f"event {p.get('key')!r}" if p.get("kind") == "event" else str(p.get("kind", "wait"))
    until = p.get("until_ms")
    if isinstance(until, int):
        when = datetime.datetime.fromtimestamp(until / 1000, tz=datetime.UTC)
        what += f" until {when:%Y-%m-%d %H:%M:%S} UTC"
    return what


def attempts(events: Iterable[Event]) -> list[AttemptRow]:
    """Each attempt and compensation of a task, in the order they started; an end
    without its start (a log cut by retention) counts as starting when it ended."""
    out: list[AttemptRow] = []
    open_: dict[tuple[str, str], int] = {}  # (step, kind) -> its index in out
    for e in events:
        t = e.event_type
        if t is EventType.STEP_STARTED or t is EventType.STEP_COMPENSATING:
            kind = "attempt" if t is EventType.STEP_STARTED else "compensation"
            outcome = "running" if kind == "attempt" else "compensating"
            open_[(e.step_name, kind)] = len(out)
            out.append(
                AttemptRow(
                    e.step_name,
                    kind,
                    e.attempt,
                    outcome,
                    e.instance_id,
                    e.timestamp,
                    None,
                    _NONE,
                    _NONE,
                )
            )
        elif t is EventType.WAIT:
            # a durable main's attempt ends in a WAIT: it sleeps or waits for an event,
            # and a later attempt resumes it (not a failure, and not running)
            at = open_.get((e.step_name, "attempt"))
            if at is not None and out[at].attempt == e.attempt:  # replay ignores any other
                del open_[(e.step_name, "attempt")]
                out[at] = dataclasses.replace(
                    out[at], outcome="waited", ended_ms=e.timestamp, output=tail(_waited(e))
                )
        elif t in (EventType.STEP_SUCCEEDED, EventType.STEP_FAILED, EventType.STEP_COMPENSATED):
            compensation = t is EventType.STEP_COMPENSATED or bool(e.payload.get("compensation"))
            kind = "compensation" if compensation else "attempt"
            at = open_.pop((e.step_name, kind), None)
            if at is None:
                stub = AttemptRow(
                    e.step_name, kind, e.attempt, "", e.instance_id, e.timestamp, None, _NONE, _NONE
                )
                out.append(_ended(stub, e))
            else:
                out[at] = _ended(out[at], e)
    return out


def in_step_order(found: Sequence[AttemptRow], steps: Sequence[str]) -> list[AttemptRow]:
    """The attempts step by step (the workflow's order), each step's as they started."""
    rank = {s: i for i, s in enumerate(steps)}
    return sorted(found, key=lambda a: rank.get(a.step, len(rank)))
