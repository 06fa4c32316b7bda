"""The `apollo11` command line."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import typer
import typer.core

from apollo11.scheduler import logfmt
from apollo11.scheduler.clio import Output, escape
from apollo11.scheduler.errors import (
    ApolloError,
    CorruptLogError,
    SnapshotError,
    SnapshotMismatchError,
)
from apollo11.scheduler.taskstatus import TaskStatus

if TYPE_CHECKING:
    from apollo11.scheduler.replay import State, TaskState

# whether the operator set GRPC_VERBOSITY (main sets a default)
_GRPC_VERBOSITY_GIVEN = False
GIL_SWITCH_S = 0.001  # a node's sys.setswitchinterval (see `node`)
NODE_GRPC_EXPERIMENTS = (  # gRPC's I/O path in a node (see `node`)
    "-event_engine_client,-event_engine_listener,"
    "-event_engine_for_all_other_endpoints,-event_engine_callback_cq"
)

app = typer.Typer(
    name="apollo11",
    help="Apollo-11: a durable task orchestrator on an append-only event log.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
bench_app = typer.Typer(help="Benchmarks: side-by-side measurements, ratios to baselines.")
app.add_typer(bench_app, name="bench")
token_app = typer.Typer(help="Bearer tokens: create, list, revoke (the node re-reads on SIGHUP).")
app.add_typer(token_app, name="token")
event_app = typer.Typer(help="External events, which durable tasks wait for (docs/durable.md).")
app.add_typer(event_app, name="event")
roster_app = typer.Typer(
    help="The members an election counts (kept in etcd while they are down): list, remove."
)
app.add_typer(roster_app, name="roster")
config_app = typer.Typer(
    help="Cluster-wide settings in etcd (lease_ttl, sync_replicas, sync_mode): show, set."
)
app.add_typer(config_app, name="config")

# How client commands reach the nodes (the app's own options, before the command).
_conn: dict[str, Any] = {}


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        print(f"apollo11 {version('apollo11')}")
        raise typer.Exit(0)


# The connection's credentials: before any client command (the app's callback), and
# on `worker`, whose process holds its own connection.
CaOption = Annotated[
    Path | None,
    typer.Option("--ca", envvar="APOLLO11_CA", help="CA that signed the nodes' certificates."),
]
CertOption = Annotated[
    Path | None,
    typer.Option("--cert", envvar="APOLLO11_CERT", help="Client certificate (PEM)."),
]
KeyOption = Annotated[
    Path | None, typer.Option("--key", envvar="APOLLO11_KEY", help="Its key (PEM).")
]
TokenFileOption = Annotated[
    Path | None,
    typer.Option("--token-file", envvar="APOLLO11_TOKEN_FILE", help="File holding the token."),
]


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
        raise _fail(f"--log-format must be text or json, got {log_format!r}", 2)
    if log_format != "text":
        logfmt.configure(log_format, logging.getLogger().level)
    if token is None and token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as e:
            raise _fail(f"--token-file {token_file}: {e.strerror}", 2) from e
    _conn.update(ca=ca, cert=cert, key=key, token=token)


# A damaged data directory: `replay` says so in one line and exits 2 (1: anything else).
DAMAGE = (CorruptLogError, SnapshotError, SnapshotMismatchError)

out = Output()
err = Output(stderr=True)


class _Grid:
    """A table: drawn with rich on a terminal; in a pipe, plain columns two spaces
    apart with nothing cut (full task ids and addresses for grep, awk and cut)."""

    def __init__(self, *headers: str, title: str | None = None) -> None:
        self.headers = headers
        self.title = title
        self.rows: list[tuple[str, ...]] = []

    def add_row(self, *cells: str) -> None:
        self.rows.append(cells)

    def show(self) -> None:
        if out.is_terminal:
            from rich.table import Table
            from rich.text import Text

            table = Table(*self.headers, title=self.title)
            for row in self.rows:
                # Text, not markup: cells hold names and errors from submitted input
                table.add_row(*(Text(c) for c in row))
            out.print(table)
            return
        rows = [self.headers, *self.rows]
        widths = [max(len(r[i]) for r in rows) for i in range(len(self.headers))]
        for r in rows:
            line = "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True))
            sys.stdout.write(line.rstrip() + "\n")
        sys.stdout.flush()


def _print_json(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")


def _fail(message: str, code: int = 1) -> typer.Exit:
    # escaped: a path or a reason may hold "[...]", which rich would read as markup
    err.print(f"[red]error:[/red] {escape(message)}")
    return typer.Exit(code)


class _NodeCommand(typer.core.TyperCommand):
    """`node --help` shows each flag's APOLLO11_* variable and default, read from the
    settings (NodeSettings) at help time only: a command's start-up stays light."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        from apollo11.scheduler.config import NodeSettings

        fields = NodeSettings.model_fields
        for param in self.params:
            f = fields.get(param.name or "")
            help_ = getattr(param, "help", None)
            if f is None or help_ is None or "[env APOLLO11_" in help_:
                continue
            shown = f"env APOLLO11_{(param.name or '').upper()}"
            default = f.get_default(call_default_factory=True)
            if default not in (None, "", [], ()) and f.is_required() is False:
                shown += f"; default {default}"
            param.help = f"{help_} [{shown}]"  # type: ignore[attr-defined]
        super().format_help(ctx, formatter)


