"""Step execution on workers: the primary's half (the worker's is scheduler/worker/).

`RemoteExecutor` is the engine's executor when a node runs with
`--execution remote` (`LocalFirstExecutor` with `both`: the node's own slots first);
`WorkersService` is the gRPC stream workers connect to.
"""

from apollo11.scheduler.dispatch.localfirst import LocalFirstExecutor
from apollo11.scheduler.dispatch.remote import (
    DEFAULT_HEARTBEAT_INTERVAL_S,
    DEFAULT_HEARTBEAT_TIMEOUT_S,
    RemoteExecutor,
)
from apollo11.scheduler.dispatch.service import WorkersService

__all__ = [
    "DEFAULT_HEARTBEAT_INTERVAL_S",
    "DEFAULT_HEARTBEAT_TIMEOUT_S",
    "LocalFirstExecutor",
    "RemoteExecutor",
    "WorkersService",
]
