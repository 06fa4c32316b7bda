"""A data directory read offline, no node running: `replay` (the state as of any
event) and `replay-check` (the durable runs the code about to be deployed would
break)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from apollo11.scheduler.cli._exitcodes import ExitCode
from apollo11.scheduler.cli._output import escape
from apollo11.scheduler.cli._shared import AsJson, Grid, fail, out, print_json
from apollo11.scheduler.errors import (
    ApolloError,
    CorruptLogError,
    HistoryGoneError,
    SnapshotError,
    SnapshotMismatchError,
)

if TYPE_CHECKING:
    from apollo11.scheduler.state import State, TaskState

# A damaged data directory: `replay` says so in one line and exits 2 (1: anything else).
DAMAGE = (CorruptLogError, SnapshotError, SnapshotMismatchError)

DataDir = Annotated[Path, typer.Option("--data-dir", help="A node's data directory.")]


def replay(
    data_dir: DataDir,
    until: Annotated[
        int | None, typer.Option("--until", help="Reconstruct the state as of this event id.")
    ] = None,
    task: Annotated[str | None, typer.Option("--task", help="Show only this task.")] = None,
    archive_url: Annotated[
        str,
        typer.Option(
            "--archive-url",
            envvar="APOLLO11_ARCHIVE_URL",
            help="s3://BUCKET/PREFIX, as the nodes' --archive-url: events the data "
            "directory no longer holds (log retention) are read from there (slower).",
        ),
    ] = "",
    as_json: AsJson = False,
) -> None:
    """Rebuild state offline from a data directory (read-only; time travel with --until)."""
    if until is not None and until < 0:
        raise fail("--until must be an event id (0 or more)", 2)
    state = _read_state(data_dir, until, archive_url=archive_url)
    if task is not None:
        t = state.peek(task)
        if t is None:
            raise fail(state.not_found(task, state.last_event_id), ExitCode.NOT_FOUND)
        if as_json:
            print_json(t.to_dict())
        else:
            _show_task(t, state)
        return
    if as_json:
        print_json(state.to_dict())
        return
    _show_state(state)


def _read_state(
    data_dir: Path, until: int | None = None, *, refused: int = 1, archive_url: str = ""
) -> State:
    """The state a data directory's log and snapshots rebuild, or the command's end
    in one line: exit 2 for a damaged or unreadable directory, `refused` for an
    error the store names itself. Events the directory no longer holds (log
    retention) are read from the bucket when `archive_url` names one."""
    from apollo11.scheduler.state import state_at

    try:
        try:
            return state_at(data_dir, until)
        except HistoryGoneError as e:
            if not archive_url:
                raise HistoryGoneError(
                    f"events before {e.first} are no longer on this node's disk and no "
                    f"--archive-url is set ({e})",
                    first=e.first,
                ) from e
            return _from_bucket(data_dir, until, archive_url)
    except DAMAGE as e:
        raise fail(str(e), 2) from e
    except ApolloError as e:
        raise fail(str(e), refused) from e
    except OSError as e:  # anything the log and snapshot code did not name itself
        raise fail(f"cannot read {e.filename or data_dir}: {e.strerror or e}", 2) from e


def _from_bucket(data_dir: Path, until: int | None, archive_url: str) -> State:
    from apollo11.scheduler.bucket import BucketHistory, open_bucket, state_from_bucket
    from apollo11.scheduler.cli._shared import err

    history = BucketHistory(open_bucket(archive_url))
    travelled = state_from_bucket(history, data_dir, until)
    err.print(travelled.note, markup=False)
    return travelled.state


def replay_check(
    data_dir: DataDir,
    workflows_: Annotated[
        str,
        typer.Option(
            "--workflows", help="The workflow modules about to be deployed, comma-separated."
        ),
    ],
    finished: Annotated[
        bool,
        typer.Option(
            "--finished", help="Check finished runs too (they never replay again otherwise)."
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Replay the durable runs a log records against the code about to be deployed:
    which runs would break, at which checkpoint, what the log holds and what the code
    asks for. Exit 1 if any would (a deploy gate); read-only, runs no side effect.
    Checked: the runs that will replay (waiting, running, non-deterministic)."""
    from apollo11.scheduler.durable import check_all
    from apollo11.scheduler.workflow import Registry

    registry = Registry()
    try:
        for module in (m.strip() for m in workflows_.split(",") if m.strip()):
            registry.load_module(module)
    except ApolloError as e:
        raise fail(str(e), 2) from e
    # 2, not 1, when nothing could be checked: 1 says a run would break
    state = _read_state(data_dir, refused=2)
    runs, skipped = check_all(state.iter_tasks(), registry, state.first_event, finished=finished)
    bad = [r for r in runs if r.outcome != "ok"]
    if as_json:
        print_json(
            {
                "runs": len(runs),
                "breaking": [
                    {"task_id": r.task_id, "workflow": r.workflow, "version": r.version,
                     "outcome": r.outcome, "detail": r.detail, "report": dict(r.report)}
                    for r in bad
                ],
                "skipped": [{"workflow": n, "version": v, "runs": c} for n, v, c in skipped],
            }
        )  # fmt: skip
    else:
        per: dict[tuple[str, int], list[int]] = {}
        for r in runs:
            counts = per.setdefault((r.workflow, r.version), [0, 0])
            counts[0] += 1
            counts[1] += r.outcome != "ok"
        table = Grid("workflow", "version", "runs", "would break")
        for (name, version), (n, broken) in sorted(per.items()):
            table.add_row(name, str(version), str(n), str(broken))
        for name, version, n in skipped:
            table.add_row(name, str(version), str(n), "not loaded: not checked")
        if per or skipped:
            table.show()
        else:
            out.print("no durable run in this log")
        for r in bad:
            out.print(
                f"{r.task_id} ({r.workflow} v{r.version}): {escape(r.detail)}", soft_wrap=True
            )
    if bad:
        raise typer.Exit(1)


