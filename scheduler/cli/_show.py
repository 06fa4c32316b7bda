"""How a task and its events are printed: by `submit --wait`, `task` and `events`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import orjson

from apollo11.scheduler import stepwords
from apollo11.scheduler.cli._output import escape
from apollo11.scheduler.cli._shared import Grid, clock, out

DEFAULT_PRIORITY = 3  # a submission's (docs/flow-control.md)


def progress_line(ev: Any, prefix: str = "", *, woken: bool = False) -> None:
    """One event on one line, in any output (`prefix`: plain text before it; `woken`:
    a durable main's STARTED after its WAIT, a wake-up rather than a retry)."""
    what = ev.event_type.removeprefix("STEP_").removeprefix("TASK_")
    who = f"{ev.step_name} " if ev.step_name else ""
    extra = ""
    if isinstance(ev.payload, dict) and ev.payload.get("error"):
        extra = f" — {ev.payload['error']}"
    if isinstance(ev.payload, dict) and ev.payload.get("operator"):
        # who acted, as the credential proved it; a typed display name beside it
        shown = f" (as {ev.payload['as']})" if ev.payload.get("as") else ""
        extra += f" — by {ev.payload['operator']}{shown}: {ev.payload.get('reason', '')}"
    attempt = f" (attempt {ev.attempt})" if ev.attempt else ""
    if woken:
        attempt = f" (woken: run {ev.attempt})"
    # markup=False: step names, errors and reasons are whoever submitted's text
    line = f"{prefix}{clock(ev.timestamp_ms)}  #{ev.event_id:<6} {who}{what}{attempt}{extra}"
    out.print(line, markup=False, highlight=False)


class EventLines:
    """Events printed as they come, one line each. A durable main runs again on every
    wake-up (a timer, an event, a child) as a new attempt of its step: a STARTED
    right after that step's WAIT says "woken", not "attempt N", which reads as a retry."""

    def __init__(self, prefix: Callable[[Any], str] | None = None) -> None:
        self._prefix = prefix
        self._waiting: set[tuple[str, str]] = set()

    def show(self, ev: Any) -> None:
        key = (ev.task_id, ev.step_name)
        woken = ev.event_type == "STEP_STARTED" and key in self._waiting
        if ev.event_type == "WAIT":
            self._waiting.add(key)
        elif ev.event_type.startswith("STEP_"):
            self._waiting.discard(key)
        progress_line(ev, self._prefix(ev) if self._prefix else "", woken=woken)


def _state(t: Any, s: Any) -> str:
    return stepwords.state(str(t.state), str(s.state))


def _attempt(t: Any, s: Any) -> str:
    return stepwords.attempt(t.durable is not None, s.name, s.attempt)


def _error(s: Any) -> str:
    return stepwords.error(s.error, s.losses)


def show_failures(events: Iterable[Any]) -> None:
    """Each failed attempt's cause and what the retry rule decided, from the task's
    FAILED events (`TimeoutError → retry 3/10 in 0.5 s`); nothing when none says."""
    from apollo11.scheduler.cause import verdict_line  # light: no engine, no state

    table = Grid("step", "attempt", "cause → decision")
    shown = 0
    for ev in events:
        if ev.event_type != "STEP_FAILED" or not isinstance(ev.payload, dict):
            continue
        line = verdict_line(ev.payload)
        if line is not None:
            table.add_row(ev.step_name, str(ev.attempt), line)
            shown += 1
    if shown:
        out.print("failed attempts:")
        table.show()


def show_task_view(t: Any) -> None:
    from apollo11.scheduler.taskname import task_name

    shown = task_name(t.workflow, t.input)
    out.print(
        f"task [bold]{escape(t.task_id)}[/bold] ({escape(shown)} v{t.version}): "
        f"[bold]{t.state}[/bold]"
        f" as of event {t.as_of_event_id}"
    )
    table = Grid("step", "state", "attempt", "duration ms", "error")
    for s in t.steps:
        dur = s.duration_ms
        table.add_row(
            s.name, _state(t, s), _attempt(t, s), "" if dur is None else str(dur), _error(s)
        )
    table.show()
    if t.cancelled:
        shown = f" (as {t.cancelled['as']})" if t.cancelled.get("as") else ""
        out.print(
            f"cancelled by {t.cancelled['operator']}{shown}: {t.cancelled['reason']}",
            markup=False,
        )
    if t.state == "PAUSED":
        out.print(
            f"[yellow]paused:[/yellow] a step failed for good and its retries say "
            f"on_exhausted='pause'; `apollo11 retry {escape(t.task_id)} --reason WHY` "
            f"runs it again with fresh budgets"
        )
    for note in t.anomalies:
        out.print(f"[yellow]anomaly:[/yellow] {escape(note)}")
    if t.held:
        h = t.held
        out.print(
            f"[yellow]held:[/yellow] by {escape(str(h.get('by')))}: "
            f"{escape(str(h.get('reason')))} (never purged by retention until "
            f"`apollo11 release {escape(t.task_id)}`)"
        )
    if t.blocked:
        out.print(f"[yellow]blocked:[/yellow] {escape(t.blocked)}")
    if t.waiting:
        # the primary's sentence names how it waits: "queued: ..." or "waiting: ..."
        how, _, why = t.waiting.partition(": ")
        out.print(f"[yellow]{escape(how)}:[/yellow] {escape(why)}" if why else escape(t.waiting))
    if t.priority != DEFAULT_PRIORITY:
        out.print(f"priority: {t.priority} (1 first, default {DEFAULT_PRIORITY})", markup=False)
    if t.parent:
        out.print(
            f"child of task {t.parent.get('task_id')} (spawned at its checkpoint "
            f"{t.parent.get('seq')}; if it closes first: {t.parent.get('close')})",
            markup=False,
        )
    if t.schedule:
        how = "triggered on" if t.schedule.get("triggered") else "fired for"
        out.print(
            f"schedule {t.schedule.get('id')}: {how} {t.schedule.get('nominal_time')}",
            markup=False,
        )
    if t.durable:
        _show_durable(t.durable, cancelled=t.state == "CANCELLED")


def _show_durable(d: dict[str, Any], *, cancelled: bool = False) -> None:
    """A durable task's checkpoints, and what it waits for until when."""
    checkpoints = d.get("checkpoints") or []
    if checkpoints:
        out.print(f"checkpoints: {len(checkpoints)}")
        table = Grid("seq", "kind", "name", "outcome")
        for c in checkpoints:
            if "error" in c:
                outcome = f"error {c['error'].get('type')}: {c['error'].get('message')}"
            elif c.get("timeout"):
                outcome = "timed out"
            else:
                outcome = orjson.dumps(c.get("output")).decode()
            table.add_row(str(c.get("seq")), str(c.get("kind")), str(c.get("name")), outcome[:80])
        table.show()
    from apollo11.scheduler import waits  # only here: a light module, for one command

    kids = waits.spawned(checkpoints)
    if kids:
        out.print(f"children: {', '.join(f'{c} ({close})' for c, close in kids)}", markup=False)
    w = d.get("wait")
    if w:
        said = f"{waits.describe(w)} (checkpoint {w.get('seq')})"
        out.print(stepwords.waiting(said, cancelled=cancelled), markup=False)
    n = d.get("nondeterminism")
    if n:
        out.print(f"[red]non-determinism[/red] at checkpoint {n.get('seq')}", markup=True)
