"""`apollo11 node`: its settings (flags over APOLLO11_* over the file, through one
model), then the node, until it stops."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from apollo11.scheduler.cli import _grpcenv, _nodeflags
from apollo11.scheduler.cli._shared import fail, tracing
from apollo11.scheduler.errors import ApolloError

if TYPE_CHECKING:
    from apollo11.scheduler.config import NodeSettings

GIL_SWITCH_S = 0.001  # a node's sys.setswitchinterval (see `start`)
# what the node's process exits with when something escaped it (sysexits' EX_SOFTWARE)
CRASHED = 70


def node(ctx: typer.Context) -> None:
    """Run a node (standalone without --etcd). Flags > APOLLO11_* env > --config file."""
    _grpcenv.for_node()
    settings = _settings(*_nodeflags.given(ctx))
    raise typer.Exit(start(settings))


def _settings(config: Path | None, flags: dict[str, Any]) -> NodeSettings:
    from apollo11.scheduler.config import load_settings

    try:
        return load_settings(config, **flags)
    except ValueError as e:
        raise fail(str(e), 2) from e


def start(settings: NodeSettings) -> int:
    """Run the node to its end: its exit status, or CRASHED for what escaped it."""
    import asyncio

    from apollo11.scheduler.node import serve

    logging.getLogger().setLevel(logging.INFO)
    tracing(settings.otlp_endpoint, f"apollo11-node-{settings.node_id}")
    # The event loop waits for the GIL whenever a background thread holds it (the
    # snapshot writer encoding and merging archive chunks): 5 ms by default, each
    # time; 1 ms halves the ack p99's tail (docs/benchmarks.md, "Figures behind the
    # knobs").
    sys.setswitchinterval(GIL_SWITCH_S)
    log = logging.getLogger("apollo11.node")
    try:
        return asyncio.run(serve(settings))
    except ApolloError as e:
        raise fail(str(e)) from e
    except (Exception, asyncio.CancelledError):
        # CancelledError is no Exception: a stray cancel of the main task would end the
        # node with a bare traceback and exit status 1, no line saying it stopped
        log.critical("the node stopped on an error", exc_info=True)
        return CRASHED
    except SystemExit as e:  # sys.exit() from inside the loop: legal, but say who did it
        log.critical("the node stopped: SystemExit(%r) raised inside it", e.code, exc_info=True)
        raise
