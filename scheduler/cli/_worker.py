"""`apollo11 worker`: a process that runs steps for the primary."""

from __future__ import annotations

import logging
import os
from typing import Annotated

import typer

from apollo11.scheduler.cli._shared import (
    CaOption,
    CertOption,
    KeyOption,
    TokenFileOption,
    connection,
    fail,
    read_token,
    tracing,
)
from apollo11.scheduler.errors import ApolloError

LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}


def parse_labels(spec: str | None) -> dict[str, str]:
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
    step_memory: Annotated[
        str | None,
        typer.Option(
            "--step-memory",
            envvar="APOLLO11_STEP_MEMORY",
            help=(
                "Memory limit of every step that declares none (512MiB, 2GiB): each "
                "attempt then runs in a child process held to it (docs/workers.md)."
            ),
        ),
    ] = None,
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
        raise fail(f"--slots must be at least 1, got {slots}", 2)
    if isolation not in ("thread", "process"):
        raise fail(f"--isolation must be thread or process, got {isolation!r}", 2)
    if stop_grace < 0:
        raise fail("--stop-grace must be 0 or more seconds", 2)
    memory = None
    if step_memory is not None:
        from apollo11.scheduler.steplimits import parse_size

        try:
            memory = parse_size(step_memory)
        except ValueError as e:
            raise fail(f"--step-memory {e}", 2) from e
    modules = [m.strip() for m in (workflows or "").split(",") if m.strip()]
    if not modules:
        raise fail("--workflows: name the modules that define the workflows to run", 2)
    try:
        parsed = parse_labels(labels)
    except ValueError as e:
        raise fail(str(e), 2) from e
    registry = Registry()
    for module in modules:
        try:
            registry.load_module(module)
        except ApolloError as e:
            raise fail(f"--workflows: {e}", 2) from e
    token = connection.get("token") if token_file is None else read_token(token_file)
    from apollo11.scheduler.worker import Worker, serve

    # a step's own spans (and the worker's) go where OTEL_EXPORTER_OTLP_ENDPOINT says
    tracing("", f"apollo11-worker-{name or 'worker'}")
    try:
        w = Worker(
            server,
            registry,
            name=name,
            slots=slots,
            labels=parsed,
            isolation="process" if isolation == "process" else "thread",
            step_memory=memory,
            modules=modules,
            ca=ca or connection.get("ca"),
            cert=cert or connection.get("cert"),
            key=key or connection.get("key"),
            token=token,
        )
    except ApolloError as e:
        raise fail(str(e), 2) from e
    if log_level.lower() not in LOG_LEVELS:
        raise fail(f"--log-level must be one of {', '.join(LOG_LEVELS)}, got {log_level!r}", 2)
    logging.getLogger().setLevel(LOG_LEVELS[log_level.lower()])
    raise typer.Exit(asyncio.run(serve(w, grace_s=stop_grace)))
