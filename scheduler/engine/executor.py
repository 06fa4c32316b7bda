"""The executor seam: where step code runs, and what crosses the boundary.

The engine hands an executor an `Attempt`: the step's code, the `StepContext`
it is told (task, step, attempt number, input, its dependencies' results,
workflow and version, the fencing token) and `may_begin`, a check to make
immediately before the code begins. It gets back an `Outcome`, as data:

* `Succeeded(result)`: the code returned `result` (the engine records it; a
  result too big for an event fails the step, by the engine's rule);
* `Failed(...)`: the code raised; the exception's type name, its message, the
  qualified names of its classes (its MRO, which the retry rule matches: a
  worker sends them, scheduler/cause.py) and, for a `StepError`, the details the
  step chose to report;
* `NotBegun()`: `may_begin` said no, so the code never began (this node is no
  longer sure it holds the lease);
* `Lost(reason)`: where it ran is gone (a worker died or fell silent), and
  nobody knows how far it got.

A slot is held from `place` (before the STARTED is written: the STARTED names
where the attempt runs) to `release` (after its outcome is recorded). Giving
up on an attempt (a timeout, an operator's cancel) is `abandon` and then the
engine cancelling the `run` coroutine; `settle` then says what to wait for
before the step may run again. An attempt STARTED by an earlier primary on a
worker is `adopt`ed: its worker reports it when it reconnects. Nothing else
crosses: an executor writes no events and decides no retries. The remote
executor (scheduler/dispatch/) implements the same methods and its workers
find the code by (`ctx.workflow`, `ctx.version`, `ctx.step`) instead of `fn`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import inspect
import logging
import sys
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from apollo11.scheduler.cause import Cause, legacy, mro_names, retry_after
from apollo11.scheduler.errors import LeaseLostError
from apollo11.scheduler.workflow import StepContext, StepError, StepFn

log = logging.getLogger(__name__)


def _always() -> bool:
    return True


class AttemptToken(NamedTuple):
    """An attempt's name among all of its step's: the term and event id of its STARTED."""

    term: int
    event_id: int

    def __str__(self) -> str:
        return f"{self.term}/{self.event_id}"


NO_ATTEMPT = AttemptToken(0, 0)


@dataclass(frozen=True, slots=True)
class Attempt:
    """What the engine hands an executor: run `fn(ctx)` if `may_begin()` still says yes.
    `timeout_s`: what the engine allows it (the engine enforces it; a worker is told)."""

    fn: StepFn
    ctx: StepContext
    may_begin: Callable[[], bool] = _always
    token: AttemptToken = NO_ATTEMPT
    timeout_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Succeeded:
    result: Any


@dataclass(frozen=True, slots=True)
class Failed:
    """The code raised. `declared`: it raised a StepError, which chose its message
    and `details` for the FAILED event; otherwise the message is the exception's."""

    error_type: str
    message: str
    details: dict[str, Any]
    declared: bool = False
    mro: tuple[str, ...] = ()  # qualified class names, most specific first; (): unknown

    @property
    def cause(self) -> Cause:
        """What the retry rule matches (scheduler/cause.py)."""
        if not self.mro:  # an older worker's, or a failure of no class (InvalidResult)
            return legacy(self.error_type, self.message, self.details)
        return Cause(
            self.mro[0], self.mro, self.message, retry_after(self.details.get("retry_after"))
        )


@dataclass(frozen=True, slots=True)
class NotBegun:
    """`may_begin` said no: the code never began."""


@dataclass(frozen=True, slots=True)
class Lost:
    """Where the attempt ran is gone; `reason` says how (for the FAILED event)."""

    reason: str


Outcome = Succeeded | Failed | NotBegun | Lost
NOT_BEGUN = NotBegun()
EMBEDDED = ""  # `place`'s answer for "here, in this process"


def failure(e: BaseException) -> Failed:
    """An exception as the data that crosses the seam."""
    mro = mro_names(type(e))
    if isinstance(e, StepError):
        return Failed(type(e).__name__, str(e), e.details, declared=True, mro=mro)
    return Failed(type(e).__name__, str(e), {}, mro=mro)


