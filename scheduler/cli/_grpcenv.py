"""gRPC core's environment, for the CLI and for a node: which lines it writes and
which I/O path it takes. gRPC reads both variables once, when it is imported, so
these run before anything imports grpc."""

from __future__ import annotations

import os

NODE_GRPC_EXPERIMENTS = (  # gRPC's I/O path in a node (see `for_node`)
    "-event_engine_client,-event_engine_listener,"
    "-event_engine_for_all_other_endpoints,-event_engine_callback_cq"
)

# whether the operator set GRPC_VERBOSITY (`for_cli` sets a default)
_verbosity_given = False


def for_cli() -> None:
    """gRPC's C core writes its own lines to stderr ("I1201 ... chttp2_transport.cc:
    1403] ... Got goaway"), beside the log and in no format of ours: errors only,
    unless the operator asks for more (GRPC_VERBOSITY=INFO, GRPC_TRACE=...). A node
    writes none (`for_node`)."""
    global _verbosity_given
    _verbosity_given = bool(os.environ.get("GRPC_VERBOSITY"))
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")


def for_node() -> None:
    """Set a node's gRPC environment and import grpc under it."""
    # gRPC core's older I/O path reads and writes sockets on the poller thread that
    # already wakes for the completion queue. Its EventEngine, on by default for
    # Python in the grpcio this runs on (grpc/grpc#41432), does it on threads of its
    # own and hands every message over: more context switches per call, and a
    # higher replication ack p99 (docs/benchmarks.md, "Figures behind the knobs").
    # An operator's own GRPC_EXPERIMENTS (even empty) wins.
    # A grpcio without these experiments logs "Unknown experiment" and goes on.
    ours = "GRPC_EXPERIMENTS" not in os.environ
    if ours:
        os.environ["GRPC_EXPERIMENTS"] = NODE_GRPC_EXPERIMENTS
    # Nor any of gRPC core's own lines: anyone who can reach a port chooses how many
    # it writes (one error per TLS handshake naming a server name not in the
    # certificate: 3,950 lines for 4,000 connections, issue 28). What goes wrong
    # with a node's own calls reaches its log as their status; GRPC_VERBOSITY=ERROR
    # brings gRPC's lines back, to diagnose a handshake.
    if not _verbosity_given:
        os.environ["GRPC_VERBOSITY"] = "NONE"
    import grpc  # noqa: F401  (reads them now)

    if ours:
        del os.environ["GRPC_EXPERIMENTS"]  # not for the processes of shell steps