@app.command(cls=_NodeCommand)
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
    http_allowed_hosts: Annotated[
        str | None,
        typer.Option(
            "--http-allowed-hosts", help="More Host names the UI answers to, comma-separated."
        ),
    ] = None,
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
    execution: Annotated[
        str | None,
        typer.Option(
            "--execution",
            help="Where steps run: embedded (in this process), remote (on `apollo11 "
            "worker` processes; this node only dispatches) or both (its own --concurrency "
            "slots first, then its workers').",
        ),
    ] = None,
    worker_heartbeat_timeout: Annotated[
        float | None,
        typer.Option(
            "--worker-heartbeat-timeout",
            help="Seconds of silence before a worker's attempts are lost (default 10).",
        ),
    ] = None,
    worker_heartbeat_interval: Annotated[
        float | None,
        typer.Option(
            "--worker-heartbeat-interval", help="Seconds between a worker's heartbeats (2)."
        ),
    ] = None,
    tls_cert: Annotated[
        Path | None, typer.Option("--tls-cert", help="TLS certificate for gRPC and HTTP.")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option("--tls-key", help="Its private key.")] = None,
    client_ca: Annotated[
        Path | None,
        typer.Option("--client-ca", help="Require client certificates signed by this CA."),
    ] = None,
    tokens_file: Annotated[
        Path | None,
        typer.Option("--tokens-file", help="Token hashes and roles (re-read on SIGHUP)."),
    ] = None,
    peer_listen: Annotated[
        str | None, typer.Option("--peer-listen", help="HOST:PORT of the replication port.")
    ] = None,
    peer_advertise: Annotated[
        str | None, typer.Option("--peer-advertise", help="HOST:PORT peers reach it at.")
    ] = None,
    peer_ca: Annotated[Path | None, typer.Option("--peer-ca", help="The cluster CA.")] = None,
    peer_cert: Annotated[
        Path | None, typer.Option("--peer-cert", help="This node's peer certificate.")
    ] = None,
    peer_key: Annotated[Path | None, typer.Option("--peer-key", help="Its private key.")] = None,
    allow_shell: Annotated[
        bool, typer.Option("--allow-shell", help="Allow shell steps (every node must).")
    ] = False,
    insecure: Annotated[
        bool,
        typer.Option("--insecure", help="Run open beyond loopback (no TLS or tokens)."),
    ] = False,
    metrics_open: Annotated[
        bool, typer.Option("--metrics-open", help="Serve /metrics without a credential.")
    ] = False,
    examples_dir: Annotated[
        Path | None,
        typer.Option(
            "--examples-dir", help="Where apollo11.scheduler.examples may write (default: temp)."
        ),
    ] = None,
    max_watch_streams: Annotated[
        int | None, typer.Option("--max-watch-streams", help="Open WatchTask streams (1000).")
    ] = None,
    max_pending_writes: Annotated[
        int | None,
        typer.Option("--max-pending-writes", help="Submissions waiting to commit (10000)."),
    ] = None,
    max_tasks_in_memory: Annotated[
        int | None,
        typer.Option("--max-tasks-in-memory", help="Tasks held in memory (50000)."),
    ] = None,
    max_streams_per_connection: Annotated[
        int | None,
        typer.Option(
            "--max-streams-per-connection", help="Concurrent calls per connection (1000)."
        ),
    ] = None,
    max_message_bytes: Annotated[
        int | None, typer.Option("--max-message-bytes", help="Largest request (16 MiB).")
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            envvar="APOLLO11_CONFIG",
            show_envvar=False,  # said in the same words as every other flag's
            help="A TOML file with the same settings. [env APOLLO11_CONFIG]",
        ),
    ] = None,
    etcd_user: Annotated[
        str | None, typer.Option("--etcd-user", help="etcd user (etcd auth enabled).")
    ] = None,
    etcd_password_file: Annotated[
        Path | None,
        typer.Option(
            "--etcd-password-file",
            help="File holding the etcd password (or APOLLO11_ETCD_PASSWORD).",
        ),
    ] = None,
    etcd_ca: Annotated[
        Path | None, typer.Option("--etcd-ca", help="PEM CA that signed etcd's certificate.")
    ] = None,
    etcd_cert: Annotated[
        Path | None, typer.Option("--etcd-cert", help="PEM client certificate for etcd.")
    ] = None,
    etcd_key: Annotated[
        Path | None, typer.Option("--etcd-key", help="PEM key of --etcd-cert.")
    ] = None,
    otlp_endpoint: Annotated[
        str | None,
        typer.Option(
            "--otlp-endpoint",
            help="Send traces to this OpenTelemetry collector (OTLP/gRPC, e.g. "
            "http://127.0.0.1:4317; needs apollo11[otlp]). Default: OTEL_EXPORTER_OTLP_ENDPOINT.",
        ),
    ] = None,
) -> None:
    """Run a node (standalone without --etcd). Flags > APOLLO11_* env > --config file."""
    import asyncio

    # gRPC core's older I/O path reads and writes sockets on the poller thread that
    # already wakes for the completion queue. Its EventEngine, on by default for
    # Python in the grpcio this runs on (grpc/grpc#41432), does it on threads of its
    # own and hands every message over: more context switches per call, and a
    # higher replication ack p99 (docs/benchmarks.md, "Figures behind the knobs").
    # gRPC reads this once, when it is imported; an operator's own GRPC_EXPERIMENTS
    # (even empty) wins.
    # A grpcio without these experiments logs "Unknown experiment" and goes on.
    ours = "GRPC_EXPERIMENTS" not in os.environ
    if ours:
        os.environ["GRPC_EXPERIMENTS"] = NODE_GRPC_EXPERIMENTS
    # Nor any of gRPC core's own lines: anyone who can reach a port chooses how many
    # it writes (one error per TLS handshake naming a server name not in the
    # certificate: 3,950 lines for 4,000 connections, issue 28). What goes wrong
    # with a node's own calls reaches its log as their status; GRPC_VERBOSITY=ERROR
    # brings gRPC's lines back, to diagnose a handshake.
    if not _GRPC_VERBOSITY_GIVEN:
        os.environ["GRPC_VERBOSITY"] = "NONE"
    import grpc  # noqa: F401  (reads it now)

    if ours:
        del os.environ["GRPC_EXPERIMENTS"]  # not for the processes of shell steps
    from apollo11.scheduler.config import load_settings
    from apollo11.scheduler.node import serve

    try:
        settings = load_settings(
            config,
            node_id=node_id,
            data_dir=data_dir,
            listen=listen,
            advertise=advertise,
            http=http,
            http_allowed_hosts=http_allowed_hosts,
            workflows=workflows,
            etcd=etcd,
            cluster=cluster,
            lease_ttl=lease_ttl,
            sync_replicas=sync_replicas,
            concurrency=concurrency,
            execution=execution,
            worker_heartbeat_timeout=worker_heartbeat_timeout,
            worker_heartbeat_interval=worker_heartbeat_interval,
            tls_cert=tls_cert,
            tls_key=tls_key,
            client_ca=client_ca,
            tokens_file=tokens_file,
            peer_listen=peer_listen,
            peer_advertise=peer_advertise,
            peer_ca=peer_ca,
            peer_cert=peer_cert,
            peer_key=peer_key,
            # a flag not given leaves the environment's or the file's value
            allow_shell=allow_shell or None,
            insecure=insecure or None,
            metrics_open=metrics_open or None,
            etcd_user=etcd_user,
            etcd_password_file=etcd_password_file,
            etcd_ca=etcd_ca,
            etcd_cert=etcd_cert,
            etcd_key=etcd_key,
            examples_dir=examples_dir,
            max_watch_streams=max_watch_streams,
            max_pending_writes=max_pending_writes,
            max_tasks_in_memory=max_tasks_in_memory,
            max_streams_per_connection=max_streams_per_connection,
            max_message_bytes=max_message_bytes,
            otlp_endpoint=otlp_endpoint,
        )
    except ValueError as e:
        raise _fail(str(e), 2) from e
    logging.getLogger().setLevel(logging.INFO)
    _tracing(settings.otlp_endpoint, f"apollo11-node-{settings.node_id}")
    # The event loop waits for the GIL whenever a background thread holds it (the
    # snapshot writer encoding and merging archive chunks): 5 ms by default, each
    # time; 1 ms halves the ack p99's tail (docs/benchmarks.md, "Figures behind the
    # knobs").
    sys.setswitchinterval(GIL_SWITCH_S)
    try:
        code = asyncio.run(serve(settings))
    except ApolloError as e:
        raise _fail(str(e)) from e
    except (Exception, asyncio.CancelledError):
        # CancelledError is no Exception: a stray cancel of the main task would end the
        # node with a bare traceback and exit status 1, no line saying it stopped
        logging.getLogger("apollo11.node").critical("the node stopped on an error", exc_info=True)
        raise typer.Exit(70) from None
    except SystemExit as e:  # sys.exit() from inside the loop: legal, but say who did it
        logging.getLogger("apollo11.node").critical(
            "the node stopped: SystemExit(%r) raised inside it", e.code, exc_info=True
        )
        raise
    raise typer.Exit(code)


