"""The `apollo11` command line."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.table import Table

from scheduler.errors import ApolloError
from scheduler.replay import State, TaskState

app = typer.Typer(
    name="apollo11",
    help="Apollo-11: a durable task orchestrator on an append-only event log.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
bench_app = typer.Typer(help="Benchmarks: side-by-side measurements, ratios to baselines.")
app.add_typer(bench_app, name="bench")

out = Console()
err = Console(stderr=True, soft_wrap=True)


def _print_json(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")


def _fail(message: str, code: int = 1) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}")
    return typer.Exit(code)


@app.command()
def node(
    node_id: Annotated[str | None, typer.Option("--node-id", help="This node's name.")] = None,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Where the log lives.")
    ] = None,
    listen: Annotated[str | None, typer.Option("--listen", help="gRPC HOST:PORT.")] = None,
    advertise: Annotated[
        str | None, typer.Option("--advertise", help="HOST:PORT others reach this node at.")
    ] = None,
    http: Annotated[str | None, typer.Option("--http", help="Metrics/UI HOST:PORT.")] = None,
    workflows: Annotated[
        str | None, typer.Option("--workflows", help="Workflow modules, comma-separated.")
    ] = None,
    etcd: Annotated[
        str | None, typer.Option("--etcd", help="etcd URLs, comma-separated (absent: standalone).")
    ] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Cluster name.")] = None,
    lease_ttl: Annotated[float | None, typer.Option("--lease-ttl", help="Seconds (>= 2).")] = None,
    sync_replicas: Annotated[
        int | None, typer.Option("--sync-replicas", help="Standbys that must ack a write.")
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", help="Steps running at once.")
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="A TOML file with the same settings.")
    ] = None,
) -> None:
    """Run a node (standalone without --etcd). Flags > APOLLO11_* env > --config file."""
    import asyncio

    from scheduler.config import load_settings
    from scheduler.node import serve

    try:
        settings = load_settings(
            config,
            node_id=node_id,
            data_dir=data_dir,
            listen=listen,
            advertise=advertise,
            http=http,
            workflows=workflows,
            etcd=etcd,
            cluster=cluster,
            lease_ttl=lease_ttl,
            sync_replicas=sync_replicas,
            concurrency=concurrency,
        )
    except ValueError as e:
        raise _fail(str(e), 2) from e
    logging.getLogger().setLevel(logging.INFO)
    try:
        code = asyncio.run(serve(settings))
    except ApolloError as e:
        raise _fail(str(e)) from e
    raise typer.Exit(code)


@app.command()
def replay(
    data_dir: Annotated[Path, typer.Option("--data-dir", help="A node's data directory.")],
    until: Annotated[
        int | None, typer.Option("--until", help="Reconstruct the state as of this event id.")
    ] = None,
    task: Annotated[str | None, typer.Option("--task", help="Show only this task.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")] = False,
) -> None:
    """Rebuild state offline from a data directory (read-only; time travel with --until)."""
    from scheduler.store import state_at

    if until is not None and until < 0:
        raise _fail("--until must be an event id (0 or more)", 2)
    try:
        state = state_at(data_dir, until)
    except ApolloError as e:
        raise _fail(str(e)) from e
    if task is not None:
        t = state.peek(task)
        if t is None:
            raise _fail(f"no task {task!r} as of event {state.last_event_id}")
        if as_json:
            _print_json(t.to_dict())
        else:
            _show_task(t, state)
        return
    if as_json:
        _print_json(state.to_dict())
        return
    _show_state(state)


def _show_state(state: State) -> None:
    tasks = sorted(state.iter_tasks(), key=lambda t: t.first_event_id)
    out.print(
        f"state as of event [bold]{state.last_event_id}[/bold], term {state.term}: "
        f"{len(tasks)} tasks"
    )
    table = Table("task", "workflow", "status", "steps done", "last event", "anomalies")
    for t in tasks[-200:]:
        table.add_row(
            t.task_id,
            t.workflow,
            t.status.value,
            f"{t.done}/{len(t.steps)}",
            str(t.last_event_id),
            str(len(t.anomalies)) if t.anomalies else "",
        )
    out.print(table)
    if len(tasks) > 200:
        out.print(f"(the newest 200 of {len(tasks)}; use --json for all)")
    for note in state.anomalies:
        out.print(f"[yellow]anomaly:[/yellow] {note}")


def _show_task(t: TaskState, state: State) -> None:
    out.print(
        f"task [bold]{t.task_id}[/bold] ({t.workflow} v{t.version}): {t.status.value} "
        f"as of event {state.last_event_id}"
    )
    table = Table("step", "status", "attempt", "duration ms", "error")
    for s in t.steps.values():
        dur = (
            str(s.finished_ms - s.started_ms)
            if s.finished_ms is not None and s.started_ms is not None
            else ""
        )
        table.add_row(s.name, s.status.value, str(s.attempt), dur, s.error or "")
    out.print(table)
    for note in t.anomalies:
        out.print(f"[yellow]anomaly:[/yellow] {note}")


@bench_app.command("log")
def bench_log(
    quick: Annotated[bool, typer.Option("--quick", help="Smaller runs; under a minute.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    workdir: Annotated[
        Path | None, typer.Option("--dir", help="Where to write (default: the current directory).")
    ] = None,
) -> None:
    """Event log: durable appends, commit latency, replay and recovery, beside baselines."""
    from scheduler.bench.log_bench import run, summary_rows

    def progress(msg: str) -> None:
        err.print(f"[dim]… {msg}[/dim]")

    result = run(quick, str(workdir) if workdir else None, progress)
    if as_json:
        _print_json(result)
        return
    table = Table(
        "measurement", "result", title="apollo11 bench log" + (" --quick" if quick else "")
    )
    for name, value in summary_rows(result):
        table.add_row(name, value)
    out.print(table)


@bench_app.command("engine")
def bench_engine(
    quick: Annotated[bool, typer.Option("--quick", help="Smaller runs.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    workdir: Annotated[
        Path | None, typer.Option("--dir", help="Where to write (default: the current directory).")
    ] = None,
) -> None:
    """Engine: five-step no-op tasks/s (fsync on) and scheduler cost per decision vs history."""
    from scheduler.bench.engine_bench import run, summary_rows

    _bench(run, summary_rows, "engine", quick, as_json, workdir)


def _bench(
    run: Any, rows: Any, name: str, quick: bool, as_json: bool, workdir: Path | None
) -> None:
    def progress(msg: str) -> None:
        err.print(f"[dim]… {msg}[/dim]")

    result = run(quick, str(workdir) if workdir else None, progress)
    if as_json:
        _print_json(result)
        return
    title = f"apollo11 bench {name}" + (" --quick" if quick else "")
    table = Table("measurement", "result", title=title)
    for label, value in rows(result):
        table.add_row(label, value)
    out.print(table)


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    app()


if __name__ == "__main__":
    main()
