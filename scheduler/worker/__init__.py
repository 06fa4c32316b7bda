"""The worker process (`apollo11 worker`): runs steps for the primary, away from it.

    registry = Registry()
    registry.load_module("myapp.flows")
    worker = Worker("node-1:7411,node-2:7411", registry, name="w1", slots=4)
    await worker.run()          # until worker.stop() or cancelled

It connects one Workers.Connect stream to whichever node is the primary
(following a standby's redirect), registers what it can run, runs what it is
assigned (coroutines on the loop, plain functions on `slots` threads, or each
attempt in a child process with `isolation="process"`), heartbeats, and keeps
every result until the primary acknowledges it. Running attempts survive a lost
stream; the next registration reports them.

It imports no server module: the import-linter contract in pyproject.toml says so.

_serve.py      a worker as a process: signals in, an exit status out
_worker.py     Worker: the session (handshake, stream, end) and the attempts it runs
_reconnect.py  after a stream ends: where to connect next, and when (one sentence)
_attempt.py    one running attempt: coroutine, thread or child process, and its stop
_child.py      the child process of a process-isolated attempt
_fence.py      a step held to its limits in its child: rlimits or a cgroup, and its end read
_cgroup.py     cgroup v2 groups for steps' memory, where the worker's group is delegated
_outcome.py    the StepContext a step is told, and what its end becomes
_outbox.py     results kept until acknowledged, resent after a reconnect
_records.py    the frozen records the worker deals in
_codec.py      records <-> worker.proto messages (the only module that sees them)
"""

from apollo11.scheduler.worker._attempt import Isolation
from apollo11.scheduler.worker._serve import EX_CONFIG, serve
from apollo11.scheduler.worker._worker import (
    DEFAULT_HEARTBEAT_INTERVAL_S,
    TIMEOUT_GRACE_S,
    Worker,
    WorkerRefusedError,
    default_name,
)

__all__ = [
    "DEFAULT_HEARTBEAT_INTERVAL_S",
    "EX_CONFIG",
    "TIMEOUT_GRACE_S",
    "Isolation",
    "Worker",
    "WorkerRefusedError",
    "default_name",
    "serve",
]