def _show_state(state: State) -> None:
    tasks = sorted(state.iter_tasks(), key=lambda t: t.first_event_id)
    out.print(
        f"state as of event [bold]{state.last_event_id}[/bold], term {state.term}: "
        f"{len(tasks)} tasks"
    )
    table = Grid("task", "workflow", "status", "steps done", "last event", "anomalies")
    for t in tasks[-200:]:
        table.add_row(
            t.task_id,
            t.workflow,
            t.status.value,
            f"{t.done}/{len(t.steps)}",
            str(t.last_event_id),
            str(len(t.anomalies)) if t.anomalies else "",
        )
    table.show()
    if len(tasks) > 200:
        out.print(f"(the newest 200 of {len(tasks)}; use --json for all)")
    for note in state.anomalies:
        out.print(f"[yellow]anomaly:[/yellow] {escape(note)}")
    if state.schedules:
        _show_schedules(state)


def _show_schedules(state: State) -> None:
    """Each schedule as of the event: how far it got (its watermark), its last outcome."""
    from datetime import timedelta

    from apollo11.scheduler.schedules import EPOCH, iso

    def iso_ms(ms: int) -> str:
        return iso(EPOCH + timedelta(milliseconds=ms))

    table = Grid("schedule", "workflow", "paused", "watermark (UTC)", "occurrences", "last")
    for sid, s in sorted(state.schedules.items()):
        last = s.last()
        table.add_row(
            sid,
            s.workflow,
            "paused" if s.paused else "",
            "" if s.watermark_ms is None else iso_ms(s.watermark_ms),
            str(len(s.occurrences)),
            "" if last is None else f"{last.outcome} {iso_ms(last.nominal_ms)}",
        )
    table.show()


def _show_task(t: TaskState, state: State) -> None:
    out.print(
        f"task [bold]{t.task_id}[/bold] ({t.workflow} v{t.version}): {t.status.value} "
        f"as of event {state.last_event_id}"
    )
    table = Grid("step", "status", "attempt", "duration ms", "error")
    for s in t.steps.values():
        dur = (
            str(s.finished_ms - s.started_ms)
            if s.finished_ms is not None and s.started_ms is not None
            else ""
        )
        table.add_row(s.name, s.status.value, str(s.attempt), dur, s.error or "")
    table.show()
    for note in t.anomalies:
        out.print(f"[yellow]anomaly:[/yellow] {escape(note)}")
