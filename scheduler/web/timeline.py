"""A task's timeline: one bar per step attempt (and per compensation), from its events."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from scheduler.log.record import Event, EventType

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


@dataclass
class Rect:
    x: float
    y: float
    w: float
    color: str
    label: str
    title: str


@dataclass
class Svg:
    width: int
    height: int
    rows: list[tuple[str, float]]  # step name, y
    rects: list[Rect]
    span_ms: int


def layout(steps: Sequence[str], items: Sequence[Bar], now_ms: int) -> Svg:
    """Place the bars: a row per step, time on x."""
    rows = {s: i for i, s in enumerate(steps)}
    if not items:
        return Svg(
            WIDTH, ROW_H * max(1, len(steps)) + 10, [(s, i * ROW_H) for s, i in rows.items()], [], 0
        )
    t0 = min(b.start_ms for b in items)
    t1 = max(b.end_ms if b.end_ms is not None else now_ms for b in items)
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
    return Svg(
        WIDTH,
        ROW_H * max(1, len(steps)) + 10,
        [(s, i * ROW_H) for s, i in rows.items()],
        rects,
        span,
    )
