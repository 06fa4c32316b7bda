"""The `apollo11` command: its options (the connection, the log format), every
command and group in the order `--help` lists them, and `main`."""

from __future__ import annotations

import logging
import sys
from typing import Annotated, Any

import typer
import typer.core

from apollo11.scheduler import logfmt
from apollo11.scheduler.cli import (
    _archive,
    _cluster,
    _credentials,
    _export,
    _grpcenv,
    _hold,
    _limits,
    _node,
    _replay,
    _roster,
    _schedules,
    _submit,
    _tasks,
    _tools,
    _worker,
)
from apollo11.scheduler.cli import _exitcodes as exitcodes
from apollo11.scheduler.cli._nodeflags import NodeCommand
from apollo11.scheduler.cli._shared import (
    CaOption,
    CertOption,
    KeyOption,
    TokenFileOption,
    connection,
    fail,
    read_token,
)

app = typer.Typer(
    name="apollo11",
    help="Apollo-11: a durable task orchestrator on an append-only event log.",
    epilog=exitcodes.HELP,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        print(f"apollo11 {version('apollo11')}")
        raise typer.Exit(0)


@app.callback()
def _connection(
    ca: CaOption = None,
    cert: CertOption = None,
    key: KeyOption = None,
    token: Annotated[
        str | None,
        typer.Option("--token", envvar="APOLLO11_TOKEN", help="Bearer token.", show_default=False),
    ] = None,
    token_file: TokenFileOption = None,
    log_format: Annotated[
        str,
        typer.Option(
            "--log-format",
            envvar="APOLLO11_LOG_FORMAT",
            help="text, or json: one object a line, with task_id/step/attempt/term "
            "on the lines of a running attempt.",
        ),
    ] = "text",
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_print_version, help="Print the version."
        ),
    ] = False,
) -> None:
    """Apollo-11: a durable task orchestrator on an append-only event log.

    Client commands take the connection's credentials here, before the command
    (`apollo11 --ca ca.pem --token-file me.token status`), or from APOLLO11_*.
    """
    if log_format not in logfmt.FORMATS:
        raise fail(f"--log-format must be text or json, got {log_format!r}", 2)
    if log_format != "text":
        logfmt.configure(log_format, logging.getLogger().level)
    if token is None and token_file is not None:
        token = read_token(token_file)
    connection.update(ca=ca, cert=cert, key=key, token=token)


# Nodes and workers, and a cluster on this machine.
app.command(cls=NodeCommand)(_node.node)
app.command()(_worker.worker)
app.command()(_tools.dev)
# Clients: work in, tasks out, the cluster's view.
app.command()(_submit.submit)
app.command("submit-many")(_submit.submit_many)
app.command()(_tasks.tasks)
app.command()(_tasks.task)
app.command()(_tasks.events)
app.command()(_tasks.retry)
app.command()(_tasks.skip)
app.command()(_tasks.cancel)
app.command()(_tasks.redact)
app.command()(_export.export)
app.command()(_hold.hold)
app.command()(_hold.release)
app.command()(_cluster.health)
app.command()(_cluster.status)
app.command()(_cluster.switchover)
app.command()(_cluster.history)
app.command()(_cluster.workflows)
app.command()(_cluster.workers)
# A data directory, offline.
app.command()(_replay.replay)
app.command("replay-check")(_replay.replay_check)
app.command()(_credentials.certs)
app.command()(_archive.restore)

bench_app = typer.Typer(help="Benchmarks: side-by-side measurements, ratios to baselines.")
app.add_typer(bench_app, name="bench")
bench_app.command("log")(_tools.bench_log)
bench_app.command("engine")(_tools.bench_engine)
bench_app.command("grpc")(_tools.bench_grpc)
bench_app.command("durable")(_tools.bench_durable)
bench_app.command("failover")(_tools.bench_failover)
bench_app.command("lag")(_tools.bench_lag)
bench_app.command("overload")(_tools.bench_overload)
bench_app.command("workers")(_tools.bench_workers)
bench_app.command("cli")(_tools.bench_cli)
bench_app.command("schedules")(_tools.bench_schedules)
bench_app.command("flow")(_tools.bench_flow)
bench_app.command("retries")(_tools.bench_retries)
bench_app.command("archive")(_tools.bench_archive)

token_app = typer.Typer(help="Bearer tokens: create, list, revoke (the node re-reads on SIGHUP).")
app.add_typer(token_app, name="token")
token_app.command("create")(_credentials.token_create)
token_app.command("list")(_credentials.token_list)
token_app.command("revoke")(_credentials.token_revoke)

event_app = typer.Typer(help="External events, which durable tasks wait for (docs/durable.md).")
app.add_typer(event_app, name="event")
event_app.command("send")(_submit.event_send)

schedule_app = typer.Typer(
    help="Schedules: cron, intervals and one-off times that submit a workflow's tasks."
)
app.add_typer(schedule_app, name="schedule")
schedule_app.command("create")(_schedules.create)
schedule_app.command("list")(_schedules.list_)
schedule_app.command("describe")(_schedules.describe)
schedule_app.command("update")(_schedules.update)
schedule_app.command("pause")(_schedules.pause)
schedule_app.command("unpause")(_schedules.unpause)
schedule_app.command("trigger")(_schedules.trigger)
schedule_app.command("backfill")(_schedules.backfill)
schedule_app.command("delete")(_schedules.delete)
schedule_app.command("next")(_schedules.next_)

limits_app = typer.Typer(
    help="Flow control at runtime: limits' load, their max or rate, fairness weights."
)
app.add_typer(limits_app, name="limits")
limits_app.command("show")(_limits.show)
limits_app.command("set")(_limits.set_)
limits_app.command("reset")(_limits.reset)

roster_app = typer.Typer(
    help="The members an election counts (kept in etcd while they are down): list, remove."
)
app.add_typer(roster_app, name="roster")
roster_app.command("list")(_roster.roster_list)
roster_app.command("remove")(_roster.roster_remove)

archive_app = typer.Typer(
    help="The history in the bucket (--archive-url): verify it (restore: `apollo11 restore`)."
)
app.add_typer(archive_app, name="archive")
archive_app.command("verify")(_archive.verify)

config_app = typer.Typer(
    help="Cluster-wide settings in etcd (lease_ttl, sync_replicas, sync_mode): show, set."
)
app.add_typer(config_app, name="config")
config_app.command("show")(_roster.config_show)
config_app.command("set")(_roster.config_set)


def _first_paragraph(self: Any, limit: int = 0) -> str:
    """A command's line in a command list, for click's get_short_help_str: its help's
    first paragraph whole (`limit`, the room click would cut it to, is ignored: in a
    pipe the reader is a script or a log, not an 80-column screen)."""
    text = (self.short_help or self.help or "").strip()
    return " ".join(text.split("\n\n")[0].split())


def main() -> None:
    if not (sys.stdout.isatty() and sys.stderr.isatty()):
        # In a pipe or a file: click's plain help and errors ("Error: No such option:
        # --bogus" on one line), not rich's boxes drawn at 80 columns, which cut
        # and wrap what a script or a log then reads.
        typer.core.HAS_RICH = False
        # and each command's line in a command list whole: click cuts it to fit 80
        # columns ("Run steps for the primary: connect, register, run what is...")
        typer.core.TyperCommand.get_short_help_str = _first_paragraph  # type: ignore[method-assign]
        typer.core.TyperGroup.get_short_help_str = _first_paragraph  # type: ignore[method-assign]
    _grpcenv.for_cli()
    logfmt.configure("text", logging.WARNING)
    app()