def _tracing(endpoint: str, service: str) -> None:
    """Traces to an OTLP collector, when one is named (here or by the standard variable)."""
    endpoint = endpoint or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")
    if not endpoint:
        return
    from apollo11.scheduler import tracing

    try:
        logging.getLogger("apollo11").info("%s", tracing.configure(endpoint, service=service))
    except RuntimeError as e:
        raise _fail(str(e), 2) from e


def _labels(spec: str | None) -> dict[str, str]:
    """`k=v,k2=v2` -> a dict; raises ValueError naming the bad part."""
    labels: dict[str, str] = {}
    for part in (spec or "").split(","):
        if not part.strip():
            continue
        k, sep, v = part.partition("=")
        k, v = k.strip(), v.strip()
        if not sep or not k:
            raise ValueError(f"--labels: {part.strip()!r} is not KEY=VALUE")
        if k in labels:
            raise ValueError(f"--labels: {k!r} is given twice")
        labels[k] = v
    return labels


@app.command()
def worker(
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            envvar="APOLLO11_SERVER",
            help="HOST:PORT[,HOST:PORT...] of any nodes; the worker finds the primary.",
        ),
    ] = None,
    workflows: Annotated[
        str | None,
        typer.Option(
            "--workflows", envvar="APOLLO11_WORKFLOWS", help="Workflow modules, comma-separated."
        ),
    ] = None,
    slots: Annotated[
        int | None,
        typer.Option(
            "--slots", envvar="APOLLO11_WORKER_SLOTS", help="Attempts at once (default: CPUs)."
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            envvar="APOLLO11_WORKER_NAME",
            help=(
                "Unique name (default HOST-PID). On a node with tokens it is bound to the "
                "credential: the token's (or certificate's) NAME or NAME/anything, and the "
                "default is NAME/HOST-PID; any other is refused."
            ),
        ),
    ] = None,
    labels: Annotated[
        str | None,
        typer.Option("--labels", envvar="APOLLO11_WORKER_LABELS", help="KEY=VALUE,..."),
    ] = None,
    isolation: Annotated[
        str,
        typer.Option(
            "--isolation",
            envvar="APOLLO11_WORKER_ISOLATION",
            help="thread: in this process; process: each attempt in a child process.",
        ),
    ] = "thread",
    stop_grace: Annotated[
        float,
        typer.Option("--stop-grace", help="Seconds running attempts get on SIGTERM."),
    ] = 30.0,
    log_level: Annotated[
        str,
        typer.Option(
            "--log-level",
            envvar="APOLLO11_LOG_LEVEL",
            help="info, or debug for a line per attempt started and finished.",
        ),
    ] = "info",
    ca: CaOption = None,
    cert: CertOption = None,
    key: KeyOption = None,
    token_file: TokenFileOption = None,
) -> None:
    """Run steps for the primary: connect, register, run what is assigned (Ctrl-C drains).

    On a node with tokens a worker's name is its credential's name or one beneath
    it (--name NAME/...), by default NAME/HOST-PID: no other credential can take
    its name, nor its running attempts after a failover."""
    import asyncio

    # the worker's package is loaded here only: other commands do not pay for it
    from apollo11.scheduler.workflow import Registry

    if slots is None:
        slots = os.cpu_count() or 1
    if slots < 1:
        raise _fail(f"--slots must be at least 1, got {slots}", 2)
    if isolation not in ("thread", "process"):
        raise _fail(f"--isolation must be thread or process, got {isolation!r}", 2)
    if stop_grace < 0:
        raise _fail("--stop-grace must be 0 or more seconds", 2)
    modules = [m.strip() for m in (workflows or "").split(",") if m.strip()]
    if not modules:
        raise _fail("--workflows: name the modules that define the workflows to run", 2)
    try:
        parsed = _labels(labels)
    except ValueError as e:
        raise _fail(str(e), 2) from e
    registry = Registry()
    for module in modules:
        try:
            registry.load_module(module)
        except ApolloError as e:
            raise _fail(f"--workflows: {e}", 2) from e
    token = _conn.get("token")
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as e:
            raise _fail(f"--token-file {token_file}: {e.strerror}", 2) from e
    from apollo11.scheduler.worker import Worker, serve

    # a step's own spans (and the worker's) go where OTEL_EXPORTER_OTLP_ENDPOINT says
    _tracing("", f"apollo11-worker-{name or 'worker'}")
    try:
        w = Worker(
            server,
            registry,
            name=name,
            slots=slots,
            labels=parsed,
            isolation="process" if isolation == "process" else "thread",
            modules=modules,
            ca=ca or _conn.get("ca"),
            cert=cert or _conn.get("cert"),
            key=key or _conn.get("key"),
            token=token,
        )
    except ApolloError as e:
        raise _fail(str(e), 2) from e
    levels = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}
    if log_level.lower() not in levels:
        raise _fail(f"--log-level must be one of {', '.join(levels)}, got {log_level!r}", 2)
    logging.getLogger().setLevel(levels[log_level.lower()])
    raise typer.Exit(asyncio.run(serve(w, grace_s=stop_grace)))


@app.command()
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
        raise _fail("--lease-ttl must be at least 2 seconds", 2)
    if not 1 <= nodes <= 9:
        raise _fail("--nodes must be between 1 and 9", 2)
    if not 0 <= workers <= 32:
        raise _fail("--workers must be between 0 and 32", 2)
    raise typer.Exit(
        run(directory, nodes, base_port, lease_ttl, workflows, http_base_port, etcd_port, workers)
    )


# ------------------------------------------------------------- client commands

