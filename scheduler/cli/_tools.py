"""What the command offers besides nodes and clients, in front of scheduler/tools:
`dev` (a bundled etcd and a local cluster) and `bench` (side-by-side measurements)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from apollo11.scheduler.cli._shared import Grid, err, fail, print_json


def dev(
    directory: Annotated[
        Path, typer.Option("--dir", help="Where etcd and the nodes keep their data.")
    ] = Path(".apollo11-dev"),
    nodes: Annotated[int, typer.Option("--nodes", help="How many nodes.")] = 3,
    base_port: Annotated[int, typer.Option("--base-port", help="gRPC port of n1; n2 +1...")] = 7411,
    lease_ttl: Annotated[float, typer.Option("--lease-ttl", help="Seconds (>= 2).")] = 5.0,
    workflows: Annotated[str, typer.Option("--workflows", help="Workflow modules.")] = (
        "apollo11.scheduler.examples"
    ),
    http_base_port: Annotated[
        int, typer.Option("--http-base-port", help="Web UI and /metrics of n1; n2 +1...; 0: off.")
    ] = 8411,
    etcd_port: Annotated[int, typer.Option("--etcd-port", help="The bundled etcd's port.")] = 23790,
    workers: Annotated[
        int,
        typer.Option(
            "--workers", help="Worker processes to run the steps (0: the nodes run them)."
        ),
    ] = 0,
) -> None:
    """A bundled etcd and a local cluster of nodes, in one command (Ctrl-C stops it)."""
    from apollo11.scheduler.tools.dev import run

    if lease_ttl < 2:
        raise fail("--lease-ttl must be at least 2 seconds", 2)
    if not 1 <= nodes <= 9:
        raise fail("--nodes must be between 1 and 9", 2)
    if not 0 <= workers <= 32:
        raise fail("--workers must be between 0 and 32", 2)
    raise typer.Exit(
        run(directory, nodes, base_port, lease_ttl, workflows, http_base_port, etcd_port, workers)
    )


BenchJson = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
BenchDir = Annotated[
    Path | None, typer.Option("--dir", help="Where to write (default: the current directory).")
]


def bench_log(
    quick: Annotated[bool, typer.Option("--quick", help="Smaller runs; under a minute.")] = False,
    as_json: BenchJson = False,
    workdir: BenchDir = None,
) -> None:
    """Event log: durable appends, commit latency, replay and recovery, beside baselines."""
    from apollo11.scheduler.tools.bench.log_bench import run, summary_rows

    _measure(run, summary_rows, "log", quick, as_json, workdir)


def bench_engine(
    quick: Annotated[bool, typer.Option("--quick", help="Smaller runs.")] = False,
    as_json: BenchJson = False,
    workdir: BenchDir = None,
) -> None:
    """Engine: five-step no-op tasks/s (fsync on) and scheduler cost per decision vs history."""
    from apollo11.scheduler.tools.bench.engine_bench import run, summary_rows

    _measure(run, summary_rows, "engine", quick, as_json, workdir)


def bench_grpc(
    quick: Annotated[bool, typer.Option("--quick", help="Shorter runs.")] = False,
    as_json: BenchJson = False,
    workdir: BenchDir = None,
) -> None:
    """gRPC: submits/s against one node from many clients, and submit-to-ack latency."""
    from apollo11.scheduler.tools.bench.grpc_bench import run, summary_rows

    _measure(run, summary_rows, "grpc", quick, as_json, workdir)


def bench_durable(
    quick: Annotated[bool, typer.Option("--quick", help="Smaller runs.")] = False,
    as_json: BenchJson = False,
    workdir: BenchDir = None,
) -> None:
    """Durable tasks: memory per waiting task and a node's recovery holding 100k of
    them, 10k timers due together, replay of 1,000 checkpoints, event to wake."""
    from apollo11.scheduler.tools.bench.durable_bench import run, summary_rows

    _measure(run, summary_rows, "durable", quick, as_json, workdir)


def bench_failover(
    cycles: Annotated[int | None, typer.Option("--cycles", help="Kills (default 20).")] = None,
    lease_ttl: Annotated[float, typer.Option("--lease-ttl", help="Seconds.")] = 5.0,
    quick: Annotated[bool, typer.Option("--quick", help="3 kills, shorter runs.")] = False,
    as_json: BenchJson = False,
    workdir: BenchDir = None,
) -> None:
    """Cluster: failover time over N kills, acked writes lost, replication lag, e2e tasks/s."""
    from apollo11.scheduler.tools.bench import failover_bench

    def run(q: bool, w: str | None, progress: Any) -> Any:
        return failover_bench.run(q, w, progress, cycles=cycles, ttl=lease_ttl)

    _measure(run, failover_bench.summary_rows, "failover", quick, as_json, workdir)


def bench_lag(
    rounds: Annotated[int, typer.Option("--rounds", min=1, help="Fresh clusters.")] = 5,
    quick: Annotated[bool, typer.Option("--quick", help="3 s windows.")] = False,
    as_json: BenchJson = False,
    workdir: BenchDir = None,
) -> None:
    """Replication ack latency at 10k events/s (the failover bench's window) on N fresh
    clusters: p99 per round, and its spread."""
    from apollo11.scheduler.tools.bench import failover_bench

    def run(q: bool, w: str | None, progress: Any) -> Any:
        return failover_bench.run_lag(q, w, progress, rounds=rounds)

    _measure(run, failover_bench.lag_rows, "lag", quick, as_json, workdir)


def bench_overload(
    duration: Annotated[
        float | None, typer.Option("--duration", min=1, help="Seconds of flood (default 300).")
    ] = None,
    factor: Annotated[
        float, typer.Option("--factor", min=1, help="The flood, as a multiple of capacity.")
    ] = 2.0,
    sample_every: Annotated[
        float, typer.Option("--sample-every", min=1, help="Seconds between RSS samples.")
    ] = 10.0,
    quick: Annotated[bool, typer.Option("--quick", help="60 s of flood.")] = False,
    connections: Annotated[
        bool,
        typer.Option(
            "--connections",
            help="Connection floods instead (idle, half, churn, halfclose on each port).",
        ),
    ] = False,
    churn_rate: Annotated[
        float | None,
        typer.Option(
            "--churn-rate",
            min=1,
            help="With --connections: churn this many a second, open loop (default: as fast "
            "as one process can, closed loop).",
        ),
    ] = None,
    flood_idle: Annotated[
        bool,
        typer.Option(
            "--flood-idle",
            help="With --connections: the flood under SCHED_IDLE (default: nice 10 only).",
        ),
    ] = False,
    interleave: Annotated[
        bool,
        typer.Option(
            "--interleave",
            help="With --connections: also the client's rate with the flood stopped and "
            "continued every 2 s.",
        ),
    ] = False,
    flood_cpu: Annotated[
        int | None,
        typer.Option(
            "--flood-cpu",
            min=0,
            help="With --connections: the flood on this CPU alone, the node and the client "
            "on the others (as a flood from another host).",
        ),
    ] = None,
    port: Annotated[
        list[str] | None,
        typer.Option("--port", help="With --connections: grpc, peer or http (repeatable)."),
    ] = None,
    pattern: Annotated[
        list[str] | None,
        typer.Option(
            "--pattern", help="With --connections: idle, half, churn or halfclose (repeatable)."
        ),
    ] = None,
    as_json: BenchJson = False,
    workdir: BenchDir = None,
) -> None:
    """Overload: a node flooded at 2x the submits/s it accepts; its RSS every 10 s, the
    slope over the second half, every answer's code. Exits 1 if the node died or
    answered anything but RESOURCE_EXHAUSTED / CANCELLED (shed) / UNAVAILABLE.

    With --connections: floods of connections with no credential on each port of a
    secure node, beside a legitimate client: RSS and open files over time, the
    client's submissions/s during the flood against before it. Exits 1 if the RSS
    did not come back within 20 % or the client got under 0.8x its rate."""
    if connections:
        from apollo11.scheduler.tools.bench import connflood_bench, flood

        ports = port or list(connflood_bench.PORTS)
        patterns = pattern or list(flood.PATTERNS)
        if not set(ports) <= set(connflood_bench.PORTS):
            raise fail(f"--port: one of {', '.join(connflood_bench.PORTS)}", 2)
        if not set(patterns) <= set(flood.PATTERNS):
            raise fail(f"--pattern: one of {', '.join(flood.PATTERNS)}", 2)

        def flood_run(q: bool, w: str | None, progress: Any) -> Any:
            return connflood_bench.run(
                q,
                w,
                progress,
                ports=ports,
                patterns=patterns,  # type: ignore[arg-type]
                churn_rate=churn_rate,
                flood_idle=flood_idle,
                interleave=interleave,
                flood_cpu=flood_cpu,
            )

        rows = connflood_bench.summary_rows
        result = _measure(flood_run, rows, "overload --connections", quick, as_json, workdir)
        why = connflood_bench.failed(result)
        if why:
            raise fail(f"bench overload --connections failed: {why}")
        return
    from apollo11.scheduler.tools.bench import overload_bench

    def run(q: bool, w: str | None, progress: Any) -> Any:
        return overload_bench.run(
            q, w, progress, duration=duration, factor=factor, sample_every=sample_every
        )

    result = _measure(run, overload_bench.summary_rows, "overload", quick, as_json, workdir)
    why = overload_bench.failed(result)
    if why:
        raise fail(f"bench overload failed: {why}")


def bench_workers(
    quick: Annotated[bool, typer.Option("--quick", help="One round, short windows.")] = False,
    as_json: BenchJson = False,
    workdir: BenchDir = None,
) -> None:
    """Remote execution beside embedded: tasks/s with 1, 2, 4 workers, dispatch latency,
    2,000 one-second steps at once, lost-worker detection, a CPU-bound step's effect on
    replication acks; issue 17's targets met or missed."""
    from apollo11.scheduler.tools.bench import workers_bench

    _measure(workers_bench.run, workers_bench.summary_rows, "workers", quick, as_json, workdir)


def bench_cli(
    quick: Annotated[bool, typer.Option("--quick", help="5 rounds instead of 15.")] = False,
    as_json: BenchJson = False,
    workdir: BenchDir = None,
) -> None:
    """CLI start-up: the imports of `status` and `submit` (python -X importtime) against
    a standalone node, beside `import asyncio` as the machine's yardstick; the 120 ms
    budget met or missed."""
    from apollo11.scheduler.tools.bench import cli_bench

    _measure(cli_bench.run, cli_bench.summary_rows, "cli", quick, as_json, workdir)


def bench_schedules(
    firing: Annotated[
        bool,
        typer.Option("--firing", help="Schedules firing on a primary: lateness and CPU."),
    ] = False,
    backfill: Annotated[
        bool,
        typer.Option("--backfill", help="A 10,000-time backfill beside ordinary tasks' dispatch."),
    ] = False,
    failover: Annotated[
        bool,
        typer.Option(
            "--failover", help="Lateness of the times that come during kill -9 failovers."
        ),
    ] = False,
    quick: Annotated[
        bool,
        typer.Option(
            "--quick",
            help="With --firing: 1,000; with --backfill: 20 s phases; with --failover: 1 kill.",
        ),
    ] = False,
    dst_eve: Annotated[
        bool,
        typer.Option("--dst-eve", help="Compute from an hour before Berlin's spring-forward."),
    ] = False,
    schedules: Annotated[
        int | None,
        typer.Option(
            "--schedules", min=1, max=10_000, help="With --failover: how many (default 200)."
        ),
    ] = None,
    every: Annotated[
        str | None,
        typer.Option(
            "--every",
            help="With --failover: their period (default 1s); 10s or more: each kill comes "
            "3 s before a nominal time.",
        ),
    ] = None,
    as_json: BenchJson = False,
    workdir: BenchDir = None,
) -> None:
    """Schedules: the pure part's next times and decisions for 10,000 schedules; with
    --firing, 10,000 `* * * * *` schedules on a real store and engine for two minutes;
    with --backfill, ordinary tasks' dispatch beside a backfill against without it; with
    --failover, schedules firing every second on three nodes whose primary is killed
    (kill -9): the lateness of the times that came during each outage against the
    failover (`--schedules 10000 --every 1m`: the issue's scale, each kill 3 s before a
    minute, so that the new primary fires the whole minute). Exits 1 if the log shows a
    time fired twice or without an outcome."""
    if (schedules is not None or every is not None) and not failover:
        raise fail("--schedules and --every go with --failover", 2)
    if failover:
        from apollo11.scheduler.schedules import parse_duration
        from apollo11.scheduler.tools.bench import schedules_failover_bench as fo

        period = every or fo.EVERY
        try:
            if parse_duration(period).total_seconds() < 1:
                raise ValueError("less than a second")
        except ValueError as e:
            raise fail(f"--every {period!r}: {e}", 2) from e

        def run(q: bool, w: str | None, progress: Any) -> Any:
            n = schedules or fo.SCHEDULES
            return fo.run(q, w, progress, schedules=n, every=period)

        result = _measure(run, fo.summary_rows, "schedules --failover", quick, as_json, workdir)
        why = fo.failed(result)
        if why:
            raise fail(f"bench schedules --failover failed: {why}")
        return
    if backfill:
        from apollo11.scheduler.tools.bench import schedules_backfill_bench as bf

        _measure(bf.run, bf.summary_rows, "schedules --backfill", quick, as_json, workdir)
        return
    if firing:
        from apollo11.scheduler.tools.bench import schedules_fire_bench as fire

        _measure(fire.run, fire.summary_rows, "schedules --firing", quick, as_json, workdir)
        return
    from apollo11.scheduler.tools.bench import schedules_bench

    schedules_bench.main((["--dst-eve"] if dst_eve else []) + (["--json"] if as_json else []))


def bench_flow(
    quick: Annotated[bool, typer.Option("--quick", help="Smaller runs; under a minute.")] = False,
    as_json: BenchJson = False,
    workdir: BenchDir = None,
) -> None:
    """Flow control: dispatch with 100k key values at 1,000 starts/s, a limited
    workflow's throughput, one key's task behind another's 10,000, weighted shares and a
    rate's starts/s, each beside its baseline; the targets met or missed."""
    from apollo11.scheduler.tools.bench import flow_bench

    _measure(flow_bench.run, flow_bench.summary_rows, "flow", quick, as_json, workdir)


def bench_retries(
    quick: Annotated[
        bool, typer.Option("--quick", help="Smaller runs, without the proposed policy's herd.")
    ] = False,
    as_json: BenchJson = False,
    workdir: BenchDir = None,
) -> None:
    """Retries by cause: 1,000 steps failing together spread over seconds by their
    jitter, Retry-After honoured on the log's clock, throughput with 10 % of steps
    failing once against none. Exits 1 if a target is missed."""
    from apollo11.scheduler.tools.bench import retries_bench

    result = _measure(
        retries_bench.run, retries_bench.summary_rows, "retries", quick, as_json, workdir
    )
    why = retries_bench.failed(result)
    if why:
        raise fail(f"bench retries {why}")


def bench_archive(
    quick: Annotated[
        bool,
        typer.Option(
            "--quick", help="One round each way, 2 x 10^5 events to restore, a 90 s soak."
        ),
    ] = False,
    as_json: BenchJson = False,
    workdir: BenchDir = None,
    restore_events: Annotated[
        int,
        typer.Option(
            "--restore-events",
            min=0,
            help="Only the restore, measured for real: a bucket of this many events "
            "(10000000 for the target) built, restored by `apollo11 restore` with and "
            "without a snapshot, a node started on each.",
        ),
    ] = 0,
    keep: Annotated[
        Path | None,
        typer.Option(
            "--keep",
            help="With --restore-events: build the bucket in this directory and keep it; "
            "a run on a directory that holds one measures it again without building.",
        ),
    ] = None,
    pin: Annotated[
        bool,
        typer.Option(
            "--pin",
            help="SeaweedFS on this machine's last CPU and the bench on the others: the "
            "bucket as on a host of its own, not taking the appends' cores.",
        ),
    ] = False,
) -> None:
    """The archive on a real SeaweedFS: append p99 at 10,000 events/s without and with
    it side by side, the bucket's lag, the compression, a node's restore timed
    and extrapolated to 10^7 events, and the data directory's size over a soak with
    task and log retention on (kept flat?). With --restore-events N, only the
    restore, at N events for real. Exits 1 if a target is missed."""
    if restore_events:
        _bench_restore(restore_events, as_json, workdir, keep)
        return
    from apollo11.scheduler.tools.bench import archive_bench

    def run(q: bool, wd: str | None, progress: Any) -> Any:
        return archive_bench.run(q, wd, progress, pin=pin)

    result = _measure(run, archive_bench.summary_rows, "archive", quick, as_json, workdir)
    why = archive_bench.failed(result)
    if why:
        raise fail(f"bench archive {why}")


def _bench_restore(events: int, as_json: bool, workdir: Path | None, keep: Path | None) -> None:
    from apollo11.scheduler.tools.bench import restore_bench

    def run(_quick: bool, wd: str | None, progress: Any) -> Any:
        return restore_bench.run(events, wd, progress, keep=str(keep) if keep else None)

    result = _measure(
        run, restore_bench.summary_rows, "archive --restore-events", False, as_json, workdir
    )
    why = restore_bench.failed(result)
    if why:
        raise fail(f"bench archive {why}")


def _measure(
    run: Any, rows: Any, name: str, quick: bool, as_json: bool, workdir: Path | None
) -> Any:
    def progress(msg: str) -> None:
        err.print(f"[dim]… {msg}[/dim]")

    result = run(quick, str(workdir) if workdir else None, progress)
    if as_json:
        print_json(result)
        return result
    title = f"apollo11 bench {name}" + (" --quick" if quick else "")
    table = Grid("measurement", "result", title=title)
    for label, value in rows(result):
        table.add_row(label, value)
    table.show()
    return result
