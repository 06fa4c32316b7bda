"""One attempt running on this worker, and how it is stopped.

An attempt runs one of three ways, and is stopped the way that fits:

* a coroutine function on the worker's loop: cancelled;
* a plain function on the pool's threads: a thread cannot be interrupted, so a
  stopped one is waited for and its outcome dropped;
* in a child process (`isolation="process"`, or a step with limits: _fence.py; any
  function): its process group is killed with SIGKILL.

`run()` says how the code ended and never raises for the step's fault; `stop(why)`
asks it to end early. What a stopped attempt reports (a cancel, a timeout, nothing)
is the worker's business: `stopped` says why it was stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import inspect
import logging
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.context import ForkServerContext
from typing import Any, Literal

from apollo11.scheduler.steplimits import Limits
from apollo11.scheduler.worker import _child, _fence
from apollo11.scheduler.worker._outcome import context, encode_details, failed, succeeded
from apollo11.scheduler.worker._records import Assignment, Failed, Outcome, Running
from apollo11.scheduler.workflow import Journal, StepFn

log = logging.getLogger(__name__)

Isolation = Literal["thread", "process"]
# A child that sent its outcome exits at once (_child.main); one that does not is
# killed after this long, so that it does not hold the slot.
CHILD_EXIT_GRACE_S = 5.0


def child_died(exitcode: int | None, fence: _fence.Fence | None = None) -> Failed:
    if exitcode is not None and exitcode < 0:
        how = (
            f"killed by signal {-exitcode} ({signal.Signals(-exitcode).name}), exit code {exitcode}"
        )
    else:
        how = f"exit code {exitcode}"
    if fence is not None:
        how += _fence.note(fence)
    return Failed("ChildProcessDied", f"the attempt's child process died before it finished: {how}")


class RunningAttempt:
    def __init__(
        self,
        assignment: Assignment,
        fn: StepFn,
        *,
        worker: str,
        isolation: Isolation,
        pool: ThreadPoolExecutor,
        processes: ForkServerContext,
        modules: tuple[str, ...],
        journal: Journal | None = None,
        limits: Limits | None = None,
        enforcement: _fence.Enforcement | None = None,
    ) -> None:
        self.assignment = assignment
        self._journal = journal  # a durable main's: it runs on the loop, never in a child
        # a step with limits runs in a child of its own, fenced in, whatever the isolation
        self._limits = limits if journal is None and enforcement is not None else None
        self._enforcement = enforcement
        self._fn = fn
        self._worker = worker
        self._isolation = isolation
        self._pool = pool
        self._processes = processes
        self._modules = modules
        self._lock = threading.Lock()  # details and pid are set from other threads
        self._details = b""
        self._pid: int | None = None
        self._inner: asyncio.Future[Any] | None = None
        self.started = time.monotonic()
        self.stopped: str | None = None  # why stop() was called: "cancel", "timeout", ...

    # ------------------------------------------------------------------ progress

    def beat(self, details: Any) -> None:
        """ctx.heartbeat: from the loop or from the step's thread."""
        self.beat_json(encode_details(details))

    def beat_json(self, body: bytes) -> None:
        with self._lock:
            self._details = body

    def running(self) -> Running:
        a = self.assignment
        with self._lock:
            details = self._details
        return Running(a.token, a.task_id, a.step, a.attempt, details)

    @property
    def pid(self) -> int | None:
        """The child process's pid while there is one (process isolation)."""
        with self._lock:
            return self._pid

    # ---------------------------------------------------------------- run, stop

    async def run(self) -> Outcome:
        if self.stopped:
            return failed(asyncio.CancelledError("stopped before it began"))
        if self._in_a_child:
            return await self._in_child()
        ctx = context(self.assignment, self._worker, self.beat, self._journal)
        if inspect.iscoroutinefunction(self._fn):
            inner: asyncio.Future[Any] = asyncio.ensure_future(self._fn(ctx))
        else:
            # never cancelled (that would only stop waiting): a stop waits for the thread
            # in this task's context: its log lines carry the attempt's fields (logfmt)
            run = functools.partial(contextvars.copy_context().run, self._fn, ctx)
            inner = asyncio.get_running_loop().run_in_executor(self._pool, run)
        self._inner = inner
        try:
            result = await inner
            if inspect.isawaitable(result):
                result = await result
        except asyncio.CancelledError:
            # stop() cancelled the coroutine, or this task is cancelled (the worker going
            # away: the coroutine goes with it); told apart by `cancelling`, without a
            # shield's extra future per attempt
            me = asyncio.current_task()
            if inner.cancelled() and self.stopped and not (me is not None and me.cancelling()):
                return failed(asyncio.CancelledError("stopped"))
            inner.cancel()
            raise
        except Exception as e:
            return failed(e)
        return succeeded(result)

    def stop(self, why: str) -> None:
        """End the attempt early (idempotent): cancel, kill, or (a thread) wait."""
        if self.stopped is None:
            self.stopped = why
        if self._in_a_child:
            self._kill()
        elif self._inner is not None and inspect.iscoroutinefunction(self._fn):
            self._inner.cancel()

    @property
    def _in_a_child(self) -> bool:
        return self._journal is None and (self._isolation == "process" or self._limits is not None)

    # ----------------------------------------------------------- child process

    async def _in_child(self) -> Outcome:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Outcome] = loop.create_future()
        job = _child.Job(self._modules, self.assignment, self._worker)
        thread = threading.Thread(
            target=self._child_thread,
            args=(job, loop, done),
            name=f"apollo11-child {self.assignment.label}",
            daemon=True,
        )
        thread.start()
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            # the worker is going away: its children go with it
            self.stop("worker stopped")
            with contextlib.suppress(BaseException):
                await done
            raise

    def _child_thread(
        self, job: _child.Job, loop: asyncio.AbstractEventLoop, done: asyncio.Future[Outcome]
    ) -> None:
        """Start the child, read its pipe until it ends, reap it (on a thread of its own:
        starting a process and reading a pipe both block)."""
        try:
            outcome = self._child_outcome(job)
        except BaseException as e:
            outcome = Failed(type(e).__name__, f"could not run the attempt's child process: {e}")

        def resolve() -> None:
            if not done.done():
                done.set_result(outcome)

        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(resolve)

    def _child_outcome(self, job: _child.Job) -> Outcome:
        enforcement = self._enforcement
        if self._limits is None or enforcement is None:
            outcome, code = self._run_child(job)
            return outcome if outcome is not None else child_died(code)
        a = self.assignment
        fence = enforcement.fence(self._limits, f"{a.token.term}-{a.token.event_id}")
        try:
            outcome, code = self._run_child(dataclasses.replace(job, fence=fence))
            oom = enforcement.oom_killed(fence)  # read before its group is removed
        finally:
            enforcement.release(fence)
        if outcome is not None:
            return outcome
        return _fence.died(fence, code, oom) or child_died(code, fence)

    def _run_child(self, job: _child.Job) -> tuple[Outcome | None, int | None]:
        """Start the child and read its pipe to the end: its outcome (None: it died
        first) and exit code."""
        reader, writer = self._processes.Pipe(duplex=False)
        proc = self._processes.Process(
            target=_child.main, args=(job, writer), name=f"apollo11-step {job.assignment.label}"
        )
        with self._lock:
            if self.stopped:
                reader.close()
                writer.close()
                return failed(asyncio.CancelledError("stopped before it began")), None
            proc.start()
            self._pid = proc.pid
        writer.close()  # else the pipe never ends when the child dies
        outcome: Outcome | None = None
        try:
            while outcome is None:
                kind, body = reader.recv()
                if kind == _child.BEAT:
                    self.beat_json(body)
                elif kind == _child.DONE:
                    outcome = body
        except (EOFError, OSError):
            pass
        finally:
            reader.close()
        proc.join(CHILD_EXIT_GRACE_S if outcome is not None else None)
        if proc.exitcode is None:
            self._kill()
            proc.join()
        with self._lock:
            self._pid = None  # reaped: the pid may be someone else's from now on
        code = proc.exitcode
        proc.close()
        return outcome, code

    def _kill(self) -> None:
        with self._lock:
            pid = self._pid
            if pid is None:
                return
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                # not (yet) the leader of its own group: the child alone
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            except PermissionError:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
