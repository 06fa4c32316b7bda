"""Client and SyncClient: calls that follow the primary and retry what is safe."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

import grpc

from apollo11.scheduler.client import _convert as convert
from apollo11.scheduler.client import _requests as build
from apollo11.scheduler.client._connection import (
    CLIENT_OPTIONS,
    channel_credentials_for,
    endpoints_from,
    token_from_env,
)
from apollo11.scheduler.client._errors import (
    TaskCancelled,
    TaskFailed,
    UnavailableError,
    translate,
)
from apollo11.scheduler.client._handle import SyncTaskHandle, TaskHandle, task_result
from apollo11.scheduler.client._views import (
    BackfillStarted,
    EventsPage,
    EventView,
    LimitChange,
    LimitsView,
    Page,
    ScheduleDescription,
    SchedulePage,
    ScheduleView,
    SentEvent,
    StatusView,
    Submission,
    TaskRead,
    TaskView,
    TermView,
)
from apollo11.scheduler.errors import ApolloError, NotLeaderError
from apollo11.v1 import scheduler_pb2 as pb
from apollo11.v1 import scheduler_pb2_grpc as pbg

if TYPE_CHECKING:  # the client never imports pydantic: the application that passes a model has
    from pydantic import BaseModel

    # nor a definition: a Workflow is read for its name, version and result model
    from apollo11.scheduler.workflow import InputT, ResultT, Workflow

T = TypeVar("T")
M = TypeVar("M", bound="BaseModel")

Duration = str | timedelta  # "90s", "1h30m", "2d", or a timedelta of whole seconds
Instant = str | datetime  # ISO-8601, or a datetime (naive: a wall-clock time, for `at`)


class _Keep:
    """The default of update_schedule's `input`: leave it as it is (None sets null)."""

    def __repr__(self) -> str:
        return "KEEP"


KEEP: Any = _Keep()


