"""The child process of a process-isolated attempt (`--isolation process`).

Started by multiprocessing's forkserver, never by a fork of the worker: the worker
has gRPC's threads, and a forked copy of a process with threads can deadlock on a
lock one of them held. The forkserver is a fresh interpreter that has imported
this module and nothing of the worker's state, and forks each child from there.

The child leads a process group of its own (so that a cancel kills what the step
started too), imports the workflow modules by name, finds the step, runs it and
sends through the pipe, as plain tuples:

    ("beat", details_json)   every ctx.heartbeat(details)
    ("done", outcome)        once, at the end (an Outcome record)

A child that dies before "done" is seen by the worker as the pipe's end.

A step with limits is fenced in (_fence.py) before the workflow's module is imported:
everything the step's process does counts against them.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import os
import sys
import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from apollo11.scheduler.cause import mro_names
from apollo11.scheduler.worker import _fence
from apollo11.scheduler.worker._outcome import context, encode_details, failed, not_found
from apollo11.scheduler.worker._outcome import succeeded as succeeded_outcome
from apollo11.scheduler.worker._records import Assignment, Failed, Outcome
from apollo11.scheduler.workflow import StepFn, Workflow

BEAT = "beat"
DONE = "done"


@dataclass(frozen=True, slots=True)
class Job:
    modules: tuple[str, ...]
    assignment: Assignment
    worker: str
    fence: _fence.Fence | None = None  # the step's limits, applied here first


def _find(modules: tuple[str, ...], a: Assignment) -> StepFn | None:
    for name in modules:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (
                isinstance(value, Workflow)
                and (value.name, value.version) == (a.workflow, a.version)
                and a.step in value.steps
            ):
                return value.runnable(a.step)
    return None


def _run(fn: StepFn, job: Job, send: Any) -> Outcome:
    def beat(details: Any) -> None:
        send((BEAT, encode_details(details)))

    ctx = context(job.assignment, job.worker, beat)
    try:
        if inspect.iscoroutinefunction(fn):
            result = asyncio.run(fn(ctx))
        else:
            result = fn(ctx)
            if inspect.isawaitable(result):

                async def wait() -> Any:
                    return await result

                result = asyncio.run(wait())
    except Exception as e:
        return _fence.failure_in_child(job.fence, e) or failed(e)
    return succeeded_outcome(result)


def main(job: Job, conn: Connection) -> None:
    """The child's target: run the attempt, report it, exit."""
    # its own group: the worker's SIGKILL of the group reaches what the step started
    with contextlib.suppress(OSError):
        os.setsid()
    lock = threading.Lock()

    def send(message: tuple[str, Any]) -> None:
        # a step may heartbeat from threads of its own
        with lock:
            conn.send(message)

    try:
        if job.fence is not None:
            _fence.apply(job.fence)
        fn = _find(job.modules, job.assignment)
        outcome: Outcome = not_found(job.assignment) if fn is None else _run(fn, job, send)
    except BaseException as e:  # an import that fails, a SystemExit in the step
        outcome = _fence.failure_in_child(job.fence, e) or Failed(
            type(e).__name__, f"in the attempt's child process: {e}", mro=mro_names(type(e))
        )
    send((DONE, outcome))
    conn.close()
    sys.stdout.flush()
    sys.stderr.flush()
    # Not a normal exit: that would wait for any non-daemon thread the step left behind,
    # and the slot would stay taken by a process that has nothing left to report.
    os._exit(0)
