"""A task's timeline: one bar per step attempt (and per compensation), and a mark for
each operator action (retry, skip, cancel) naming who acted, from its events."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from apollo11.scheduler.log.record import Event, EventType

ROW_H = 26
LABEL_W = 110
WIDTH = 900

COLORS = {
    "succeeded": "#2e9e5b",
    "failed": "#d64545",
    "lost": "#9b59b6",
    "running": "#3b82f6",
    "compensating": "#e6a23c",
    "compensated": "#b7791f",
    "compensation failed": "#8b0000",
}


@dataclass
class Bar:
    step: str
    kind: str  # "attempt" or "compensation"
    attempt: int
    start_ms: int
    end_ms: int | None
    outcome: str
    node: str
    error: str = ""


def bars(events: Iterable[Event]) -> list[Bar]:
    """Every attempt and compensation of a task, in the order they started."""
    out: list[Bar] = []
    open_: dict[tuple[str, str], Bar] = {}
    for e in events:
        t = e.event_type
        step = e.step_name
        if t is EventType.STEP_STARTED:
            started = Bar(step, "attempt", e.attempt, e.timestamp, None, "running", e.instance_id)
            open_[(step, "attempt")] = started
            out.append(started)
        elif t in (EventType.STEP_SUCCEEDED, EventType.STEP_FAILED) and not e.payload.get(
            "compensation"
        ):
            b = open_.pop((step, "attempt"), None)
            if b is not None:
                b.end_ms = e.timestamp
                if t is EventType.STEP_SUCCEEDED:
                    b.outcome = "succeeded"
                else:
                    b.outcome = "lost" if e.payload.get("lost") else "failed"
                    b.error = str(e.payload.get("error", ""))
        elif t is EventType.STEP_COMPENSATING:
            b = Bar(
                step, "compensation", e.attempt, e.timestamp, None, "compensating", e.instance_id
            )
            open_[(step, "compensation")] = b
            out.append(b)
        elif t is EventType.STEP_FAILED and e.payload.get("compensation"):
            b = open_.pop((step, "compensation"), None)
            if b is not None:
                b.end_ms = e.timestamp
                b.outcome = "compensation failed"
                b.error = str(e.payload.get("error", ""))
        elif t is EventType.STEP_COMPENSATED:
            b = open_.pop((step, "compensation"), None)
            if b is not None:
                b.end_ms = e.timestamp
                b.outcome = "compensated"
    return out


@dataclass(frozen=True, slots=True)
class Action:
    """An operator's retry, skip or cancel: `who` is the authenticated principal,
    with the display name they typed beside it."""

    event_id: int
    timestamp: int
    action: str
    step: str  # "" for a cancel (the whole task)
    who: str
    reason: str


def who(record: Mapping[str, Any] | None) -> str:
    """ "alice", or "alice (as Alice Smith)" when a display name was typed."""
    if not record:
        return ""
    name = str(record.get("operator") or "")
    shown = record.get("as")
    return f"{name} (as {shown})" if shown else name


def actions(events: Iterable[Event]) -> list[Action]:
    out = []
    for e in events:
        if e.event_type is EventType.MANUAL_OVERRIDE:
            what = str(e.payload.get("action", ""))
        elif e.event_type is EventType.TASK_CANCELLED:
            what = "cancel"
        else:
            continue
        reason = str(e.payload.get("reason") or "")
        out.append(Action(e.event_id, e.timestamp, what, e.step_name, who(e.payload), reason))
    return out


@dataclass
class Rect:
    x: float
    y: float
    w: float
    color: str
    label: str
    title: str


@dataclass
class Mark:
    x: float
    y: float
    h: float
    title: str


@dataclass
class Svg:
    width: int
    height: int
    rows: list[tuple[str, float]]  # step name, y
    rects: list[Rect]
    span_ms: int
    marks: list[Mark] = field(default_factory=list)


def layout(
    steps: Sequence[str], items: Sequence[Bar], now_ms: int, acts: Sequence[Action] = ()
) -> Svg:
    """Place the bars: a row per step, time on x; an action is a tick on its step's row
    (a cancel spans every row)."""
    rows = {s: i for i, s in enumerate(steps)}
    if not items and not acts:
        return Svg(
            WIDTH, ROW_H * max(1, len(steps)) + 10, [(s, i * ROW_H) for s, i in rows.items()], [], 0
        )
    times = [b.start_ms for b in items] + [a.timestamp for a in acts]
    t0 = min(times)
    t1 = max([b.end_ms if b.end_ms is not None else now_ms for b in items] + times)
    span = max(1, t1 - t0)
    scale = (WIDTH - LABEL_W - 10) / span
    rects = []
    for b in items:
        end = b.end_ms if b.end_ms is not None else now_ms
        y = rows.get(b.step, 0) * ROW_H + (14 if b.kind == "compensation" else 3)
        label = f"#{b.attempt}" if b.kind == "attempt" else "comp"
        title = f"{b.step} {b.kind} {b.attempt}: {b.outcome} on {b.node}, {end - b.start_ms} ms"
        if b.error:
            title += f" — {b.error}"
        rects.append(
            Rect(
                LABEL_W + (b.start_ms - t0) * scale,
                y,
                max(3.0, (end - b.start_ms) * scale),
                COLORS.get(b.outcome, "#888"),
                label,
                title,
            )
        )
    marks = []
    for a in acts:
        title = f"event {a.event_id}: {a.action}{' of ' + a.step if a.step else ''} by {a.who}"
        if a.reason:
            title += f" — {a.reason}"
        x = LABEL_W + (a.timestamp - t0) * scale
        if a.step and a.step in rows:
            marks.append(Mark(x, rows[a.step] * ROW_H + 1, ROW_H - 2, title))
        else:
            marks.append(Mark(x, 0, ROW_H * max(1, len(steps)), title))
    return Svg(
        WIDTH,
        ROW_H * max(1, len(steps)) + 10,
        [(s, i * ROW_H) for s, i in rows.items()],
        rects,
        span,
        marks,
    )