class Client:
    def __init__(
        self,
        endpoints: str | Sequence[str] | None = None,
        *,
        timeout_s: float = 10.0,
        connect_timeout_s: float = 2.0,
        retries: int = 6,
        backoff_s: float = 0.2,
        max_backoff_s: float = 3.0,
        failover_s: float = 15.0,
        ca: str | Path | None = None,
        cert: str | Path | None = None,
        key: str | Path | None = None,
        token: str | None = None,
        tls: bool | None = None,
    ) -> None:
        """`ca`, `cert`, `key`: PEM files (the CA that signed the nodes' certificates;
        a client certificate and key where the nodes require one); `token`: a bearer
        token. Each defaults to its APOLLO11_* variable (APOLLO11_CA, APOLLO11_CERT,
        APOLLO11_KEY, APOLLO11_TOKEN or APOLLO11_TOKEN_FILE). TLS is on when a CA or
        a certificate is given, or `tls` (the system's roots then).

        `connect_timeout_s`: until this client has reached a node once, a call that
        reaches none gives up after this long (UnavailableError naming the
        endpoints), where a wrong address or a cluster that is down shows at once.
        Once a node answered, a call that no node takes (one is gone, the others are
        electing) is asked again every ~100 ms for up to `failover_s`: it reaches the
        new primary right after that one takes writes (a TTL and a little, by
        default). Other transient errors are retried `retries` times, with backoff
        from `backoff_s` to `max_backoff_s`. `retries=0`: no retry at all."""
        if connect_timeout_s <= 0:
            raise ValueError(f"connect_timeout_s must be > 0, got {connect_timeout_s}")
        self.endpoints = endpoints_from(endpoints)
        self._credentials = channel_credentials_for(ca, cert, key, tls)
        token = token or token_from_env()
        self._metadata = None if not token else (("authorization", f"Bearer {token}"),)
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._reached = False  # a node has answered this client (anything but no connection)
        self.retries = retries
        self.failover_s = failover_s if retries > 0 else 0.0
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._primary: str | None = None
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._stubs: dict[tuple[str, str], Any] = {}
        self._loop: asyncio.AbstractEventLoop | None = None  # the channels' loop

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._loop is not asyncio.get_running_loop():
            self._forget_channels()  # another loop's: not closable from this one
            return
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()
        self._stubs.clear()

    def _forget_channels(self) -> None:
        """Drop channels made on another loop. A grpc.aio channel is bound to the loop
        it was made on: used from the next `asyncio.run` it raises "Event loop is
        closed" (and grpc warns of a coroutine never awaited). Those of a loop still
        running are closed on it; a closed loop's are gone with it."""
        old, channels = self._loop, list(self._channels.values())
        self._channels.clear()
        self._stubs.clear()
        self._loop = None
        if old is not None and not old.is_closed() and old.is_running():
            for ch in channels:
                asyncio.run_coroutine_threadsafe(ch.close(), old)

    def _channel(self, ep: str) -> grpc.aio.Channel:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._forget_channels()
            self._loop = loop
        ch = self._channels.get(ep)
        if ch is None:
            if self._credentials is None:
                ch = grpc.aio.insecure_channel(ep, options=CLIENT_OPTIONS)
            else:
                ch = grpc.aio.secure_channel(ep, self._credentials, options=CLIENT_OPTIONS)
            self._channels[ep] = ch
        return ch

    def _stub(self, service: str, ep: str) -> Any:
        stub = self._stubs.get((service, ep))
        if stub is None or self._loop is not asyncio.get_running_loop():
            make = pbg.SchedulerStub if service == "scheduler" else pbg.ClusterStub
            stub = self._stubs[(service, ep)] = make(self._channel(ep))
        return stub

    def _order(self, write: bool) -> list[str]:
        """The presumed primary first, for writes and reads alike: a read right
        after a write then sees it (a standby may not have applied it yet)."""
        eps = list(self.endpoints)
        if self._primary:
            eps = [self._primary] + [e for e in eps if e != self._primary]
        return eps

    async def _call(
        self, service: str, method: str, request: Any, *, write: bool, retry: bool
    ) -> Any:
        """One unary call: follow the primary redirect, retry what is safe to retry.

        Each round tries every endpoint once (the presumed primary first for
        writes); `retries` is the number of further rounds, with capped backoff
        between them. An endpoint that cannot be reached stops being presumed
        primary.
        """
        delay = self.backoff_s
        last: ApolloError | None = None
        redirects = 0
        t0 = time.monotonic()
        backoffs = 0
        while True:
            if last is not None:
                if self._reached and isinstance(last, UnavailableError | NotLeaderError):
                    # No node takes it now: one is gone, and the others elect (UNAVAILABLE)
                    # or still name it until its lease lapses (a NotLeader whose primary
                    # did not answer): a failover. Ask again every ~100 ms, for up to
                    # failover_s: the call reaches the new primary right after it takes
                    # writes, not a backoff later.
                    if time.monotonic() - t0 >= self.failover_s:
                        break
                    pause = FAILOVER_POLL_S * (0.5 + _jitter())
                else:
                    backoffs += 1
                    if backoffs > self.retries:
                        break
                    pause = delay * (0.5 + _jitter())
                    delay = min(self.max_backoff_s, delay * 2)
                if not self._reached:
                    left = self.connect_timeout_s - (time.monotonic() - t0)
                    if left <= 0:
                        raise self._unreachable(last)
                    pause = min(pause, left)
                await asyncio.sleep(pause)
            eps = self._order(write)
            if not self._reached:
                eps = await self._reach_any(eps, t0 + self.connect_timeout_s)
            tried: set[str] = set()
            i = 0
            while i < len(eps):
                ep = eps[i]
                i += 1
                if ep in tried:
                    continue
                tried.add(ep)
                timeout = self.timeout_s
                if not self._reached:
                    deadline = t0 + self.connect_timeout_s
                    how = await self._connects(ep, deadline)
                    if how == _SILENT:
                        last = UnavailableError(f"{ep} took no connection")
                        continue
                    if how == _FAILED:
                        # the call fails at once, with gRPC's reason ("Connection
                        # refused", "Socket closed" from a TLS port): the message
                        timeout = max(0.05, min(timeout, deadline - time.monotonic()))
                try:
                    result = await getattr(self._stub(service, ep), method)(
                        request, timeout=timeout, metadata=_traced(self._metadata)
                    )
                    self._reached = True
                    if write:
                        self._primary = ep
                    return result
                except grpc.aio.AioRpcError as err:
                    # a node answered (UNAVAILABLE itself, say while no primary is
                    # elected) if the channel got its connection after all
                    self._reached = self._reached or self._connected(ep)
                    last = translate(err)
                    log.debug("%s on %s: %s", method, ep, last)
                    if isinstance(last, NotLeaderError) and last.leader and redirects < 3:
                        redirects += 1
                        self._primary = last.leader
                        eps.insert(i, last.leader)  # the named primary, next
                        tried.discard(last.leader)
                        continue
                    # CANCELLED from the server (a cancel of our own raises CancelledError
                    # instead): gRPC sheds calls that arrive while over 1000 wait for the
                    # node's event loop (grpc.server.max_pending_requests); the handler
                    # never ran. The node is alive: it stays the presumed primary.
                    shed = err.code() is grpc.StatusCode.CANCELLED
                    transient = shed or err.code() in (
                        grpc.StatusCode.UNAVAILABLE,
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                    )
                    if transient and not shed and ep == self._primary:
                        self._primary = None
                    if not (retry and (transient or isinstance(last, NotLeaderError))):
                        raise last from None
            if last is None:
                last = UnavailableError("no endpoint to call")
        raise self._hinted(last) if self._reached else self._unreachable(last)

    async def _reach_any(self, eps: list[str], deadline: float) -> list[str]:
        """`eps` with those that have a connection first: every endpoint connects at
        once, until one is READY, all have failed, or `deadline`. One at a time, a node
        that takes the connection and never answers (SIGSTOPped, hung, behind a firewall
        that drops) spent the whole connect deadline when it was listed first, and the
        live nodes after it were never asked: "cannot reach any node" from a cluster
        with two of three nodes up."""
        channels = {ep: self._channel(ep) for ep in eps}
        failed = (grpc.ChannelConnectivity.TRANSIENT_FAILURE, grpc.ChannelConnectivity.SHUTDOWN)
        while True:
            states = {ep: ch.get_state(try_to_connect=True) for ep, ch in channels.items()}
            ready = [ep for ep in eps if states[ep] is grpc.ChannelConnectivity.READY]
            left = deadline - time.monotonic()
            if ready or left <= 0 or all(st in failed for st in states.values()):
                return ready + [ep for ep in eps if ep not in ready]
            waits = [
                asyncio.ensure_future(channels[ep].wait_for_state_change(st))
                for ep, st in states.items()
                if st not in failed
            ]
            try:
                await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()

    async def _connects(self, ep: str, deadline: float) -> str:
        """Whether `ep`'s channel gets a connection (gRPC's READY) before `deadline`:
        _READY, _FAILED (refused, or a handshake that failed: a call then fails at
        once and says why) or _SILENT (it took the connection and never spoke
        HTTP/2 in time). Until one node has answered, this is what the connect
        deadline bounds, not the calls: a slow answer from a node that is there is
        waited for as long as timeout_s allows."""
        ch = self._channel(ep)
        state = ch.get_state(try_to_connect=True)
        while state is not grpc.ChannelConnectivity.READY:
            if state in (
                grpc.ChannelConnectivity.TRANSIENT_FAILURE,
                grpc.ChannelConnectivity.SHUTDOWN,
            ):
                return _FAILED
            left = deadline - time.monotonic()
            if left <= 0:
                return _SILENT
            try:
                async with asyncio.timeout(left):
                    await ch.wait_for_state_change(state)
            except TimeoutError:
                return _SILENT
            state = ch.get_state(try_to_connect=True)
        self._reached = True
        return _READY

    def _connected(self, ep: str) -> bool:
        return self._channel(ep).get_state() is grpc.ChannelConnectivity.READY

    def _unreachable(self, last: ApolloError) -> ApolloError:
        where = ", ".join(self.endpoints)
        return self._hinted(
            UnavailableError(
                f"cannot reach any node ({where}) within {self.connect_timeout_s:g}s: {last} "
                f"(is the node running, and is that its --listen address?)"
            )
        )

    def _hinted(self, err: ApolloError) -> ApolloError:
        """A plaintext call to a TLS port ends in "Socket closed": say what fixes it."""
        plaintext = self._credentials is None
        if isinstance(err, UnavailableError) and plaintext and "Socket closed" in str(err):
            return UnavailableError(
                f"{err} (if the nodes use TLS, pass --ca FILE or set APOLLO11_CA)"
            )
        return err

    # -------------------------------------------------------------- writes

    @overload
    async def submit(
        self,
        workflow: Workflow[InputT, ResultT],
        input: InputT | None = None,
        *,
        idempotency_key: str | None = None,
        version: int = 0,
        priority: int | None = None,
    ) -> TaskHandle[ResultT]: ...

    @overload
    async def submit(
        self,
        workflow: str,
        input: Any = None,
        *,
        idempotency_key: str | None = None,
        version: int = 0,
        priority: int | None = None,
    ) -> TaskHandle[Any]: ...

    async def submit(
        self,
        workflow: Workflow[Any, Any] | str,
        input: Any = None,
        *,
        idempotency_key: str | None = None,
        version: int = 0,
        priority: int | None = None,
    ) -> TaskHandle[Any]:
        """Submit a task of `workflow`: a Workflow (its own version unless `version`;
        the handle is typed by its `result=` model) or a workflow's name (its newest
        version unless `version`; the handle is untyped). `input`: JSON, or an instance
        of the workflow's `input=` model. `priority`: 1 (first) to 5 among tasks waiting
        for a slot of a limit, 3 by default (docs/flow-control.md). Returns a TaskHandle
        (its `task_id`, `created`, `event_id`, and `await handle.result()`)."""
        name, version, model = _target(workflow, version)
        key = idempotency_key or f"client-{uuid.uuid4()}"  # makes the retry below safe
        text = build.json_text(input, "input")
        rank = build.priority_value(priority)
        req = build.submit_request(name, text, key, version, rank)
        resp = await self._call("scheduler", "SubmitTask", req, write=True, retry=True)
        sub = convert.submission_from_pb(resp)
        return TaskHandle(sub.task_id, sub.created, sub.event_id, name, model, self)

    async def submit_many(self, tasks: Iterable[Mapping[str, Any]]) -> list[Submission]:
        """Submit many tasks in one call (at most 1000): one write, one fsync and one
        replication wait on the primary for all of them. Each item is a mapping with
        `workflow` and optionally `input`, `idempotency_key`, `version` and `priority`;
        answers come in the same order. All or nothing: an invalid item refuses the
        batch."""
        reqs = []
        for i, t in enumerate(tasks):
            key = t.get("idempotency_key") or f"client-{uuid.uuid4()}"
            text = build.json_text(t.get("input"), f"tasks[{i}].input")
            rank = build.priority_value(t.get("priority"), f"tasks[{i}].priority")
            reqs.append(build.submit_request(t["workflow"], text, key, t.get("version", 0), rank))
        req = build.submit_many_request(reqs)
        resp = await self._call("scheduler", "SubmitTasks", req, write=True, retry=True)
        return [convert.submission_from_pb(m) for m in resp.tasks]

    async def submit_shell(self, dag: Any, *, idempotency_key: str | None = None) -> Submission:
        key = idempotency_key or f"client-{uuid.uuid4()}"
        req = build.submit_shell_request(build.json_text(dag, "dag"), key)
        resp = await self._call("scheduler", "SubmitShell", req, write=True, retry=True)
        return convert.submission_from_pb(resp)

    # `operator` is a display name kept beside the authenticated principal (the node
    # records who the credential proves; it never takes a typed name instead).
    async def retry_step(self, task_id: str, step: str, *, reason: str, operator: str = "") -> int:
        """Run a failed step again with fresh retry budgets; `step=""`: every step failed
        for good, which resumes a PAUSED task. The audit event's id."""
        req = build.step_action_request(task_id, step, operator, reason)
        resp = await self._call("scheduler", "RetryStep", req, write=True, retry=False)
        return int(resp.event_id)

    async def skip_step(self, task_id: str, step: str, *, reason: str, operator: str = "") -> int:
        req = build.step_action_request(task_id, step, operator, reason)
        resp = await self._call("scheduler", "SkipStep", req, write=True, retry=False)
        return int(resp.event_id)

    async def cancel(self, task_id: str, *, reason: str, operator: str = "") -> int:
        req = build.cancel_request(task_id, operator, reason)
        resp = await self._call("scheduler", "CancelTask", req, write=True, retry=False)
        return int(resp.event_id)

    async def redact(self, task_id: str, *, reason: str, operator: str = "") -> int:
        """Remove a finished task's input and outputs (the operator role; who acted is
        the authenticated principal, `operator` a name shown beside it): the
        TASK_REDACTED event's id. Every node then shows them as {"$redacted": id}."""
        req = build.redact_request(task_id, operator, reason)
        resp = await self._call("scheduler", "RedactTask", req, write=True, retry=False)
        return int(resp.event_id)

    async def hold(self, task_id: str, *, reason: str) -> int:
        """Put a legal hold on a task: retention never purges it until it is released
        (docs/retention.md). Operator role; the event records your principal. Its id."""
        req = build.hold_request(task_id, reason)
        resp = await self._call("scheduler", "HoldTask", req, write=True, retry=False)
        return int(resp.event_id)

    async def release(self, task_id: str, *, reason: str = "") -> int:
        """Release a task's legal hold: retention may purge it again. The event's id."""
        req = build.hold_request(task_id, reason)
        resp = await self._call("scheduler", "ReleaseTask", req, write=True, retry=False)
        return int(resp.event_id)

    async def send_event(
        self, key: str, payload: Any = None, *, idempotency_key: str | None = None
    ) -> SentEvent:
        """Record an event for the durable tasks waiting on `key` (docs/durable.md). The
        same idempotency key records it once (one is generated when you give none, so
        that the retry on UNAVAILABLE is safe); reused with another `key` or `payload`
        it raises AlreadyExistsError, naming the key and the event it names."""
        idem = idempotency_key or f"client-{uuid.uuid4()}"
        req = build.send_event_request(key, build.json_text(payload, "payload"), idem)
        resp = await self._call("scheduler", "SendEvent", req, write=True, retry=True)
        return convert.sent_event_from_pb(resp)

    # ----------------------------------------------------------- schedules

    # Not retried on UNAVAILABLE (a write that may have been made: a create would come
    # back ALREADY_EXISTS, a trigger fire twice); a standby's redirect is followed.
    async def create_schedule(
        self,
        schedule_id: str,
        workflow: str,
        input: Any = None,
        *,
        cron: str | None = None,
        every: Duration | None = None,
        at: Instant | None = None,
        tz: str | None = None,
        start: Instant | None = None,
        end: Instant | None = None,
        jitter: Duration | None = None,
        catchup_window: Duration | None = None,
        overlap: str | None = None,
        nonexistent: str | None = None,
        ambiguous: str | None = None,
        note: str = "",
    ) -> ScheduleView:
        """A schedule that submits `workflow` with `input` at each of its times: exactly
        one of `cron` ("0 3 * * *", "@daily"), `every` (elapsed time, "15m") or `at`
        (once). `tz` is the IANA zone a cron and a naive `at` are read in (UTC by
        default); `start` and `end` bound the times (both included); `jitter` delays
        each by up to that much, the same on every node; an occurrence later than
        `catchup_window` (a day by default) is recorded missed; `overlap` (skip,
        buffer-one, buffer-all, cancel-other, allow-all) says what an occurrence does
        while the previous one still runs; `nonexistent` (next, skip) and `ambiguous`
        (first, last, both) are the DST rules. A bad field raises InvalidArgumentError
        naming it and why; a taken id AlreadyExistsError. Needs role operator."""
        spec = build.schedule_spec(
            {
                "cron": cron,
                "every": every,
                "at": at,
                "tz": tz,
                "start": start,
                "end": end,
                "jitter": jitter,
                "catchup_window": catchup_window,
                "overlap": overlap,
                "nonexistent": nonexistent,
                "ambiguous": ambiguous,
            }
        )
        text = build.json_text(input, "input")
        req = build.create_schedule_request(schedule_id, workflow, spec, text, note)
        resp = await self._call("scheduler", "CreateSchedule", req, write=True, retry=False)
        return convert.schedule_from_pb(resp)

    async def update_schedule(
        self,
        schedule_id: str,
        *,
        workflow: str | None = None,
        input: Any = KEEP,
        note: str | None = None,
        cron: str | None = None,
        every: Duration | None = None,
        at: Instant | None = None,
        tz: str | None = None,
        start: Instant | None = None,
        end: Instant | None = None,
        jitter: Duration | None = None,
        catchup_window: Duration | None = None,
        overlap: str | None = None,
        nonexistent: str | None = None,
        ambiguous: str | None = None,
    ) -> ScheduleView:
        """Change what is given, keep the rest: a `cron`, `every` or `at` replaces the
        schedule's; any other spec field replaces that field, and "" puts it back to
        its default (`start=""` removes the bound). `input=None` sets a null input."""
        spec = build.schedule_spec(
            {
                "cron": cron,
                "every": every,
                "at": at,
                "tz": tz,
                "start": start,
                "end": end,
                "jitter": jitter,
                "catchup_window": catchup_window,
                "overlap": overlap,
                "nonexistent": nonexistent,
                "ambiguous": ambiguous,
            }
        )
        text = None if input is KEEP else build.json_text(input, "input")
        req = build.update_schedule_request(schedule_id, workflow or "", spec, text, note)
        resp = await self._call("scheduler", "UpdateSchedule", req, write=True, retry=False)
        return convert.schedule_from_pb(resp)

    async def pause_schedule(self, schedule_id: str, *, note: str = "") -> ScheduleView:
        """Its times are recorded skipped (with the reason) until it is unpaused."""
        req = pb.PauseScheduleRequest(schedule_id=schedule_id, note=note)
        resp = await self._call("scheduler", "PauseSchedule", req, write=True, retry=False)
        return convert.schedule_from_pb(resp)

    async def unpause_schedule(self, schedule_id: str, *, note: str = "") -> ScheduleView:
        req = pb.UnpauseScheduleRequest(schedule_id=schedule_id, note=note)
        resp = await self._call("scheduler", "UnpauseSchedule", req, write=True, retry=False)
        return convert.schedule_from_pb(resp)

    async def trigger_schedule(self, schedule_id: str) -> str:
        """Fire it once now, beside its own times: the task id."""
        req = pb.TriggerScheduleRequest(schedule_id=schedule_id)
        resp = await self._call("scheduler", "TriggerSchedule", req, write=True, retry=False)
        return str(resp.task_id)

    async def backfill_schedule(
        self,
        schedule_id: str,
        start: datetime | str,
        end: datetime | str,
        *,
        overlap: str = "allow-all",
    ) -> BackfillStarted:
        """Fire its nominal times in [start, end] (past, with a UTC offset) that have
        not fired, 20 a second under `overlap` (allow-all or buffer-all): the same
        range twice fires nothing new. It runs on after the answer (and after a
        failover); the schedule's `backfills` lists it until it ends."""
        req = build.backfill_request(schedule_id, start, end, overlap)
        resp = await self._call("scheduler", "BackfillSchedule", req, write=True, retry=False)
        return BackfillStarted(int(resp.backfill_id), int(resp.times))

    async def delete_schedule(self, schedule_id: str) -> None:
        """It fires no more; the tasks it submitted stay."""
        req = pb.DeleteScheduleRequest(schedule_id=schedule_id)
        await self._call("scheduler", "DeleteSchedule", req, write=True, retry=False)

    async def list_schedules(self, *, page_size: int = 100, page_token: str = "") -> SchedulePage:
        """Schedules by id, each with its next time and its last occurrence; go on with
        `next_page_token` while it is set."""
        req = pb.ListSchedulesRequest(page_size=page_size, page_token=page_token)
        resp = await self._call("scheduler", "ListSchedules", req, write=False, retry=True)
        return convert.schedule_page_from_pb(resp)

    async def describe_schedule(
        self,
        schedule_id: str,
        *,
        page_size: int = 100,
        page_token: str = "",
        newest_first: bool = False,
        next_count: int = 5,
    ) -> ScheduleDescription:
        """A schedule, its next `next_count` times, and a page of its occurrences: one
        per nominal time since it was created, oldest first (`newest_first`: the
        latest first). NotFoundError for an unknown id."""
        req = pb.DescribeScheduleRequest(
            schedule_id=schedule_id,
            page_size=page_size,
            page_token=page_token,
            newest_first=newest_first,
            next_count=next_count,
        )
        resp = await self._call("scheduler", "DescribeSchedule", req, write=False, retry=True)
        return convert.schedule_description_from_pb(resp)

    # -------------------------------------------------------- flow control

    async def set_limit(
        self,
        limit_id: str | None = None,
        *,
        max: int | None = None,
        rate: str | tuple[int, Duration] | None = None,
        burst: int | None = None,
        weights: Mapping[str, float] | None = None,
        reset: bool = False,
        reason: str = "",
    ) -> LimitChange:
        """Change a limit the loaded workflows declare, at runtime (docs/flow-control.md):
        a concurrency limit's `max`; a rate's `rate` ("10/1s", or (10, "1s")) and
        `burst`; `reset=True` puts it back to its declaration. `weights` ({"acme": 3})
        sets fairness values' shares (with or without a limit id). Recorded as an event
        with your principal and `reason`; in force on the primary once applied.
        NotFoundError for an unknown id (naming the known ones); InvalidArgumentError
        naming a field that does not fit the limit. Needs role operator. Retried on
        UNAVAILABLE: the same change twice leaves the same limit (and two events)."""
        req = build.set_limit_request(
            limit_id,
            max=max,
            rate=rate,
            burst=burst,
            weights=weights,
            reset=reset,
            reason=reason,
        )
        resp = await self._call("scheduler", "SetLimit", req, write=True, retry=True)
        return convert.limit_change_from_pb(resp)

    async def limits(self, *, all_keys: bool = False) -> LimitsView:
        """Every limit: declared and effective, and per key value the tasks running and
        queued (the busiest 20 values of each; `all_keys`: every one), and the fairness
        weights. The primary answers (the queues are its engine's): a standby's
        redirect is followed."""
        req = pb.ListLimitsRequest(all_keys=all_keys)
        resp = await self._call("scheduler", "ListLimits", req, write=False, retry=True)
        return convert.limits_from_pb(resp)

    # --------------------------------------------------------------- reads

    async def history(self) -> list[TermView]:
        """Every term the node's log holds, oldest first: who led it, from which event,
        since when (`apollo11 history`)."""
        resp = await self._call(
            "cluster", "GetHistory", pb.GetHistoryRequest(), write=False, retry=True
        )
        return [convert.term_from_pb(t) for t in resp.terms]

    async def switchover(self, to: str | None = None) -> dict[str, Any]:
        """A planned hand-over from the primary to standby `to` (None: the one furthest
        ahead): returns {"from", "to", "last_event_id", "sentence"} once the primary
        has resigned; the target leads about a settle period later."""
        resp = await self._call(
            "cluster", "Switchover", pb.SwitchoverRequest(to=to or ""), write=True, retry=False
        )
        return {
            "from": resp.from_node,
            "to": resp.to_node,
            "last_event_id": resp.last_event_id,
            "sentence": resp.sentence,
        }

    async def workflow(self, name: str, version: int | None = None) -> dict[str, Any]:
        """One loaded workflow version (the latest when `version` is None), as one item
        of `workflows()`, with its input's JSON Schema (None when untyped)."""
        req = pb.DescribeWorkflowRequest(name=name, version=version or 0)
        resp = await self._call("scheduler", "DescribeWorkflow", req, write=False, retry=True)
        return convert.workflow_from_pb(resp)

    async def workflows(self) -> list[dict[str, Any]]:
        """The workflows the node has loaded (every node loads the same modules): each
        version, its steps and their declarations (JSON-shaped dicts, as `apollo11
        workflows --json` prints)."""
        resp = await self._call(
            "scheduler", "ListWorkflows", pb.ListWorkflowsRequest(), write=False, retry=True
        )
        return [convert.workflow_from_pb(w) for w in resp.workflows]

    async def task(self, task_id: str, *, as_of: int = 0) -> TaskView:
        req = build.get_task_request(task_id, as_of)
        return convert.task_from_pb(
            await self._call("scheduler", "GetTask", req, write=False, retry=True)
        )

    async def tasks(
        self,
        *,
        state: str | None = None,
        workflow: str = "",
        schedule: str = "",
        page_size: int = 50,
        page_token: str = "",
        held: bool = False,
    ) -> Page:
        """A page of tasks, newest first: by state, workflow, or the schedule that fired
        them (NOT_FOUND for a schedule that does not exist); `held`: only those under a
        legal hold."""
        req = build.list_request(state, workflow, page_size, page_token, schedule, held)
        return convert.page_from_pb(
            await self._call("scheduler", "ListTasks", req, write=False, retry=True)
        )

    async def events(
        self, *, task_id: str = "", from_id: int = 0, to_id: int = 0, limit: int = 100
    ) -> tuple[list[EventView], int]:
        """A page of events and where the next page starts (0: no more)."""
        page = await self.events_page(task_id=task_id, from_id=from_id, to_id=to_id, limit=limit)
        return page.events, page.next_id

    async def events_page(
        self, *, task_id: str = "", from_id: int = 0, to_id: int = 0, limit: int = 100
    ) -> EventsPage:
        """A page of events, where the next page starts, and whether its older part was
        read from the archive's bucket or is gone (`EventsPage.note`)."""
        req = build.events_request(task_id, from_id, to_id, limit)
        resp = await self._call("scheduler", "GetEvents", req, write=False, retry=True)
        return EventsPage(
            [convert.event_from_pb(e) for e in resp.events],
            int(resp.next_event_id),
            int(resp.bucket_before),
            int(resp.gone_before),
        )

    async def tasks_with_events(self, task_ids: Sequence[str]) -> list[TaskRead]:
        """Up to 256 tasks, each with its events, in one call (GetTasks): what an
        export reads. In the order asked; at most 10,000 events in all, the rest of a
        task's from `TaskRead.page.next_id` on (`events_page`)."""
        resp = await self._call(
            "scheduler", "GetTasks", build.get_tasks_request(task_ids), write=False, retry=True
        )
        return [
            TaskRead(
                t.task_id,
                convert.task_from_pb(t.task) if t.found else None,
                EventsPage(
                    [convert.event_from_pb(e) for e in t.events],
                    int(t.next_event_id),
                    int(t.bucket_before),
                    int(t.gone_before),
                ),
            )
            for t in resp.tasks
        ]

    async def status(self) -> StatusView:
        """The cluster as the primary sees it (member lag and connections are the
        primary's knowledge); the first node that answers when no primary does."""
        first: StatusView | None = None
        deadline = time.monotonic() + self.connect_timeout_s
        eps = self.endpoints if self._reached else await self._reach_any(self.endpoints, deadline)
        for ep in eps:
            if not self._reached and await self._connects(ep, deadline) != _READY:
                continue  # the retrying call below says why, within the deadline
            try:
                resp = await self._stub("cluster", ep).GetStatus(
                    build.status_request(), timeout=self.timeout_s, metadata=self._metadata
                )
            except grpc.aio.AioRpcError:
                continue
            view = convert.status_from_pb(resp)
            if view.role == "primary":
                return view
            first = first or view
        if first is not None:
            return first
        resp = await self._call(
            "cluster", "GetStatus", build.status_request(), write=False, retry=True
        )
        return convert.status_from_pb(resp)

    async def watch(self, task_id: str) -> AsyncIterator[EventView]:
        """The task's events, past then live, until it finishes; resumes after a disconnect."""
        last = 0
        delay = self.backoff_s
        failures = 0
        eps = self._order(False)
        i = 0
        while True:
            stub = self._stub("scheduler", eps[i % len(eps)])
            try:
                watching = stub.WatchTask(build.watch_request(task_id), metadata=self._metadata)
                async for m in watching:
                    ev = convert.event_from_pb(m)
                    if ev.event_id > last:
                        last = ev.event_id
                        failures = 0
                        yield ev
                return
            except grpc.aio.AioRpcError as err:
                if err.code() is not grpc.StatusCode.UNAVAILABLE or failures >= self.retries:
                    raise translate(err) from None
                failures += 1
                i += 1
                await asyncio.sleep(delay)
                delay = min(self.max_backoff_s, delay * 2)

    # `timeout=` rather than asyncio.timeout around the call: the SyncClient has the
    # same signature, and temporalio's and Hatchet's clients take one too.
    async def wait(
        self,
        task_id: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
        check: bool = True,
    ) -> TaskView:
        """Wait for a task to finish and return it. Raises TaskFailed (FAILED,
        NONDETERMINISTIC or COMPENSATED) or TaskCancelled, each carrying the task, unless
        `check` is False; TimeoutError after `timeout` seconds (None: no limit). A PAUSED
        task has not finished: it waits for an operator's retry."""
        async with asyncio.timeout(timeout):
            async for _ in self.watch(task_id):
                pass
            task = await self.task(task_id)
        if check:
            if task.state == "CANCELLED":
                raise TaskCancelled(task)
            if task.state in ("FAILED", "NONDETERMINISTIC", "COMPENSATED"):
                raise TaskFailed(task)
        return task

    @overload
    async def result(self, task_id: str, *, timeout: float | None = None) -> Any: ...  # noqa: ASYNC109

    @overload
    async def result(
        self,
        task_id: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
        model: type[M],
    ) -> M: ...

    async def result(
        self,
        task_id: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
        model: type[M] | None = None,
    ) -> Any:
        """Wait for the task to succeed and return its result: a durable task's main's,
        or each step's by name. With `model` (the workflow's `result=`): the task's
        result as an instance of it, the durable main's or the DAG's one final step's
        (FailedPreconditionError when the DAG ends in several steps or an operator
        skipped its final one). Raises as `wait` does."""
        return task_result(await self.wait(task_id, timeout=timeout), model)


