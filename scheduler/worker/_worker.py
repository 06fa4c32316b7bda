"""Worker: one process that runs steps for the primary, over one Workers.Connect stream.

A session is handshake -> stream -> end:

* handshake: Register (name, instance, slots, every workflow version, labels, the
  attempts still running here), then every result not yet acknowledged, then wait
  for Registered; attempts the primary calls stale are stopped and forgotten;
* stream: a reader runs what Assign carries, stops what CancelAttempt names and
  drops what Acks acknowledge; a writer sends the results finished since its last
  send in one Results message, and a heartbeat every heartbeat_interval_s;
* end: how the stream ended decides where to connect next (`_reconnect`).

Attempts belong to the worker, not to a stream: they run on while it reconnects,
and the next Register reports them. Each result is kept until acknowledged and
sent again on every new stream (`_outbox`). `stop()` drains: no new attempt
begins, running ones get `grace_s` to finish, the rest are handed back.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import multiprocessing
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any, cast

import grpc

from apollo11.scheduler import logfmt, tracing
from apollo11.scheduler.cause import mro_names
from apollo11.scheduler.client._connection import (
    CLIENT_OPTIONS,
    channel_credentials_for,
    endpoints_from,
    token_from_env,
)
from apollo11.scheduler.errors import ApolloError, InvalidArgumentError
from apollo11.scheduler.steplimits import MIN_MEMORY, effective, format_size
from apollo11.scheduler.wire import ELECTION_METADATA, LEADER_METADATA
from apollo11.scheduler.worker import _codec as codec
from apollo11.scheduler.worker._attempt import Isolation, RunningAttempt
from apollo11.scheduler.worker._fence import Enforcement
from apollo11.scheduler.worker._journal import RemoteJournal
from apollo11.scheduler.worker._outbox import Outbox
from apollo11.scheduler.worker._outcome import not_found
from apollo11.scheduler.worker._reconnect import Ended, GiveUp, Reconnect
from apollo11.scheduler.worker._records import (
    CANCELLED,
    Acks,
    Assign,
    Assignment,
    Cancel,
    Failed,
    JournalAnswer,
    Outcome,
    Registration,
    Result,
    Token,
)
from apollo11.scheduler.workflow import Registry, StepError

log = logging.getLogger("apollo11.worker")

DEFAULT_HEARTBEAT_INTERVAL_S = 2.0  # until Registered says otherwise
CONNECT_TIMEOUT_S = 5.0  # for Registered: a primary that says nothing is passed over
# The primary enforces timeout_s; this worker stops an attempt this long after it, in
# case the primary is gone and cannot.
TIMEOUT_GRACE_S = 5.0
# After stop() hands attempts back: how long to wait for the last results' acks.
FLUSH_TIMEOUT_S = 5.0
# A failing connection is logged when its sentence changes, and at most this often else.
LOG_EVERY_S = 30.0
# A durable main's journal request the primary cannot answer yet (it is taking over):
# asked again after this, doubling up to the most.
JOURNAL_RETRY_S = (0.1, 2.0)


class _StreamLost(Exception):
    """The stream a journal request went on ended before its reply."""


class _PrimarySilent(Exception):
    """A primary that pings said nothing for SILENT_INTERVALS heartbeat intervals."""


# A primary that pings writes at least every interval (at most ~1.5 of them apart):
# four intervals of silence is a frozen process (SIGSTOP, a hung host), whose
# socket stays open, so the kernel never tells. At the defaults (2 s), 8 s: a
# failover's new primary waits --worker-heartbeat-timeout (10 s) for its workers.
SILENT_INTERVALS = 4


# gRPC's own reconnect backoff (1 s, growing to 120 s) would fail calls to a node that
# is back fast for as long: kept as short as our own retries (_reconnect).
WORKER_OPTIONS: list[tuple[str, int]] = [
    *CLIENT_OPTIONS,
    # what a node sends at most (its --max-message-bytes default), not gRPC's 4 MiB
    ("grpc.max_receive_message_length", 16 * 1024 * 1024),
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 1000),
]

# Why an attempt was stopped, and what it then reports.
CANCEL = "cancelled by the primary"
STALE = "stale"  # the primary no longer holds it: stopped, nothing reported
TIMEOUT = "timeout"
HAND_BACK = "handed back"  # stop(): reported cancelled, so that it runs elsewhere now


class WorkerRefusedError(ApolloError):
    """The primary refused this worker's configuration (labels, name, credentials):
    retrying cannot help."""


def default_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("apollo11")
    except PackageNotFoundError:
        return "unknown"


@dataclass
class _Session:
    endpoint: str
    registration: Registration | None = None
    heard: float = field(default_factory=time.monotonic)  # the primary's last message


class Worker:
    def __init__(
        self,
        endpoints: str | Sequence[str] | None,
        registry: Registry,
        *,
        name: str | None = None,
        slots: int = 1,
        labels: Mapping[str, str] | None = None,
        isolation: Isolation = "thread",
        step_memory: int | None = None,
        modules: Sequence[str] | None = None,
        ca: str | Path | None = None,
        cert: str | Path | None = None,
        key: str | Path | None = None,
        tls: bool | None = None,
        token: str | None = None,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        timeout_grace_s: float = TIMEOUT_GRACE_S,
    ) -> None:
        """`endpoints`: any nodes of the cluster (`a:1,b:2`, a list, or APOLLO11_SERVER);
        the worker finds the primary. `registry`: what it can run, every version of it.
        `isolation="process"` runs each attempt in a child process that imports
        `modules` (default: the modules the registry's steps are defined in), and so
        does every step with `limits=` (each in a child of its own, fenced in:
        _fence.py), whatever the isolation. `step_memory`: bytes, the memory limit of
        every step that declares none (each then runs in a child too).
        `ca`, `cert`, `key`, `tls`, `token` as for `Client` (each defaults to its
        APOLLO11_* variable). `name`: unique among the workers (default HOST-PID); on
        a node with authentication it is the credential's name or one beneath it
        (`etl`, `etl/a`), and the default is HOST-PID beneath it (`etl/HOST-PID`):
        `name` says what the primary registered, once connected."""
        if slots < 1:
            raise InvalidArgumentError(f"slots must be at least 1, got {slots}")
        if isolation not in ("thread", "process"):
            raise InvalidArgumentError(f"isolation must be thread or process, got {isolation!r}")
        if not registry.all():
            raise InvalidArgumentError("the registry holds no workflow: nothing to run")
        if step_memory is not None and step_memory < MIN_MEMORY:
            raise InvalidArgumentError(
                f"step memory {format_size(step_memory)} is less than the "
                f"{format_size(MIN_MEMORY)} a step's process needs to start"
            )
        self.endpoints = endpoints_from(endpoints)
        self.registry = registry
        # What it asks to be called; `name` becomes what the primary registered it as
        # (beneath its credential's name when it asks for its default: worker.proto)
        self._asked_name = name or default_name()
        self._default_name = not name
        self.name = self._asked_name
        self.instance = uuid.uuid4().hex  # a restarted worker is a new instance
        self.slots = slots
        self.labels = dict(labels or {})
        self.isolation: Isolation = isolation
        self.step_memory = step_memory
        self.modules = tuple(modules) if modules is not None else self._step_modules()
        children = isolation == "process" or step_memory is not None or self._limited()
        if children and "__main__" in self.modules:
            raise InvalidArgumentError(
                "process isolation (and a step's limits) imports the workflow modules in a "
                "child process: define the workflows in an importable module, not in the "
                "script that is run"
            )
        # Chosen before the forkserver starts: a worker fenced by cgroups moves itself
        # into a leaf group first, and the forkserver and the steps' children follow it.
        self._enforcement: Enforcement | None = None
        if step_memory is not None or self._limited():
            self._enforcement = Enforcement.choose()
        self.connect_timeout_s = connect_timeout_s
        self.timeout_grace_s = timeout_grace_s
        self._credentials = channel_credentials_for(ca, cert, key, tls)
        token = token or token_from_env()
        self._metadata = None if not token else (("authorization", f"Bearer {token}"),)
        self._version = _package_version()
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._pool = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="apollo11-step")
        self._processes: ForkServerContext = multiprocessing.get_context("forkserver")
        if children:
            # the forkserver imports only this (not the __main__ it would by default):
            # each child then forks with the worker's modules half loaded already
            self._processes.set_forkserver_preload(["apollo11.scheduler.worker._child"])
        self._attempts: dict[Token, RunningAttempt] = {}
        self._tasks: dict[Token, asyncio.Task[None]] = {}
        self._outbox = Outbox()
        self._interval = DEFAULT_HEARTBEAT_INTERVAL_S
        self._session: _Session | None = None
        self._draining = False
        self._finished = asyncio.Event()
        self._changed = asyncio.Event()  # an attempt ended or a result was acknowledged
        self._wake = asyncio.Event()  # the writer has something to do: a result, a new interval
        # durable mains' journal requests: queued for the writer, and their replies' futures
        self._journal_out: list[codec.WorkerMessage] = []
        self._asks: dict[int, asyncio.Future[JournalAnswer]] = {}
        self._ask_ids = itertools.count(1)
        self._up = asyncio.Event()  # a stream is registered: journal requests may go
        self._last_log: tuple[str, float] = ("", 0.0)

    def _limited(self) -> bool:
        """Does a step the registry holds declare limits?"""
        return any(s.limits is not None for wf in self.registry.all() for s in wf.steps.values())

    def _step_modules(self) -> tuple[str, ...]:
        found = {
            str(getattr(s.fn, "__module__", ""))
            for wf in self.registry.all()
            for s in wf.steps.values()
        }
        return tuple(sorted(m for m in found if m))

    # ------------------------------------------------------------- public face

    @property
    def connected(self) -> Registration | None:
        """What the primary answered this stream's Register with (None: not connected)."""
        return None if self._session is None else self._session.registration

    @property
    def running(self) -> list[RunningAttempt]:
        return list(self._attempts.values())

    async def run(self) -> None:
        """Connect, run what is assigned, reconnect, until `stop()` (or cancelled).

        Raises WorkerRefusedError when the primary refuses the configuration."""
        if self._enforcement is not None:  # how, and why not the other way
            log.info("%s", self._enforcement.sentence)
        reconnect = Reconnect(self.endpoints, name=self.name)
        endpoint, wait_s = reconnect.first(), self.connect_timeout_s
        try:
            while not self._finished.is_set():
                ended = await self._connect(endpoint, wait_s)
                if self._finished.is_set():
                    break
                decision = reconnect.after(ended)
                if isinstance(decision, GiveUp):
                    log.error("%s", decision.sentence)
                    raise WorkerRefusedError(decision.sentence)
                self._log_reconnect(decision.sentence, lost=ended.registered)
                endpoint = decision.endpoint
                wait_s = min(decision.wait_s or self.connect_timeout_s, self.connect_timeout_s)
                if decision.delay_s > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._finished.wait(), decision.delay_s)
        finally:
            await self._close()

    async def stop(self, grace_s: float = 30.0) -> None:
        """Drain and end `run()`: no new attempt begins (an assignment that arrives now
        is answered cancelled: nothing ran), running ones get `grace_s` to finish, the
        rest are stopped and handed back (reported cancelled), and the worker waits
        (a while) for the primary to acknowledge the last results."""
        self._draining = True
        await self._until(lambda: not self._attempts, time.monotonic() + grace_s)
        if self._attempts:
            log.info("stopping: handing back %d running attempts", len(self._attempts))
            for attempt in list(self._attempts.values()):
                attempt.stop(HAND_BACK)
            # threads cannot be interrupted: wait a little for them, not forever
            await self._until(lambda: not self._attempts, time.monotonic() + FLUSH_TIMEOUT_S)
        await self._until(
            lambda: not len(self._outbox) or self.connected is None,
            time.monotonic() + FLUSH_TIMEOUT_S,
        )
        if len(self._outbox):
            log.warning("stopping with %d results not acknowledged", len(self._outbox))
        self._finished.set()

    async def _until(self, done: Callable[[], bool], deadline: float) -> None:
        """Wait until `done()` (checked whenever an attempt ends or an ack arrives)."""
        while True:
            self._changed.clear()  # before the check: a change after it wakes the wait
            left = deadline - time.monotonic()
            if done() or left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)

    def _log_reconnect(self, sentence: str, *, lost: bool) -> None:
        """Rate-limited: a worker that cannot reach anyone says so, not every 0.2 s."""
        now = time.monotonic()
        last, at = self._last_log
        if lost or sentence != last or now - at >= LOG_EVERY_S:
            log.warning("%s", sentence)
            self._last_log = (sentence, now)
        else:
            log.debug("%s", sentence)

    # ----------------------------------------------------------------- session

    def _channel(self, ep: str) -> grpc.aio.Channel:
        ch = self._channels.get(ep)
        if ch is None:
            if self._credentials is None:
                ch = grpc.aio.insecure_channel(ep, options=WORKER_OPTIONS)
            else:
                ch = grpc.aio.secure_channel(ep, self._credentials, options=WORKER_OPTIONS)
            self._channels[ep] = ch
        return ch

    async def _connect(self, ep: str, wait_s: float) -> Ended:
        """One stream, handshake to end (`wait_s` for its Registered); says how it ended."""
        session = _Session(ep)
        call = codec.open_stream(self._channel(ep), self._metadata)
        tasks: list[asyncio.Task[Any]] = []
        try:
            running = [a.running() for a in self._attempts.values()]
            await call.write(
                codec.register(
                    name=self._asked_name,
                    default_name=self._default_name,
                    instance=self.instance,
                    slots=self.slots,
                    workflows=[(wf.name, wf.version) for wf in self.registry.all()],
                    labels=self.labels,
                    running=running,
                    version=self._version,
                )
            )
            resend = self._outbox.take_all()
            for message in codec.results(resend):
                await call.write(message)
            tasks = [
                asyncio.create_task(self._read(call, session, wait_s)),
                asyncio.create_task(self._write(call, session)),
                asyncio.create_task(self._listen(session)),
                asyncio.create_task(self._finished.wait()),
            ]
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                if not t.cancelled() and t.exception() is not None:
                    raise cast(BaseException, t.exception())
            if self._finished.is_set():
                return Ended(ep, grpc.StatusCode.CANCELLED, "stopping", None, True)
            return await self._ended(call, session, "")
        except grpc.aio.AioRpcError as e:
            return self._ended_by(e, session)
        except codec.ProtocolError as e:
            return Ended(ep, None, str(e), registered=session.registration is not None)
        except _PrimarySilent as e:
            return Ended(ep, None, str(e), registered=True, silent=True)
        except TimeoutError:
            return Ended(ep, None, f"no Registered within {wait_s:g} s")
        except (asyncio.InvalidStateError, grpc.aio.UsageError):
            # a write on a call the server already ended: its status says why
            return await self._ended(call, session, "")
        finally:
            for t in tasks:
                t.cancel()
            call.cancel()
            self._session = None
            self._up.clear()
            self._journal_out.clear()
            for fut in self._asks.values():  # asked again on the next stream
                if not fut.done():
                    fut.set_exception(_StreamLost())

    async def _ended(
        self, call: grpc.aio.StreamStreamCall[Any, Any], session: _Session, fallback: str
    ) -> Ended:
        registered = session.registration is not None
        try:
            code = await asyncio.wait_for(call.code(), 1.0)
            details = await call.details()
            trailer = await call.trailing_metadata()
        except (TimeoutError, grpc.aio.AioRpcError):
            if self._finished.is_set():
                return Ended(
                    session.endpoint, grpc.StatusCode.CANCELLED, "stopping", None, registered
                )
            return Ended(session.endpoint, None, fallback or "the stream ended", None, registered)
        if code is grpc.StatusCode.OK:
            details = details or "the primary ended the stream"
        leader, election = _trailer(trailer)
        return Ended(session.endpoint, code, details or "", leader, registered, election=election)

    def _ended_by(self, e: grpc.aio.AioRpcError, session: _Session) -> Ended:
        leader, election = _trailer(e.trailing_metadata())
        return Ended(
            session.endpoint,
            e.code(),
            e.details() or "",
            leader,
            session.registration is not None,
            election=election,
        )

    async def _read(
        self, call: grpc.aio.StreamStreamCall[Any, Any], session: _Session, wait_s: float
    ) -> None:
        first = await asyncio.wait_for(call.read(), wait_s)
        if first is grpc.aio.EOF:
            return
        self._registered(codec.registration(first), session)
        while True:
            message = await call.read()
            session.heard = time.monotonic()
            if message is grpc.aio.EOF:
                return
            match codec.dispatch(message):
                case None:
                    # a newer primary's message: this worker has nothing to do with it
                    log.debug("ignored a message this worker does not know: %s", message)
                case Assign(assignments=assignments):
                    for a in assignments:
                        self._start(a)
                case Cancel(token=token, reason=reason):
                    self._cancel(token, reason)
                case JournalAnswer() as answer:
                    fut = self._asks.get(answer.id)
                    if fut is not None and not fut.done():
                        fut.set_result(answer)
                case Acks(acks=acks):
                    for ack in acks:
                        result = self._outbox.acknowledge(ack.token)
                        if result is not None and not ack.accepted:
                            log.warning(
                                "the primary refused the result of %s/%s #%d: %s",
                                result.task_id,
                                result.step,
                                result.attempt,
                                ack.reason or "no reason given",
                            )
                    self._changed.set()

    async def _listen(self, session: _Session) -> None:
        """Raise _PrimarySilent when a primary that pings has said nothing for
        SILENT_INTERVALS intervals: the stream ends, and the worker looks for the
        primary (the new one adopts its running attempts)."""
        while True:
            await asyncio.sleep(self._interval / 2)
            reg = session.registration
            if reg is None or not reg.pings:
                continue
            silent = time.monotonic() - session.heard
            if silent > SILENT_INTERVALS * self._interval:
                raise _PrimarySilent(
                    f"the primary {reg.node_id} said nothing for {silent:.1f} s "
                    f"({SILENT_INTERVALS} heartbeat intervals): taking it for gone"
                )

    def _registered(self, reg: Registration, session: _Session) -> None:
        session.registration = reg
        if reg.name:  # an older primary does not say: the name asked for, then
            self.name = reg.name
        self._session = session
        self._interval = reg.heartbeat_interval_s or DEFAULT_HEARTBEAT_INTERVAL_S
        self._wake.set()  # the writer's wait was for the old interval
        log.info(
            "connected to the primary %s (term %d) at %s as %s with %d slots",
            reg.node_id,
            reg.term,
            session.endpoint,
            self.name,
            self.slots,
        )
        self._last_log = ("", 0.0)
        self._up.set()
        for token in reg.stale:
            self._outbox.forget(token)
            attempt = self._attempts.get(token)
            if attempt is not None:
                log.info(
                    "attempt %s is stale (the primary no longer holds it): stopping it",
                    attempt.assignment.label,
                )
                attempt.stop(STALE)

    async def _write(self, call: grpc.aio.StreamStreamCall[Any, Any], session: _Session) -> None:
        """The stream's one writer: results as they finish, and heartbeats."""
        last_beat = time.monotonic()
        while True:
            # the interval is read each time: Registered may change it after this began
            wait = last_beat + self._interval - time.monotonic()
            if wait > 0 and not self._wake.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait)
            self._wake.clear()
            journal, self._journal_out = self._journal_out, []
            for message in journal:
                await call.write(message)
            batch = self._outbox.take_unsent()
            reg = session.registration  # None until Registered is read: the whole form
            for message in codec.results(batch, packed=reg is not None and reg.packed_results):
                await call.write(message)
            if time.monotonic() >= last_beat + self._interval:
                await call.write(codec.heartbeat(a.running() for a in self._attempts.values()))
                last_beat = time.monotonic()

    # ---------------------------------------------------------------- attempts

    def _start(self, a: Assignment) -> None:
        if a.token in self._attempts or self._outbox.holds(a.token):
            log.debug("attempt %s assigned again: already here", a.label)
            return
        if self._draining:
            log.info("attempt %s not begun: this worker is stopping", a.label)
            self._finish(Result.of(a, CANCELLED, 0.0))
            return
        wf = self.registry.get(a.workflow, a.version)
        step = None if wf is None else wf.steps.get(a.step)
        if step is None:
            outcome = not_found(a)
            log.warning("attempt %s failed: %s", a.label, outcome.message)
            self._finish(Result.of(a, outcome, 0.0))
            return
        journal = None
        if a.durable is not None:
            journal = RemoteJournal(a.durable, functools.partial(self._ask, a))
        attempt = RunningAttempt(
            a,
            step.fn,
            worker=self.name,
            isolation=self.isolation,
            pool=self._pool,
            processes=self._processes,
            modules=self.modules,
            journal=journal,
            limits=effective(step.limits, self.step_memory),
            enforcement=self._enforcement,
        )
        self._attempts[a.token] = attempt
        self._tasks[a.token] = asyncio.create_task(
            self._drive(attempt), name=f"apollo11-attempt {a.label}"
        )

    async def _drive(self, attempt: RunningAttempt) -> None:
        a = attempt.assignment
        if log.isEnabledFor(logging.DEBUG):  # its label is a string built for nothing
            log.debug("attempt %s started", a.label)
        timer = None
        if a.timeout_s > 0:
            timer = asyncio.get_running_loop().call_later(
                a.timeout_s + self.timeout_grace_s, self._time_out, attempt
            )
        # this task runs the one attempt and ends: its log lines carry the attempt's
        # fields from here on, no context manager to undo it (tens of thousands a second)
        logfmt.tag_task(a.task_id, a.step, a.attempt, a.token.term)
        try:
            if a.traceparent:
                with tracing.current(a.traceparent):
                    outcome = await attempt.run()
            else:
                outcome = await attempt.run()
        finally:
            if timer is not None:
                timer.cancel()
            self._attempts.pop(a.token, None)
            self._tasks.pop(a.token, None)
            self._changed.set()
        seconds = time.monotonic() - attempt.started
        reported = self._reported(attempt, outcome)
        if reported is not None:
            self._finish(Result.of(a, reported, seconds))

    def _reported(self, attempt: RunningAttempt, outcome: Outcome) -> Outcome | None:
        """What a finished attempt reports, by why it ended (None: nothing)."""
        label = attempt.assignment.label
        if attempt.stopped is None:
            if isinstance(outcome, Failed):
                log.info(
                    "attempt %s finished: failed, %s: %s",
                    label,
                    outcome.error_type,
                    outcome.message,
                )
            elif log.isEnabledFor(logging.DEBUG):
                log.debug("attempt %s finished", label)
            return outcome
        if attempt.stopped == STALE:
            log.info("attempt %s stopped and forgotten (stale)", label)
            return None
        if attempt.stopped == TIMEOUT:
            return Failed(
                "TimeoutError",
                f"the attempt ran past its timeout of {attempt.assignment.timeout_s:g} s "
                f"(+{self.timeout_grace_s:g} s) on worker {self.name} and was stopped there",
                mro=mro_names(TimeoutError),  # what on={TimeoutError: ...} matches
            )
        log.info("attempt %s cancelled (%s)", label, attempt.stopped)
        return CANCELLED

    def _time_out(self, attempt: RunningAttempt) -> None:
        log.warning(
            "attempt %s ran past its timeout of %g s (+%g s) and the primary did not cancel "
            "it: stopping it here",
            attempt.assignment.label,
            attempt.assignment.timeout_s,
            self.timeout_grace_s,
        )
        attempt.stop(TIMEOUT)

    def _cancel(self, token: Token, reason: str) -> None:
        attempt = self._attempts.get(token)
        if attempt is not None:
            log.info(
                "attempt %s: cancel asked (%s)", attempt.assignment.label, reason or "no reason"
            )
            attempt.stop(CANCEL)
            return
        if self._outbox.holds(token):
            return  # it ended before the cancel: its result says so
        # Nothing runs here under that token: say so at once, so the step may run elsewhere.
        self._finish(Result(token, "", "", 0, CANCELLED, 0.0))

    async def _ask(
        self,
        a: Assignment,
        *,
        record: tuple[bytes, bytes, bytes] | None = None,
        resolve: bytes | None = None,
    ) -> JournalAnswer:
        """A durable main's journal request to the primary, asked again on the next
        stream when this one breaks, and after a pause while the primary cannot answer
        yet; StepError when it refuses (the main must stop)."""
        pause, most = JOURNAL_RETRY_S
        while True:
            await self._up.wait()
            rid = next(self._ask_ids)
            fut: asyncio.Future[JournalAnswer] = asyncio.get_running_loop().create_future()
            self._asks[rid] = fut
            self._journal_out.append(codec.journal_request(rid, a, record=record, resolve=resolve))
            self._wake.set()
            try:
                answer = await fut
            except _StreamLost:
                continue
            finally:
                self._asks.pop(rid, None)
            if answer.retry:
                await asyncio.sleep(pause)
                pause = min(most, pause * 2)
                continue
            if answer.error:
                raise StepError(
                    f"the primary refused the journal request: {answer.error}", final=True
                )
            return answer

    def _finish(self, result: Result) -> None:
        self._outbox.put(result)
        self._wake.set()
        self._changed.set()

    async def _close(self) -> None:
        """The end of run(): attempts go with the worker (children are killed)."""
        tasks = list(self._tasks.values())
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._pool.shutdown(wait=False, cancel_futures=True)
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()


def _trailer(trailer: Any) -> tuple[str | None, bool]:
    """The primary a refusal names, and whether it says an election is under way."""
    leader, election = None, False
    for key, value in trailer or ():
        if key == LEADER_METADATA:
            leader = str(value)
        elif key == ELECTION_METADATA:
            election = True
    return leader, election
