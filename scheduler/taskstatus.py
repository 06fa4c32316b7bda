"""A task's state and its steps', as the log's replay derives them (replay.py) and
every listing shows them: a module of its own, so that the CLI can name the states
and the retry rule (retry.py) read them without loading the storage engine."""

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
    # A step failed for good under `on_exhausted="pause"` (its TASK_PAUSED): nothing new
    # starts until an operator retries it (`apollo11 retry TASK`); not finished.
    PAUSED = "PAUSED"
    # ...under `on_exhausted="compensate"` (its TASK_COMPENSATING): the steps that
    # succeeded are being compensated, dependents first; then COMPENSATED, finished.
    COMPENSATING = "COMPENSATING"
    COMPENSATED = "COMPENSATED"


class StepStatus(enum.StrEnum):
    PENDING = "PENDING"
    STARTED = "STARTED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    COMPENSATING = "COMPENSATING"
    COMPENSATED = "COMPENSATED"
    SKIPPED = "SKIPPED"
    WAITING = "WAITING"  # a durable main whose attempt ended in a WAIT