_shared: asyncio.AbstractEventLoop | None = None
_shared_lock = threading.Lock()


log = logging.getLogger("apollo11.client")

_READY, _FAILED, _SILENT = "ready", "failed", "silent"  # Client._connects
FAILOVER_POLL_S = 0.1  # how often a call no node takes is asked again (a failover)


def _target(workflow: Any, version: int) -> tuple[str, int, Any]:
    """What to submit: (the workflow's name, its version, its result model or None).
    A Workflow is read, not imported: the client loads no definition of its own."""
    if isinstance(workflow, str):
        return workflow, version, None
    name, own = getattr(workflow, "name", None), getattr(workflow, "version", None)
    if not isinstance(name, str) or not isinstance(own, int):
        hint = " (the function under @main: pass its DurableWorkflow)" if callable(workflow) else ""
        raise TypeError(
            f"submit takes a Workflow or a workflow's name, got {type(workflow).__name__} "
            f"{getattr(workflow, '__name__', workflow)!r}{hint}"
        )
    return name, version or own, getattr(workflow, "result", None)


def _jitter() -> float:
    """In [0, 1): spreads retries. `random` imported on the first retry only (1-2 ms
    of every command's start-up otherwise)."""
    import random

    return random.random()


def _traced(metadata: tuple[tuple[str, str], ...] | None) -> tuple[tuple[str, str], ...] | None:
    """The call's metadata with the W3C traceparent of the caller's current span, when
    the application uses OpenTelemetry (imported already: the client never loads it)."""
    if "opentelemetry.trace" not in sys.modules:
        return metadata
    from opentelemetry.propagate import inject

    carrier: dict[str, str] = {}
    inject(carrier)
    if not carrier:
        return metadata
    return (*(metadata or ()), *carrier.items())