Server = Annotated[
    str | None,
    typer.Option(
        "--server",
        envvar="APOLLO11_SERVER",
        help="HOST:PORT[,HOST:PORT...] of any nodes (default 127.0.0.1:7411).",
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


def _client(server: str | None) -> Any:
    from apollo11.scheduler.client import Client

    return Client(server, **_conn)


def _run(coro: Any) -> Any:
    import asyncio

    try:
        return asyncio.run(coro)
    except ApolloError as e:
        raise _fail(str(e)) from e


def _input(value: str | None) -> Any:
    if value is None:
        return None
    text = value
    if value.startswith("@"):
        path = Path(value[1:])
        try:
            text = path.read_text()
        except OSError as e:
            raise _fail(f"--input {value}: {e.strerror}", 2) from e
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise _fail(f"--input is not valid JSON: {e}", 2) from e


def _ms(ms: int | None) -> str:
    if not ms:
        return ""
    import datetime

    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%H:%M:%S.%f")[:-3]


def _operator(value: str | None) -> str:
    import getpass

    return value or getpass.getuser()


@app.command()
def submit(
    workflow: Annotated[str, typer.Argument(help="A workflow name, or 'shell' for a JSON DAG.")],
    input: Annotated[str | None, typer.Option("--input", help="JSON, or @file with JSON.")] = None,
    idempotency_key: Annotated[
        str | None, typer.Option("--idempotency-key", help="The same key returns the same task.")
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Show progress; exit 1 unless it succeeds.")
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option("--quiet", "-q", help="Print the task id alone: tid=$(apollo11 submit -q …)."),
    ] = False,
    server: Server = None,
    as_json: AsJson = False,
) -> None:
    """Submit a task (for 'shell', --input is the DAG document)."""
    data = _input(input)
    if quiet and (wait or as_json):
        raise _fail("--quiet prints the task id alone: not with --wait or --json", 2)

    async def go() -> int:
        async with _client(server) as c:
            if workflow == "shell":
                sub = await c.submit_shell(data, idempotency_key=idempotency_key)
            else:
                sub = await c.submit(workflow, data, idempotency_key=idempotency_key)
            if as_json and not wait:
                _print_json({"task_id": sub.task_id, "created": sub.created})
                return 0
            if quiet:
                out.print(sub.task_id, markup=False)
                return 0
            if not as_json:
                verb = "submitted" if sub.created else "already submitted (same idempotency key)"
                out.print(f"{verb}: task [bold]{sub.task_id}[/bold]")
            if not wait:
                return 0
            async for ev in c.watch(sub.task_id):
                if not as_json:
                    _progress_line(ev)
            task = await c.task(sub.task_id)
            if as_json:
                _print_json(task.to_json())
            else:
                _show_task_view(task)
            return 0 if task.state == "SUCCEEDED" else 1

    raise typer.Exit(_run(go()))


SUBMIT_BATCH = 1000  # the server's limit per SubmitTasks call
SUBMIT_BATCH_BYTES = 8 * 1024 * 1024


@app.command("submit-many")
def submit_many(
    path: Annotated[
        str,
        typer.Argument(
            help='JSON lines, one task each: {"workflow": ..., "input": ..., '
            '"idempotency_key": ...}; - for standard input.'
        ),
    ],
    server: Server = None,
    as_json: AsJson = False,
) -> None:
    """Submit many tasks, 1000 per call (one write and one fsync on the primary for each
    call). Every line is checked before anything is sent; give each task an
    idempotency key to make running the command again safe."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as e:
        raise _fail(f"cannot read {path}: {e}", 2) from None
    items: list[dict[str, Any]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise _fail(f"line {n}: not JSON: {e}", 2) from None
        if not isinstance(item, dict) or not isinstance(item.get("workflow"), str):
            raise _fail(f'line {n}: expected an object with a "workflow" string', 2)
        items.append(item)
    if not items:
        raise _fail(f"{path}: no tasks", 2)

    # Calls of at most SUBMIT_BATCH tasks and about SUBMIT_BATCH_BYTES of JSON (the
    # server takes messages up to 16 MiB).
    batches: list[list[dict[str, Any]]] = [[]]
    size = 0
    for item in items:
        n = len(orjson.dumps(item))
        if batches[-1] and (len(batches[-1]) == SUBMIT_BATCH or size + n > SUBMIT_BATCH_BYTES):
            batches.append([])
            size = 0
        batches[-1].append(item)
        size += n

    async def go() -> list[Any]:
        async with _client(server) as c:
            subs: list[Any] = []
            for batch in batches:
                subs += await c.submit_many(batch)
            return subs

    subs = _run(go())
    if as_json:
        _print_json([{"task_id": s.task_id, "created": s.created} for s in subs])
        return
    created = sum(1 for s in subs if s.created)
    out.print(
        f"{created} submitted, {len(subs) - created} already submitted (same idempotency key)"
    )
    for s in subs:
        out.print(s.task_id)


def _progress_line(ev: Any) -> None:
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
    # markup=False: step names, errors and reasons are whoever submitted's text
    line = f"{_ms(ev.timestamp_ms)}  #{ev.event_id:<6} {who}{what}{attempt}{extra}"
    out.print(line, markup=False, highlight=False)


def _show_task_view(t: Any) -> None:
    from apollo11.scheduler.taskname import task_name

    shown = task_name(t.workflow, t.input)
    out.print(
        f"task [bold]{escape(t.task_id)}[/bold] ({escape(shown)} v{t.version}): "
        f"[bold]{t.state}[/bold]"
        f" as of event {t.as_of_event_id}"
    )
    table = _Grid("step", "state", "attempt", "duration ms", "error")
    for s in t.steps:
        dur = s.duration_ms
        table.add_row(
            s.name, s.state, str(s.attempt), "" if dur is None else str(dur), s.error or ""
        )
    table.show()
    if t.cancelled:
        shown = f" (as {t.cancelled['as']})" if t.cancelled.get("as") else ""
        out.print(
            f"cancelled by {t.cancelled['operator']}{shown}: {t.cancelled['reason']}",
            markup=False,
        )
    for note in t.anomalies:
        out.print(f"[yellow]anomaly:[/yellow] {escape(note)}")
    if t.blocked:
        out.print(f"[yellow]blocked:[/yellow] {escape(t.blocked)}")
    if t.parent:
        out.print(
            f"child of task {t.parent.get('task_id')} (spawned at its checkpoint "
            f"{t.parent.get('seq')}; if it closes first: {t.parent.get('close')})",
            markup=False,
        )
    if t.durable:
        _show_durable(t.durable)


def _show_durable(d: dict[str, Any]) -> None:
    """A durable task's checkpoints, and what it waits for until when."""
    checkpoints = d.get("checkpoints") or []
    if checkpoints:
        out.print(f"checkpoints: {len(checkpoints)}")
        table = _Grid("seq", "kind", "name", "outcome")
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
        out.print(f"waiting for {waits.describe(w)} (checkpoint {w.get('seq')})", markup=False)
    n = d.get("nondeterminism")
    if n:
        out.print(f"[red]non-determinism[/red] at checkpoint {n.get('seq')}", markup=True)


TASK_STATES = tuple(s.value for s in TaskStatus)


@app.command()
def tasks(
    state: Annotated[str | None, typer.Option("--state", help=", ".join(TASK_STATES) + ".")] = None,
    workflow: Annotated[str, typer.Option("--workflow", help="Only this workflow.")] = "",
    limit: Annotated[int, typer.Option("--limit", help="How many (newest first).")] = 50,
    server: Server = None,
    as_json: AsJson = False,
) -> None:
    """List tasks, newest first."""
    if state is not None:
        state = state.upper()
        if state not in TASK_STATES:
            raise _fail(f"--state {state} is not a task state: one of {', '.join(TASK_STATES)}", 2)

    async def go() -> Any:
        async with _client(server) as c:
            rows: list[Any] = []
            token = ""
            while len(rows) < limit:
                page = await c.tasks(
                    state=state,
                    workflow=workflow,
                    page_size=min(1000, limit - len(rows)),
                    page_token=token,
                )
                rows.extend(page.tasks)
                token = page.next_page_token
                if not token:
                    break
            return rows

    rows = _run(go())
    if as_json:
        _print_json([r.to_json() for r in rows])
        return
    table = _Grid("task", "workflow", "state", "steps", "submitted", "updated")
    for r in rows:
        table.add_row(
            r.task_id,
            r.name or r.workflow,  # "shell nightly": a shell DAG under its own name
            r.state,
            f"{r.steps_done}/{r.steps_total}",
            _ms(r.submitted_ms),
            _ms(r.updated_ms),
        )
    table.show()


@app.command()
def task(
    task_id: Annotated[str, typer.Argument(help="The task id.")],
    as_of: Annotated[
        int, typer.Option("--as-of", help="Show it as of this event id (time travel).")
    ] = 0,
    server: Server = None,
    as_json: AsJson = False,
) -> None:
    """A task's steps: state, attempt, duration, error."""

    async def go() -> Any:
        async with _client(server) as c:
            return await c.task(task_id, as_of=as_of)

    t = _run(go())
    if as_json:
        _print_json(t.to_json())
    else:
        _show_task_view(t)


@app.command()
def events(
    task_id: Annotated[str, typer.Option("--task", help="Only this task's events.")] = "",
    from_id: Annotated[int, typer.Option("--from", help="Start at this event id.")] = 0,
    follow: Annotated[bool, typer.Option("--follow", help="Keep printing new events.")] = False,
    limit: Annotated[
        int, typer.Option("--limit", help="At most this many (without --follow).")
    ] = 100,
    server: Server = None,
    as_json: AsJson = False,
) -> None:
    """The event log: one task's, or a range; --follow tails it."""
    import asyncio

    def show(ev: Any) -> None:
        if as_json:
            sys.stdout.write(orjson.dumps(ev.to_json()).decode() + "\n")
            sys.stdout.flush()
        else:
            task = f"{ev.task_id} " if ev.task_id and not task_id else ""
            out.print(f"[dim]{escape(ev.instance_id)} t{ev.term}[/dim] {escape(task)}", end="")
            _progress_line(ev)

    async def go() -> None:
        async with _client(server) as c:
            if follow and task_id:
                async for ev in c.watch(task_id):
                    if ev.event_id >= from_id:
                        show(ev)
                return
            nxt = from_id
            shown = 0
            while True:
                page, after = await c.events(
                    task_id=task_id,
                    from_id=nxt,
                    limit=min(1000, max(1, limit - shown)) if not follow else 1000,
                )
                for ev in page:
                    show(ev)
                shown += len(page)
                if page:
                    nxt = page[-1].event_id + 1
                if after:
                    nxt = after
                if not follow and (not after or shown >= limit):
                    return
                if follow and not after:
                    await asyncio.sleep(0.5)

    try:
        _run(go())
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


Reason = Annotated[str, typer.Option("--reason", help="Why (kept in the audit log).")]
Operator = Annotated[str | None, typer.Option("--operator", help="Who (default: your login name).")]


def _act(action: str, server: str | None, **kw: Any) -> None:
    """An operator action through the client; prints the audit event's id."""

    async def go() -> int:
        async with _client(server) as c:
            fn = {"retry": c.retry_step, "skip": c.skip_step, "cancel": c.cancel}[action]
            return int(await fn(**kw))

    out.print(f"{action} recorded as event {_run(go())}")


@app.command()
def retry(
    task_id: Annotated[str, typer.Argument()],
    step: Annotated[str, typer.Argument()],
    reason: Reason,
    operator: Operator = None,
    server: Server = None,
) -> None:
    """Run a failed step again (an audited event)."""
    _act("retry", server, task_id=task_id, step=step, operator=_operator(operator), reason=reason)


@app.command()
def skip(
    task_id: Annotated[str, typer.Argument()],
    step: Annotated[str, typer.Argument()],
    reason: Reason,
    operator: Operator = None,
    server: Server = None,
) -> None:
    """Mark a step done without running it (an audited event)."""
    _act("skip", server, task_id=task_id, step=step, operator=_operator(operator), reason=reason)


@app.command()
def cancel(
    task_id: Annotated[str, typer.Argument()],
    reason: Reason,
    operator: Operator = None,
    server: Server = None,
) -> None:
    """Cancel a task: running steps stop, compensation follows (an audited event)."""
    _act("cancel", server, task_id=task_id, operator=_operator(operator), reason=reason)


@event_app.command("send")
def event_send(
    key: Annotated[str, typer.Argument(help="The key durable tasks wait on.")],
    payload: Annotated[
        str | None, typer.Option("--payload", help="JSON, or @file with JSON (default null).")
    ] = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option("--idempotency-key", help="The same key records the event once."),
    ] = None,
    server: Server = None,
    as_json: AsJson = False,
) -> None:
    """Send an event: the durable tasks waiting on KEY (or that will) receive it."""
    try:
        data = _input(payload)
    except typer.Exit:
        raise _fail("--payload is not valid JSON (or @file is unreadable)", 2) from None

    async def go() -> Any:
        async with _client(server) as c:
            return await c.send_event(key, data, idempotency_key=idempotency_key)

    sent = _run(go())
    if as_json:
        _print_json({"event_id": sent.event_id, "created": sent.created})
    elif sent.created:
        out.print(f"event {key!r} recorded as event {sent.event_id}")
    else:
        out.print(f"already recorded (same idempotency key) as event {sent.event_id}")


@app.command()
def health(server: Server = None) -> None:
    """Exit 0 when the node's gRPC health service says SERVING (for container HEALTHCHECKs)."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from apollo11.scheduler.client import channel_credentials_for, endpoints_from

    endpoint = endpoints_from(server)[0]
    creds = channel_credentials_for(_conn.get("ca"), _conn.get("cert"), _conn.get("key"), None)
    try:
        with (
            grpc.insecure_channel(endpoint)
            if creds is None
            else grpc.secure_channel(endpoint, creds)
        ) as ch:
            reply = health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=2
            )
    except grpc.RpcError as e:
        raise _fail(f"{endpoint}: {e.code().name}") from e
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        raise _fail(
            f"{endpoint}: {health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)}"
        )
    out.print(f"{endpoint}: SERVING")


@app.command()
def status(server: Server = None, as_json: AsJson = False) -> None:
    """Who is primary, the term, the lease, and every member's position and lag."""

    async def go() -> Any:
        async with _client(server) as c:
            return await c.status()

    s = _run(go())
    if as_json:
        _print_json(s.to_json())
        return
    leader = s.leader
    out.print(
        f"node [bold]{s.node_id}[/bold] is [bold]{s.role}[/bold], term {s.term}"
        + (f" ({_nth(s.terms_started)} leader in the log)" if s.terms_started else "")
        + "; "
        + (
            f"primary {leader['node_id']} at {leader['address']}"
            if leader
            else "[red]no primary[/red]"
        )
    )
    if s.lease:
        left = s.lease["remaining_s"]
        out.print(
            f"lease TTL {s.lease['ttl_s']:g}s, "
            + (f"{left:.1f}s left" if left >= 0 else "time left unknown on this node")
        )
    out.print(
        f"log at event {s.last_event_id}, state applied to {s.applied_event_id}; "
        f"{s.active_tasks} active tasks, {s.running_steps} steps running"
    )
    if s.security:
        style = "bold red" if s.security.startswith("INSECURE") else "dim"
        out.print(f"security: {s.security}", style=style, markup=False)
    if s.notice:
        out.print(f"notice: {s.notice}", style="bold yellow", markup=False)
    table = _Grid(
        "member", "role", "address", "last event", "lag (events)", "lag ms", "connected", "sync"
    )
    for m in s.members:
        table.add_row(
            m.node_id,
            m.role,
            m.address,
            str(m.last_event_id),
            str(m.lag_events),
            f"{m.lag_ms:.1f}",
            "yes" if m.connected else "no",
            "yes" if m.synchronous else "",
        )
    table.show()
    if s.execution != "embedded" or s.workers:
        used = sum(w.slots_used for w in s.workers)
        total = sum(w.slots for w in s.workers)
        out.print(
            f"execution {s.execution}: {len(s.workers)} worker(s), {used}/{total} slots busy"
            + ("" if s.workers else " (start one: apollo11 worker --server ... --workflows ...)")
        )
        if s.workers:
            _workers_table(s.workers)


def _workers_table(workers: Any) -> None:
    table = _Grid("worker", "address", "slots", "running", "heartbeat", "workflows", "labels")
    for w in workers:
        table.add_row(
            w.name,
            w.address,
            f"{w.slots_used}/{w.slots}",
            str(w.attempts_running),
            f"{w.last_heartbeat_s_ago:.1f}s ago",
            ", ".join(w.workflows),
            ",".join(f"{k}={v}" for k, v in sorted(w.labels.items())),
        )
    table.show()


def _nth(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


@app.command()
def switchover(
    to: Annotated[
        str | None,
        typer.Option("--to", help="The standby to hand over to (default: the one furthest ahead)."),
    ] = None,
    wait_s: Annotated[
        float, typer.Option("--wait", help="Seconds to wait for the new primary to lead.")
    ] = 30.0,
    server: Server = None,
    as_json: AsJson = False,
) -> None:
    """A planned hand-over of the primary role (Patroni's switchover): the primary
    starts no new step, lets running ones finish, waits until the standby holds
    every event it wrote, and resigns; that standby is then elected."""

    async def go() -> tuple[dict[str, Any], Any]:
        async with _client(server) as c:
            done = await c.switchover(to)
            deadline = time.monotonic() + wait_s
            while True:
                status = await c.status()
                leader = status.leader
                if leader is not None and leader.get("node_id") != done["from"]:
                    return done, status
                if time.monotonic() > deadline:
                    return done, None
                await asyncio.sleep(0.2)

    import asyncio
    import time

    done, status = _run(go())
    leader = (status.leader if status is not None else None) or {}
    if as_json:
        _print_json({**done, "leader": leader.get("node_id"), "term": leader.get("term")})
        return
    out.print(f"{done['from']} resigned: {done['sentence']}", markup=False)
    if not leader:
        raise _fail(f"no new primary within {wait_s:g}s: see apollo11 status", 1)
    out.print(
        f"{leader.get('node_id')} leads now (term {leader.get('term')}); it holds every "
        f"event through {done['last_event_id']}",
        markup=False,
    )


@app.command()
def history(server: Server = None, as_json: AsJson = False) -> None:
    """Every leader the log records, oldest first: term, node, first event, when, and
    how it took over (bootstrap, failover, switchover, restart).

    A term is a fencing token, not a count: after an election it is above every
    term any member knew, so it may jump by thousands; the rows are the takeovers."""

    async def go() -> Any:
        async with _client(server) as c:
            return await c.history()

    terms = _run(go())
    if as_json:
        _print_json([t.to_json() for t in terms])
        return
    if not terms:
        out.print("no term in this node's log yet (no primary has led it)")
        return
    table = _Grid("#", "term", "leader", "address", "first event", "started", "how")
    for i, t in enumerate(terms, 1):
        started = _utc(t.started_ms) if t.started_ms else ""
        table.add_row(
            str(i),
            str(t.term),
            t.node_id or "(not kept)",
            t.address,
            str(t.first_event_id),
            started,
            _how(t.began, t.previous),
        )
    table.show()


def _how(began: str, previous: str) -> str:
    if began in ("failover", "switchover") and previous:
        return f"{began} from {previous}"
    return began or "(not recorded)"


def _utc(ms: int) -> str:
    import datetime

    when = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S UTC")


@app.command()
def workflows(server: Server = None, as_json: AsJson = False) -> None:
    """The workflows the primary has loaded: versions, steps, idempotency per step.

    --json adds the input and result JSON Schemas of typed workflows."""

    async def go() -> Any:
        async with _client(server) as c:
            return await c.workflows()

    listed = _run(go())
    if as_json:
        _print_json(listed)
        return
    if not listed:
        out.print("no workflow loaded (the node's --workflows names the modules)")
        return
    table = _Grid("workflow", "version", "kind", "steps (idempotency, attempts)")
    for wf in listed:
        steps = ", ".join(
            f"{st['name']} ({st['idempotency'] or '-'}, {st['attempts']})" for st in wf["steps"]
        )
        kind = "durable" if wf["durable"] else "dag"
        table.add_row(wf["name"], str(wf["version"]), kind, steps)
    table.show()


@app.command()
def workers(server: Server = None, as_json: AsJson = False) -> None:
    """The workers connected to the primary: slots, attempts running, last heartbeat."""

    async def go() -> Any:
        async with _client(server) as c:
            return await c.status()

    s = _run(go())
    if as_json:
        _print_json([w.to_json() for w in s.workers])
        return
    if s.role != "primary":
        out.print(f"node {s.node_id} is {s.role}: workers connect to the primary only")
    if not s.workers:
        out.print(f"no worker connected (execution {s.execution})")
        return
    _workers_table(s.workers)


@app.command()
def replay(
    data_dir: Annotated[Path, typer.Option("--data-dir", help="A node's data directory.")],
    until: Annotated[
        int | None, typer.Option("--until", help="Reconstruct the state as of this event id.")
    ] = None,
    task: Annotated[str | None, typer.Option("--task", help="Show only this task.")] = None,
    as_json: AsJson = False,
) -> None:
    """Rebuild state offline from a data directory (read-only; time travel with --until)."""
    if until is not None and until < 0:
        raise _fail("--until must be an event id (0 or more)", 2)
    state = _read_state(data_dir, until)
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


def _read_state(data_dir: Path, until: int | None = None, *, refused: int = 1) -> State:
    """The state a data directory's log and snapshots rebuild, or the command's end
    in one line: exit 2 for a damaged or unreadable directory, `refused` for an
    error the store names itself."""
    from apollo11.scheduler.store import state_at

    try:
        return state_at(data_dir, until)
    except DAMAGE as e:
        raise _fail(str(e), 2) from e
    except ApolloError as e:
        raise _fail(str(e), refused) from e
    except OSError as e:  # anything the log and snapshot code did not name itself
        raise _fail(f"cannot read {e.filename or data_dir}: {e.strerror or e}", 2) from e


@app.command("replay-check")
def replay_check(
    data_dir: Annotated[Path, typer.Option("--data-dir", help="A node's data directory.")],
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
        raise _fail(str(e), 2) from e
    # 2, not 1, when nothing could be checked: 1 says a run would break
    state = _read_state(data_dir, refused=2)
    runs, skipped = check_all(state.iter_tasks(), registry, state.first_event, finished=finished)
    bad = [r for r in runs if r.outcome != "ok"]
    if as_json:
        _print_json(
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
        table = _Grid("workflow", "version", "runs", "would break")
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
    table = _Grid("task", "workflow", "status", "steps done", "last event", "anomalies")
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


def _show_task(t: TaskState, state: State) -> None:
    out.print(
        f"task [bold]{t.task_id}[/bold] ({t.workflow} v{t.version}): {t.status.value} "
        f"as of event {state.last_event_id}"
    )
    table = _Grid("step", "status", "attempt", "duration ms", "error")
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


BenchJson = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
BenchDir = Annotated[
    Path | None, typer.Option("--dir", help="Where to write (default: the current directory).")
]


@bench_app.command("log")
def bench_log(
    quick: Annotated[bool, typer.Option("--quick", help="Smaller runs; under a minute.")] = False,
    as_json: BenchJson = False,
    workdir: BenchDir = None,
) -> None:
    """Event log: durable appends, commit latency, replay and recovery, beside baselines."""
    from apollo11.scheduler.tools.bench.log_bench import run, summary_rows

    _bench(run, summary_rows, "log", quick, as_json, workdir)


@bench_app.command("engine")
def bench_engine(
    quick: Annotated[bool, typer.Option("--quick", help="Smaller runs.")] = False,
    as_json: BenchJson = False,
    workdir: BenchDir = None,
) -> None:
    """Engine: five-step no-op tasks/s (fsync on) and scheduler cost per decision vs history."""
    from apollo11.scheduler.tools.bench.engine_bench import run, summary_rows

    _bench(run, summary_rows, "engine", quick, as_json, workdir)


@bench_app.command("grpc")
def bench_grpc(
    quick: Annotated[bool, typer.Option("--quick", help="Shorter runs.")] = False,
    as_json: BenchJson = False,
    workdir: BenchDir = None,
) -> None:
    """gRPC: submits/s against one node from many clients, and submit-to-ack latency."""
    from apollo11.scheduler.tools.bench.grpc_bench import run, summary_rows

    _bench(run, summary_rows, "grpc", quick, as_json, workdir)


@bench_app.command("durable")
def bench_durable(
    quick: Annotated[bool, typer.Option("--quick", help="Smaller runs.")] = False,
    as_json: BenchJson = False,
    workdir: BenchDir = None,
) -> None:
    """Durable tasks: memory per waiting task and a node's recovery holding 100k of
    them, 10k timers due together, replay of 1,000 checkpoints, event to wake."""
    from apollo11.scheduler.tools.bench.durable_bench import run, summary_rows

    _bench(run, summary_rows, "durable", quick, as_json, workdir)


@bench_app.command("failover")
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

    _bench(run, failover_bench.summary_rows, "failover", quick, as_json, workdir)


@bench_app.command("lag")
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

    _bench(run, failover_bench.lag_rows, "lag", quick, as_json, workdir)


@bench_app.command("overload")
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
            "--churn-rate", min=1, help="With --connections: churn at most this many a second."
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
        from apollo11.scheduler.tools.bench import connflood_bench

        def flood_run(q: bool, w: str | None, progress: Any) -> Any:
            return connflood_bench.run(q, w, progress, churn_rate=churn_rate)

        rows = connflood_bench.summary_rows
        result = _bench(flood_run, rows, "overload --connections", quick, as_json, workdir)
        why = connflood_bench.failed(result)
        if why:
            raise _fail(f"bench overload --connections failed: {why}")
        return
    from apollo11.scheduler.tools.bench import overload_bench

    def run(q: bool, w: str | None, progress: Any) -> Any:
        return overload_bench.run(
            q, w, progress, duration=duration, factor=factor, sample_every=sample_every
        )

    result = _bench(run, overload_bench.summary_rows, "overload", quick, as_json, workdir)
    why = overload_bench.failed(result)
    if why:
        raise _fail(f"bench overload failed: {why}")


@bench_app.command("workers")
def bench_workers(
    quick: Annotated[bool, typer.Option("--quick", help="One round, short windows.")] = False,
    as_json: BenchJson = False,
    workdir: BenchDir = None,
) -> None:
    """Remote execution beside embedded: tasks/s with 1, 2, 4 workers, dispatch latency,
    2,000 one-second steps at once, lost-worker detection, a CPU-bound step's effect on
    replication acks; issue 17's targets met or missed."""
    from apollo11.scheduler.tools.bench import workers_bench

    _bench(workers_bench.run, workers_bench.summary_rows, "workers", quick, as_json, workdir)


@bench_app.command("cli")
def bench_cli(
    quick: Annotated[bool, typer.Option("--quick", help="5 rounds instead of 15.")] = False,
    as_json: BenchJson = False,
    workdir: BenchDir = None,
) -> None:
    """CLI start-up: the imports of `status` and `submit` (python -X importtime) against
    a standalone node, beside `import asyncio` as the machine's yardstick; the 120 ms
    budget met or missed."""
    from apollo11.scheduler.tools.bench import cli_bench

    _bench(cli_bench.run, cli_bench.summary_rows, "cli", quick, as_json, workdir)


def _bench(run: Any, rows: Any, name: str, quick: bool, as_json: bool, workdir: Path | None) -> Any:
    def progress(msg: str) -> None:
        err.print(f"[dim]… {msg}[/dim]")

    result = run(quick, str(workdir) if workdir else None, progress)
    if as_json:
        _print_json(result)
        return result
    title = f"apollo11 bench {name}" + (" --quick" if quick else "")
    table = _Grid("measurement", "result", title=title)
    for label, value in rows(result):
        table.add_row(label, value)
    table.show()
    return result


@app.command()
def certs(
    directory: Annotated[Path, typer.Option("--dir", help="Where the CA and certificates go.")],
    names: Annotated[
        str, typer.Option("--nodes", help="Node ids (and etcd members), comma-separated.")
    ],
    san: Annotated[
        list[str] | None, typer.Option("--san", help="Another name or IP for every cert.")
    ] = None,
    days: Annotated[int, typer.Option("--days", help="Validity.")] = 825,
) -> None:
    """Create the cluster CA (once) and a certificate for each node that has none."""
    from apollo11.scheduler.security.certs import create_cluster_certs

    wanted = [n.strip() for n in names.split(",") if n.strip()]
    written = create_cluster_certs(directory, wanted, sans=san or [], days=days)
    for path in written:
        err.print(f"wrote {path}")
    if not written:
        err.print(f"{directory}: every certificate asked for exists already")


TokensFile = Annotated[
    Path,
    typer.Option("--tokens-file", envvar="APOLLO11_TOKENS_FILE", help="The node's tokens file."),
]


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Option("--name", help="Who the token is for.")],
    role: Annotated[str, typer.Option("--role", help="reader, submitter or operator.")],
    tokens_file: TokensFile,
) -> None:
    """Make a token: print it once, append its hash (send SIGHUP to running nodes)."""
    from apollo11.scheduler.security import tokens
    from apollo11.scheduler.security.roles import Role

    try:
        made = tokens.create_token(tokens_file, name, Role.parse(role))
    except ValueError as e:
        raise _fail(str(e), 2) from e
    print(made)
    err.print(
        f"token for {name} ({role}) added to {tokens_file}; it is shown only now. "
        f"Running nodes take it after SIGHUP."
    )


@token_app.command("list")
def token_list(tokens_file: TokensFile) -> None:
    """Who has which role (hashes are not shown)."""
    from apollo11.scheduler.security import tokens

    try:
        entries = tokens.list_entries(tokens_file)
    except (OSError, ValueError) as e:
        raise _fail(str(e), 2) from e
    for entry in entries:
        kind = "certificate" if entry.secret == "cert" else "token"
        print(f"{entry.name}\t{entry.role.value}\t{kind}")


@token_app.command("revoke")
def token_revoke(
    name: Annotated[str, typer.Option("--name", help="Whose entries to remove.")],
    tokens_file: TokensFile,
) -> None:
    """Remove every entry of NAME (running nodes refuse its tokens after SIGHUP)."""
    from apollo11.scheduler.security import tokens

    try:
        n = tokens.revoke(tokens_file, name)
    except OSError as e:
        raise _fail(f"{tokens_file}: {e.strerror}", 2) from e
    if not n:
        raise _fail(f"no entry for {name!r} in {tokens_file}")
    err.print(f"removed {n} entr{'y' if n == 1 else 'ies'} of {name}; send SIGHUP to the nodes")


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
        import typer.core

        typer.core.HAS_RICH = False
        # and each command's line in a command list whole: click cuts it to fit 80
        # columns ("Run steps for the primary: connect, register, run what is...")
        typer.core.TyperCommand.get_short_help_str = _first_paragraph  # type: ignore[method-assign]
        typer.core.TyperGroup.get_short_help_str = _first_paragraph  # type: ignore[method-assign]
    # gRPC's C core writes its own lines to stderr ("I1201 ... chttp2_transport.cc:
    # 1403] ... Got goaway"), beside the log and in no format of ours: errors only,
    # unless the operator asks for more (GRPC_VERBOSITY=INFO, GRPC_TRACE=...). A
    # node writes none (`node`).
    global _GRPC_VERBOSITY_GIVEN
    _GRPC_VERBOSITY_GIVEN = bool(os.environ.get("GRPC_VERBOSITY"))
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    logfmt.configure("text", logging.WARNING)
    app()


# ------------------------------------------------------------------- roster

RosterEtcd = Annotated[
    str | None,
    typer.Option("--etcd", envvar="APOLLO11_ETCD", help="etcd URLs, comma-separated."),
]
RosterCluster = Annotated[
    str | None, typer.Option("--cluster", envvar="APOLLO11_CLUSTER", help="Cluster name.")
]
RosterConfig = Annotated[
    Path | None, typer.Option("--config", help="A node's TOML config (for etcd's settings).")
]


def _roster_lease(config: Path | None, etcd: str | None, cluster: str | None) -> Any:
    """The cluster's etcd, as its nodes reach it (their APOLLO11_ETCD_* security too)."""
    from apollo11.lease.etcd import EtcdLease
    from apollo11.scheduler.config import load_settings

    try:
        # (no data directory is read: any will do for the settings to be whole)
        s = load_settings(config, etcd=etcd, cluster=cluster, data_dir=Path("."))
    except ValueError as e:
        raise _fail(str(e), 2) from e
    if not s.etcd:
        raise _fail("--etcd: the roster lives in etcd; give its URLs (or APOLLO11_ETCD)", 2)
    return EtcdLease(s.etcd, cluster=s.cluster, ttl_s=s.lease_ttl, **s.etcd_security())


def _etcd_world(config: Path | None, etcd: str | None, cluster: str | None) -> Any:
    """The cluster as its etcd holds it (roster, members, settings): one read."""

    async def go() -> Any:
        lease = _roster_lease(config, etcd, cluster)
        try:
            return await lease.world()
        finally:
            await lease.close()

    return _run(go())


@roster_app.command("list")
def roster_list(
    etcd: RosterEtcd = None,
    cluster: RosterCluster = None,
    config: RosterConfig = None,
    as_json: AsJson = False,
) -> None:
    """Every member on the roster, live or down, and its position when live."""

    world = _etcd_world(config, etcd, cluster)
    rows = []
    for node_id in sorted(world.roster | set(world.members)):
        m = world.members.get(node_id)
        rows.append(
            {
                "node_id": node_id,
                "live": m is not None,
                "role": m.role if m else "",
                "position": list(m.position) if m else None,
                "on_roster": node_id in world.roster,
            }
        )
    if as_json:
        _print_json(rows)
        return
    table = _Grid("member", "live", "role", "position (term, event)")
    for r in rows:
        pos = r["position"]
        table.add_row(
            str(r["node_id"]),
            "yes" if r["live"] else "no",
            str(r["role"]),
            f"({pos[0]}, {pos[1]})" if pos else "",
        )
    table.show()


@roster_app.command("remove")
def roster_remove(
    node: Annotated[str, typer.Argument(help="The member gone for good.")],
    etcd: RosterEtcd = None,
    cluster: RosterCluster = None,
    config: RosterConfig = None,
) -> None:
    """Take a member gone for good off the roster: elections stop waiting for it.

    Only for a member that will not come back with its data: one that does, while
    the others elected without it, may hold acknowledged writes they lack."""

    async def go() -> tuple[bool, int]:
        lease = _roster_lease(config, etcd, cluster)
        try:
            removed = await lease.unregister(node)
            return removed, len((await lease.world()).roster)
        finally:
            await lease.close()

    removed, left = _run(go())  # a live member is refused, saying so
    if not removed:
        raise _fail(f"{node} is not on the roster", 2)
    out.print(f"removed {node} from the roster: elections now count {left} member(s)")


@config_app.command("show")
def config_show(
    etcd: RosterEtcd = None,
    cluster: RosterCluster = None,
    config: RosterConfig = None,
    as_json: AsJson = False,
) -> None:
    """The cluster-wide settings every node follows (the first node's flags, until set)."""

    world = _etcd_world(config, etcd, cluster)
    if world.config is None:
        raise _fail("no cluster settings in etcd yet: the first node to start writes its own", 1)
    if as_json:
        _print_json(dict(world.config))
        return
    for key, value in sorted(world.config.items()):
        out.print(f"{key} = {value}", markup=False)


@config_app.command("set")
def config_set(
    key: Annotated[str, typer.Argument(help="lease_ttl, sync_replicas or sync_mode.")],
    value: Annotated[str, typer.Argument(help="Its new value.")],
    etcd: RosterEtcd = None,
    cluster: RosterCluster = None,
    config: RosterConfig = None,
) -> None:
    """Change a cluster-wide setting: every node follows it within a second
    (sync_replicas and sync_mode at once; lease_ttl from each node's next lease: the
    primary's applies at the next election, `apollo11 switchover` makes one now)."""
    from apollo11.lease.clusterconfig import ClusterConfig

    async def go() -> tuple[Any, Any]:
        lease = _roster_lease(config, etcd, cluster)
        try:
            for _ in range(5):  # another change between our read and our write: again
                world = await lease.world()
                if world.config is None:
                    raise _fail("no cluster settings in etcd yet: start a node first", 1)
                old = ClusterConfig.of(world.config, ClusterConfig())
                try:
                    new = old.with_value(key, value)
                except ValueError as e:
                    raise _fail(str(e), 2) from e
                if await lease.write_config(new.to_json(), expect=world.config_revision):
                    return old, new
            raise _fail("the cluster settings kept changing under this command: try again", 1)
        finally:
            await lease.close()

    old, new = _run(go())
    out.print(f"{key}: {getattr(old, key)} -> {getattr(new, key)}", markup=False)


if __name__ == "__main__":
    main()
