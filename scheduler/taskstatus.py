"""A task's state, as the log's replay derives it (replay.py) and every listing shows
it: a module of its own, so that the CLI can name the states without loading the
storage engine."""

from __future__ import annotations

import enum


class TaskStatus(enum.StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    # Durable tasks (docs/durable.md): nothing runs and a wait is registered; the code
    # asked for something other than its log holds (stopped for an operator, like FAILED).
    WAITING = "WAITING"
    NONDETERMINISTIC = "NONDETERMINISTIC"