def _background_loop() -> asyncio.AbstractEventLoop:
    """One event loop thread per process for every SyncClient: grpc.aio does not
    support several event loops in one process (calls on a second loop hang)."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="apollo11-client", daemon=True).start()
            _shared = loop
        return _shared


class SyncClient:
    """The same API, blocking: the async client on a background event loop."""

    def __init__(
        self,
        endpoints: str | Sequence[str] | None = None,
        *,
        timeout_s: float = 10.0,
        connect_timeout_s: float = 2.0,
        retries: int = 6,
        backoff_s: float = 0.2,
        max_backoff_s: float = 3.0,
        failover_s: float = 15.0,
        ca: str | Path | None = None,
        cert: str | Path | None = None,
        key: str | Path | None = None,
        token: str | None = None,
        tls: bool | None = None,
    ) -> None:
        """As Client."""
        self._loop = _background_loop()
        options: dict[str, Any] = {
            "timeout_s": timeout_s,
            "connect_timeout_s": connect_timeout_s,
            "retries": retries,
            "backoff_s": backoff_s,
            "max_backoff_s": max_backoff_s,
            "failover_s": failover_s,
            "ca": ca,
            "cert": cert,
            "key": key,
            "token": token,
            "tls": tls,
        }
        self._client = self._run(self._make(endpoints, options))

    async def _make(self, endpoints: str | Sequence[str] | None, options: dict[str, Any]) -> Client:
        return Client(endpoints, **options)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        # in the caller's context: its OpenTelemetry span (if any) travels with the call
        ctx = contextvars.copy_context()
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def start() -> None:
            task = self._loop.create_task(coro, context=ctx)

            def copy(t: asyncio.Task[T]) -> None:
                if t.cancelled():
                    done.cancel()
                elif (e := t.exception()) is not None:
                    done.set_exception(e)
                else:
                    done.set_result(t.result())

            task.add_done_callback(copy)

        self._loop.call_soon_threadsafe(start)
        return done.result()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._run(self._client.close())

    @overload
    def submit(
        self,
        workflow: Workflow[InputT, ResultT],
        input: InputT | None = None,
        *,
        idempotency_key: str | None = None,
        version: int = 0,
        priority: int | None = None,
    ) -> SyncTaskHandle[ResultT]: ...

    @overload
    def submit(
        self,
        workflow: str,
        input: Any = None,
        *,
        idempotency_key: str | None = None,
        version: int = 0,
        priority: int | None = None,
    ) -> SyncTaskHandle[Any]: ...

    def submit(
        self,
        workflow: Workflow[Any, Any] | str,
        input: Any = None,
        *,
        idempotency_key: str | None = None,
        version: int = 0,
        priority: int | None = None,
    ) -> SyncTaskHandle[Any]:
        """As Client.submit; the handle's calls block."""
        h = self._run(
            self._client.submit(
                workflow,
                input,
                idempotency_key=idempotency_key,
                version=version,
                priority=priority,
            )
        )
        return SyncTaskHandle(h.task_id, h.created, h.event_id, h.workflow, h.model, self)

    def submit_many(self, tasks: Iterable[Mapping[str, Any]]) -> list[Submission]:
        return self._run(self._client.submit_many(tasks))

    def submit_shell(self, dag: Any, *, idempotency_key: str | None = None) -> Submission:
        """As Client.submit_shell."""
        return self._run(self._client.submit_shell(dag, idempotency_key=idempotency_key))

    def task(self, task_id: str, *, as_of: int = 0) -> TaskView:
        return self._run(self._client.task(task_id, as_of=as_of))

    def tasks(
        self,
        *,
        state: str | None = None,
        workflow: str = "",
        schedule: str = "",
        page_size: int = 50,
        page_token: str = "",
        held: bool = False,
    ) -> Page:
        """As Client.tasks."""
        return self._run(
            self._client.tasks(
                state=state,
                workflow=workflow,
                schedule=schedule,
                page_size=page_size,
                page_token=page_token,
                held=held,
            )
        )

    def events(
        self, *, task_id: str = "", from_id: int = 0, to_id: int = 0, limit: int = 100
    ) -> tuple[list[EventView], int]:
        """As Client.events."""
        return self._run(
            self._client.events(task_id=task_id, from_id=from_id, to_id=to_id, limit=limit)
        )

    def events_page(
        self, *, task_id: str = "", from_id: int = 0, to_id: int = 0, limit: int = 100
    ) -> EventsPage:
        """As Client.events_page."""
        return self._run(
            self._client.events_page(task_id=task_id, from_id=from_id, to_id=to_id, limit=limit)
        )

    def tasks_with_events(self, task_ids: Sequence[str]) -> list[TaskRead]:
        """As Client.tasks_with_events."""
        return self._run(self._client.tasks_with_events(task_ids))

    def status(self) -> StatusView:
        return self._run(self._client.status())

    def retry_step(self, task_id: str, step: str, *, reason: str, operator: str = "") -> int:
        return self._run(self._client.retry_step(task_id, step, operator=operator, reason=reason))

    def skip_step(self, task_id: str, step: str, *, reason: str, operator: str = "") -> int:
        return self._run(self._client.skip_step(task_id, step, operator=operator, reason=reason))

    def cancel(self, task_id: str, *, reason: str, operator: str = "") -> int:
        return self._run(self._client.cancel(task_id, operator=operator, reason=reason))

    def redact(self, task_id: str, *, reason: str, operator: str = "") -> int:
        """As Client.redact."""
        return self._run(self._client.redact(task_id, operator=operator, reason=reason))

    def hold(self, task_id: str, *, reason: str) -> int:
        """As Client.hold."""
        return self._run(self._client.hold(task_id, reason=reason))

    def release(self, task_id: str, *, reason: str = "") -> int:
        """As Client.release."""
        return self._run(self._client.release(task_id, reason=reason))

    def send_event(
        self, key: str, payload: Any = None, *, idempotency_key: str | None = None
    ) -> SentEvent:
        """As Client.send_event."""
        return self._run(self._client.send_event(key, payload, idempotency_key=idempotency_key))

    def create_schedule(
        self,
        schedule_id: str,
        workflow: str,
        input: Any = None,
        *,
        cron: str | None = None,
        every: Duration | None = None,
        at: Instant | None = None,
        tz: str | None = None,
        start: Instant | None = None,
        end: Instant | None = None,
        jitter: Duration | None = None,
        catchup_window: Duration | None = None,
        overlap: str | None = None,
        nonexistent: str | None = None,
        ambiguous: str | None = None,
        note: str = "",
    ) -> ScheduleView:
        """As Client.create_schedule."""
        return self._run(
            self._client.create_schedule(
                schedule_id,
                workflow,
                input,
                cron=cron,
                every=every,
                at=at,
                tz=tz,
                start=start,
                end=end,
                jitter=jitter,
                catchup_window=catchup_window,
                overlap=overlap,
                nonexistent=nonexistent,
                ambiguous=ambiguous,
                note=note,
            )
        )

    def update_schedule(
        self,
        schedule_id: str,
        *,
        workflow: str | None = None,
        input: Any = KEEP,
        note: str | None = None,
        cron: str | None = None,
        every: Duration | None = None,
        at: Instant | None = None,
        tz: str | None = None,
        start: Instant | None = None,
        end: Instant | None = None,
        jitter: Duration | None = None,
        catchup_window: Duration | None = None,
        overlap: str | None = None,
        nonexistent: str | None = None,
        ambiguous: str | None = None,
    ) -> ScheduleView:
        """As Client.update_schedule."""
        return self._run(
            self._client.update_schedule(
                schedule_id,
                workflow=workflow,
                input=input,
                note=note,
                cron=cron,
                every=every,
                at=at,
                tz=tz,
                start=start,
                end=end,
                jitter=jitter,
                catchup_window=catchup_window,
                overlap=overlap,
                nonexistent=nonexistent,
                ambiguous=ambiguous,
            )
        )

    def pause_schedule(self, schedule_id: str, *, note: str = "") -> ScheduleView:
        """As Client.pause_schedule."""
        return self._run(self._client.pause_schedule(schedule_id, note=note))

    def unpause_schedule(self, schedule_id: str, *, note: str = "") -> ScheduleView:
        """As Client.unpause_schedule."""
        return self._run(self._client.unpause_schedule(schedule_id, note=note))

    def trigger_schedule(self, schedule_id: str) -> str:
        """As Client.trigger_schedule."""
        return self._run(self._client.trigger_schedule(schedule_id))

    def backfill_schedule(
        self,
        schedule_id: str,
        start: datetime | str,
        end: datetime | str,
        *,
        overlap: str = "allow-all",
    ) -> BackfillStarted:
        """As Client.backfill_schedule."""
        return self._run(self._client.backfill_schedule(schedule_id, start, end, overlap=overlap))

    def delete_schedule(self, schedule_id: str) -> None:
        """As Client.delete_schedule."""
        self._run(self._client.delete_schedule(schedule_id))

    def list_schedules(self, *, page_size: int = 100, page_token: str = "") -> SchedulePage:
        """As Client.list_schedules."""
        return self._run(self._client.list_schedules(page_size=page_size, page_token=page_token))

    def describe_schedule(
        self,
        schedule_id: str,
        *,
        page_size: int = 100,
        page_token: str = "",
        newest_first: bool = False,
        next_count: int = 5,
    ) -> ScheduleDescription:
        """As Client.describe_schedule."""
        return self._run(
            self._client.describe_schedule(
                schedule_id,
                page_size=page_size,
                page_token=page_token,
                newest_first=newest_first,
                next_count=next_count,
            )
        )

    def set_limit(
        self,
        limit_id: str | None = None,
        *,
        max: int | None = None,
        rate: str | tuple[int, Duration] | None = None,
        burst: int | None = None,
        weights: Mapping[str, float] | None = None,
        reset: bool = False,
        reason: str = "",
    ) -> LimitChange:
        """As Client.set_limit."""
        return self._run(
            self._client.set_limit(
                limit_id,
                max=max,
                rate=rate,
                burst=burst,
                weights=weights,
                reset=reset,
                reason=reason,
            )
        )

    def limits(self, *, all_keys: bool = False) -> LimitsView:
        """As Client.limits."""
        return self._run(self._client.limits(all_keys=all_keys))

    def history(self) -> list[TermView]:
        """As Client.history."""
        return self._run(self._client.history())

    def switchover(self, to: str | None = None) -> dict[str, Any]:
        """As Client.switchover."""
        return self._run(self._client.switchover(to))

    def workflow(self, name: str, version: int | None = None) -> dict[str, Any]:
        """As Client.workflow."""
        return self._run(self._client.workflow(name, version))

    def workflows(self) -> list[dict[str, Any]]:
        """As Client.workflows."""
        return self._run(self._client.workflows())

    def wait(self, task_id: str, *, timeout: float | None = None, check: bool = True) -> TaskView:
        """As Client.wait."""
        return self._run(self._client.wait(task_id, timeout=timeout, check=check))

    @overload
    def result(self, task_id: str, *, timeout: float | None = None) -> Any: ...

    @overload
    def result(self, task_id: str, *, timeout: float | None = None, model: type[M]) -> M: ...

    def result(
        self, task_id: str, *, timeout: float | None = None, model: type[M] | None = None
    ) -> Any:
        """As Client.result."""
        if model is None:
            return self._run(self._client.result(task_id, timeout=timeout))
        return self._run(self._client.result(task_id, timeout=timeout, model=model))

    def watch(self, task_id: str) -> Iterator[EventView]:
        """Blocking iterator over the task's events (past, then live)."""
        agen = self._client.watch(task_id)
        while True:
            try:
                yield self._run(_next(agen))
            except StopAsyncIteration:
                return


async def _next(agen: AsyncIterator[T]) -> T:
    return await agen.__anext__()
