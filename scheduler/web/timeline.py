"""A task's timeline: one bar per step attempt (and per compensation), a mark for
each operator action (retry, skip, cancel) naming who acted, a line where a new
primary took over while the task ran (a failover: its events' term went up), and a
time axis, from its events."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from apollo11.scheduler.log import Event, EventType

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
class RecordedAction:
    """An operator's retry, skip, cancel, hold, release or redaction: `who` is the
    authenticated principal, with the display name they typed beside it."""

    event_id: int
    timestamp: int
    action: str
    step: str  # "" for an act on the whole task
    who: str
    reason: str


def who(record: Mapping[str, Any] | None) -> str:
    """ "alice", or "alice (as Alice Smith)" when a display name was typed."""
    if not record:
        return ""
    name = str(record.get("operator") or "")
    shown = record.get("as")
    return f"{name} (as {shown})" if shown else name


def actions(events: Iterable[Event]) -> list[RecordedAction]:
    out = []
    for e in events:
        by = who(e.payload)
        if e.event_type is EventType.MANUAL_OVERRIDE:
            what = str(e.payload.get("action", ""))
        elif e.event_type is EventType.TASK_CANCELLED:
            what = "cancel"
        elif e.event_type is EventType.TASK_REDACTED:
            what = "redact"
        elif e.event_type is EventType.TASK_HELD:
            # a hold records its principal as `by`, with no display name
            what, by = ("hold" if e.payload.get("held") else "release"), str(e.payload["by"])
        else:
            continue
        reason = str(e.payload.get("reason") or "")
        out.append(RecordedAction(e.event_id, e.timestamp, what, e.step_name, by, reason))
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
class Tick:
    x: float
    label: str  # from the first attempt: "+1.5 s"


@dataclass
class Takeover:
    """A failover seen by the task: its first event in a higher term."""

    x: float
    term: int
    node: str
    event_id: int
    title: str


@dataclass
class Svg:
    width: int
    height: int
    rows: list[tuple[str, float]]  # step name, y
    rects: list[Rect]
    span_ms: int
    marks: list[Mark] = field(default_factory=list)
    ticks: list[Tick] = field(default_factory=list)
    takeovers: list[Takeover] = field(default_factory=list)
    axis_y: float = 0.0  # where the time axis runs
    start_ms: int = 0  # the time of x = LABEL_W


AXIS_H = 18


def term_changes(events: Iterable[Event]) -> list[tuple[int, int, str, int]]:
    """(time, term, node, event id) of each of the task's events written in a term above
    every one before it: a new primary took over while the task ran."""
    out: list[tuple[int, int, str, int]] = []
    highest: int | None = None
    for e in events:
        if highest is not None and e.term > highest:
            out.append((e.timestamp, e.term, e.instance_id, e.event_id))
        highest = e.term if highest is None else max(highest, e.term)
    return out


_NICE_MS = [n * 10**k for k in range(0, 9) for n in (1, 2, 5)]  # 1 ms ... 500,000,000 ms


def _duration(ms: int) -> str:
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:g} s"
    if ms < 3_600_000:
        return f"{ms / 60_000:g} min"
    if ms < 86_400_000:
        return f"{ms / 3_600_000:g} h"
    return f"{ms / 86_400_000:g} d"


def ticks(span_ms: int, scale: float) -> list[Tick]:
    """About six ticks at a round interval (1, 2 or 5 of a power of ten ms)."""
    every = next((n for n in _NICE_MS if span_ms / n <= 6), _NICE_MS[-1])
    out = []
    t = 0
    while t <= span_ms:
        out.append(Tick(LABEL_W + t * scale, "0" if t == 0 else f"+{_duration(t)}"))
        t += every
    return out


def layout(
    steps: Sequence[str],
    items: Sequence[Bar],
    now_ms: int,
    acts: Sequence[RecordedAction] = (),
    takeovers: Sequence[tuple[int, int, str, int]] = (),
) -> Svg:
    """Place the bars: a row per step, time on x; an action is a tick on its step's row
    (a cancel spans every row); a takeover (term_changes) a line across every row."""
    rows = {s: i for i, s in enumerate(steps)}
    axis_y = ROW_H * max(1, len(steps)) + 4
    if not items and not acts:
        return Svg(
            WIDTH,
            ROW_H * max(1, len(steps)) + 10,
            [(s, i * ROW_H) for s, i in rows.items()],
            [],
            0,
            axis_y=axis_y,
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
    lines = [
        Takeover(
            LABEL_W + (max(t0, min(t1, at)) - t0) * scale,
            term,
            node,
            event_id,
            f"event {event_id}: term {term} on {node} (a new primary took over)",
        )
        for at, term, node, event_id in takeovers
    ]
    return Svg(
        WIDTH,
        axis_y + AXIS_H,
        [(s, i * ROW_H) for s, i in rows.items()],
        rects,
        span,
        marks,
        ticks(span, scale),
        lines,
        axis_y,
        t0,
    )