class Executor(Protocol):
    """Where step code runs: in process (`InProcessExecutor`) or on workers
    (scheduler/dispatch/RemoteExecutor)."""

    def place(
        self, task_id: str, step: str, workflow: str, version: int, labels: Mapping[str, str]
    ) -> str | None:
        """Hold a slot for the step's next attempt: where it will run (a worker's name,
        or EMBEDDED), or None when no slot is free for it now (see `unplaced`).
        `labels`: what the step requires of a worker."""

    def unplaced(self, workflow: str, version: int, labels: Mapping[str, str]) -> str | None:
        """Why `place` found nothing, for operators; None when only every slot that
        could take it is busy (back-pressure, not a problem)."""

    def release(self, task_id: str, step: str) -> None:
        """The step's attempt is over and its outcome recorded (or it never began):
        its slot is free."""

    def free_slots(self) -> int:
        """How many attempts `place` could start now, at most."""

    def free_for(self, workflow: str, version: int, labels: Mapping[str, str]) -> int:
        """How many attempts of this kind `place` could start now, at most."""

    def watch_capacity(self, notify: Callable[[], None]) -> None:
        """Call `notify` when slots become free other than by `release` (a worker
        connected)."""

    def run(self, attempt: Attempt) -> Awaitable[Outcome]:
        """Run the attempt and say how it ended. Never raises for the step's fault;
        cancelling the call gives up on the attempt (see `abandon`, `settle`). An
        awaitable, not necessarily a coroutine: the remote executor's is the future
        its worker's result sets."""

    async def adopt(self, attempt: Attempt, where: str) -> Outcome:
        """An attempt an earlier primary STARTED on `where`: wait for its outcome
        (`Lost` if nobody reports it)."""

    def abandon(self, task_id: str, step: str, reason: str) -> None:
        """The engine gives up on the running attempt (timeout, cancel) and is about
        to cancel `run`: stop it where it runs. (Not called when leadership is lost:
        then the attempt is left to the next primary.)"""

    def settle(self, task_id: str, step: str) -> Awaitable[None] | None:
        """Something to await until nothing of this step is still executing (after a
        timeout or a cancel the engine waits on it before the step may run again), or
        None when nothing is (the common case, decided without a coroutine)."""


class InProcessExecutor:
    """Coroutines on the loop; plain functions on a pool of threads of our own.

    A thread cannot be interrupted: when a timeout or a cancel gives up on one,
    it is remembered, and `settle` waits for it to end, so a retry never runs
    beside an attempt that is still going.
    """

    def __init__(self, threads: int = 32) -> None:
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="apollo11-step")
        self._lingering: dict[tuple[str, str], concurrent.futures.Future[Any]] = {}
        # inspect's answer is dear next to a dict lookup, and asked at every attempt
        self._is_async: dict[StepFn, bool] = {}

    def place(
        self, task_id: str, step: str, workflow: str, version: int, labels: Mapping[str, str]
    ) -> str | None:
        return EMBEDDED  # the engine's own slots (`concurrency`) are the limit here

    def unplaced(self, workflow: str, version: int, labels: Mapping[str, str]) -> str | None:
        return None  # place never refuses here

    def release(self, task_id: str, step: str) -> None:
        return None

    def free_slots(self) -> int:
        return sys.maxsize

    def free_for(self, workflow: str, version: int, labels: Mapping[str, str]) -> int:
        return sys.maxsize

    def watch_capacity(self, notify: Callable[[], None]) -> None:
        return None

    async def adopt(self, attempt: Attempt, where: str) -> Outcome:
        return Lost(f"it ran on worker {where!r}, and this node takes no workers")

    def abandon(self, task_id: str, step: str, reason: str) -> None:
        return None  # cancelling `run` is enough: see `settle` for threads

    async def run(self, attempt: Attempt) -> Outcome:
        fn, ctx, may_begin = attempt.fn, attempt.ctx, attempt.may_begin
        is_async = self._is_async.get(fn)
        if is_async is None:
            is_async = self._is_async[fn] = inspect.iscoroutinefunction(fn)
        try:
            if is_async:
                if not may_begin():  # nothing awaits between this check and the step's start
                    return NOT_BEGUN
                return Succeeded(await fn(ctx))
            # Checked in the thread: a thread of the pool may begin it well after this line.
            # in this task's context: its log lines carry the attempt's fields (logfmt)
            cf = self._pool.submit(contextvars.copy_context().run, _begun, may_begin, fn, ctx)
            try:
                result = await asyncio.wrap_future(cf)
            except asyncio.CancelledError:
                if not cf.done():
                    self._lingering[(ctx.task_id, ctx.step)] = cf
                raise
            if inspect.isawaitable(result):
                result = await result
            return Succeeded(result)
        except LeaseLostError:
            return NOT_BEGUN
        except Exception as e:
            return failure(e)

    def close(self) -> None:
        """Let the pool's threads end once their steps do (an engine that is done here:
        the testing kit's, after a failover or at the end of a test)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def settle(self, task_id: str, step: str) -> Awaitable[None] | None:
        cf = self._lingering.pop((task_id, step), None)
        if cf is None or cf.done():
            return None
        log.warning("step %s/%s: waiting for its abandoned thread to end", task_id, step)
        return _quietly(asyncio.wrap_future(cf))


def _begun(may_begin: Callable[[], bool], fn: StepFn, ctx: StepContext) -> Any:
    if not may_begin():
        raise LeaseLostError(
            f"attempt {ctx.attempt} of {ctx.task_id}/{ctx.step} not begun: this node is no "
            f"longer sure it holds the lease"
        )
    return fn(ctx)


async def _quietly(fut: Awaitable[Any]) -> None:
    with contextlib.suppress(BaseException):
        await fut
