"""The remote executor: attempts run on worker processes (`apollo11 worker`).

It implements the engine's Executor protocol (scheduler/engine/executor.py):

* `place` picks a worker (choose.py) and holds one of its slots before the
  STARTED is written, so the STARTED names the worker, and any primary that
  takes over knows where the attempt runs;
* `run` sends the assignment once the STARTED is committed and waits for the
  worker's result. The attempt's token (term and event id of the STARTED) is
  what the result must carry: a result for any other token is refused and
  counted, never applied;
* a worker whose stream breaks (its process died: the kernel closes its
  socket) loses its attempts at once; one that stays silent past the
  heartbeat timeout is cut off and loses them too (`Lost`);
* `abandon` (a timeout, a cancel) tells the worker to cancel the attempt, and
  `settle` waits for its acknowledgement (or for the worker to be gone) before
  the step may run again: no retry beside an attempt that still runs;
* `adopt`: after a failover, the new primary waits for the attempt's worker
  to reconnect and report it, running (then its result) or finished (its
  result, kept by the worker until acknowledged); if it does not come back
  within the heartbeat timeout, the attempt is lost as usual. A worker's
  result is acknowledged once its outcome is recorded (`release`), so a
  primary dying in between costs no result: the worker sends it again.

Leadership lost (`stop`): every stream is closed with the new primary's
address, and nothing is failed: the attempts are the next primary's to adopt.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from apollo11.scheduler import metrics, tracing
from apollo11.scheduler.dispatch.choose import choose, free_for, why_none
from apollo11.scheduler.dispatch.conn import WorkerConn
from apollo11.scheduler.engine import (
    Attempt,
    AttemptToken,
    Failed,
    Key,
    Lost,
    Outcome,
    StoreJournal,
    Succeeded,
    failure,
)
from apollo11.scheduler.errors import ApolloError, LeaseLostError
from apollo11.scheduler.nodeview import WorkerStatus
from apollo11.scheduler.workflow import StepError
from apollo11.v1 import worker_pb2 as wpb

log = logging.getLogger(__name__)

DEFAULT_HEARTBEAT_INTERVAL_S = 2.0
DEFAULT_HEARTBEAT_TIMEOUT_S = 10.0

# Is `token` the current attempt of (task, step), and was it given to `worker`? The
# node answers from its state (the STARTED names the worker).
IsCurrent = Callable[[str, str, AttemptToken, str], bool]


@dataclass(eq=False, slots=True)
class _Inflight:
    """An attempt this node waits on: run here, or adopted from an earlier primary."""

    token: AttemptToken
    key: Key
    worker: str
    beat: Callable[[Any], None] | None
    confirmed: bool = False  # its worker holds it
    # adopt() waiting for the worker to report it (an Event per attempt cost more
    # than the rest of its bookkeeping, at thousands of attempts a second)
    reported: asyncio.Future[None] | None = None
    cancelling: bool = False
    # How it ended (None: not yet). Kept apart from the future the step's runner
    # awaits, so that cancelling the runner (a timeout, a cancel) leaves it unended
    # until the worker answers, without a shield around every await.
    outcome: Outcome | None = None
    waiter: asyncio.Future[Outcome] | None = None
    journal: StoreJournal | None = None  # a durable main's: what its worker records through

    def confirm(self) -> None:
        self.confirmed = True
        if self.reported is not None and not self.reported.done():
            self.reported.set_result(None)

    @property
    def ended(self) -> bool:
        return self.outcome is not None

    def end(self, outcome: Outcome) -> None:
        if self.outcome is None:
            self.outcome = outcome
            if self.waiter is not None and not self.waiter.done():
                self.waiter.set_result(outcome)


@dataclass(frozen=True, slots=True)
class _Reported:
    """An attempt a worker reported (running, or finished) that nothing waits on yet."""

    worker: str
    outcome: Outcome | None


class RefusedError(Exception):
    """A worker's registration cannot be taken (the message says why)."""


class RemoteExecutor:
    def __init__(
        self,
        *,
        node_id: str,
        heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S,
        heartbeat_timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S,
    ) -> None:
        self.node_id = node_id
        self.heartbeat_interval_s = heartbeat_interval_s
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.workers: dict[str, WorkerConn] = {}
        self.term = 0
        self.accepting = False
        self._is_current: IsCurrent = lambda task_id, step, token, worker: False
        # by token; looked up by a plain (term, event id) too, equal to it as a key
        self._inflight: dict[tuple[int, int], _Inflight] = {}
        self._reported: dict[AttemptToken, _Reported] = {}
        self._keys: dict[Key, AttemptToken] = {}
        self._held: dict[Key, str] = {}  # slot holder of each placed/running step
        self._settling: dict[Key, asyncio.Future[None]] = {}
        self._acks: dict[Key, tuple[str, AttemptToken]] = {}  # acknowledged at release
        self._notify: list[Callable[[], None]] = []
        self._watchdog: asyncio.Task[None] | None = None
        self._journaling: set[asyncio.Task[None]] = set()  # journal requests being answered

    # ------------------------------------------------------------ leadership

    def start(self, term: int, is_current: IsCurrent) -> None:
        """This node became primary at `term`: take workers."""
        self.term = term
        self._is_current = is_current
        self.accepting = True
        if self._watchdog is None:
            self._watchdog = asyncio.create_task(self._watch(), name="apollo11-workers-watchdog")

    async def stop(self, why: str) -> None:
        """Leadership lost: close every stream (workers go to the next primary) and
        forget every attempt without failing it: the next primary adopts them."""
        self.accepting = False
        for conn in list(self.workers.values()):
            conn.close(why)
        self.workers.clear()
        for inflight in self._inflight.values():
            if inflight.waiter is not None:
                inflight.waiter.cancel()
        for fut in self._settling.values():
            if not fut.done():
                fut.set_result(None)
        for t in self._journaling:
            t.cancel()
        self._inflight.clear()
        self._reported.clear()
        self._keys.clear()
        self._held.clear()
        self._settling.clear()
        self._acks.clear()
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
            self._watchdog = None

    # ------------------------------------------------------- the executor seam

    def place(
        self, task_id: str, step: str, workflow: str, version: int, labels: Mapping[str, str]
    ) -> str | None:
        name = choose(self._offers(), workflow, version, labels)
        if name is None:
            return None
        key = (task_id, step)
        self.workers[name].held.add(key)
        self._held[key] = name
        return name

    def unplaced(self, workflow: str, version: int, labels: Mapping[str, str]) -> str | None:
        want = (workflow, version)
        for c in self.workers.values():  # the busy case, without building offers
            if want in c.workflows and (
                not labels or all(c.labels.get(k) == v for k, v in labels.items())
            ):
                return None
        return why_none(self._offers(), workflow, version, labels)

    def free_slots(self) -> int:
        n = 0
        for c in self.workers.values():  # asked at every start: no generator, no property
            free = c.slots - len(c.held)
            if free > 0:
                n += free
        return n

    def free_for(self, workflow: str, version: int, labels: Mapping[str, str]) -> int:
        return free_for(self._offers(), workflow, version, labels)

    def watch_capacity(self, notify: Callable[[], None]) -> None:
        self._notify = [notify]  # one engine at a time (a node makes a new one per store)

    def release(self, task_id: str, step: str) -> None:
        key = (task_id, step)
        name = self._held.pop(key, None)
        if name is not None and (conn := self.workers.get(name)) is not None:
            conn.held.discard(key)
        ack = self._acks.pop(key, None)
        if ack is not None and (conn := self.workers.get(ack[0])) is not None:
            conn.ack(ack[1], True)  # its outcome is recorded: the worker may forget it
        token = self._keys.pop(key, None)
        if token is not None:
            self._inflight.pop(token, None)
        self._settling.pop(key, None)

    def run(self, attempt: Attempt) -> Awaitable[Outcome]:
        if tracing.on():
            # sent once awaited, inside the attempt's span: its worker's trace parent
            return self._run_in_span(attempt)
        return self._start(attempt)

    async def _run_in_span(self, attempt: Attempt) -> Outcome:
        started = self._start(attempt)
        del attempt
        return await started

    def _start(self, attempt: Attempt) -> asyncio.Future[Outcome]:
        """Send the attempt now: what the runner awaits is the waiter itself, two
        coroutines fewer an attempt, at thousands a second (docs/benchmarks.md). The
        attempt's context is not kept while its worker runs it: a few objects more for
        the collector to scan."""
        try:
            sent = self._send(attempt)
        except Exception as e:  # this executor's own fault fails the attempt, as a step's
            return _ended(failure(e))
        del attempt
        if type(sent) is Lost:
            return _ended(sent)
        assert type(sent) is _Inflight
        return self._waiter(sent)

    def _send(self, attempt: Attempt) -> _Inflight | Lost:
        """Queue the attempt's assignment for its worker: what to wait on."""
        ctx = attempt.ctx
        key = (ctx.task_id, ctx.step)
        name = self._held.get(key, ctx.worker)
        conn = self.workers.get(name)
        if conn is None or conn.closed is not None:
            self._count_lost("closed")
            return Lost(f"worker {name} went away before the attempt was sent to it")
        token = attempt.token
        inflight = _Inflight(token, key, name, ctx.beat, True, journal=_journal_of(ctx.journal))
        self._inflight[token] = inflight
        self._keys[key] = token
        input_json = b"" if ctx.input is None else orjson.dumps(ctx.input)
        results = ctx.results
        results_json = orjson.dumps(results if type(results) is dict else dict(results))
        journal = inflight.journal
        if journal is None and ctx.last_heartbeat is None and not tracing.on():
            # the everyday attempt: in columns to a worker that reads them
            conn.assign_plain(
                token,
                len(input_json) + len(results_json),
                self.node_id,
                ctx.task_id,
                ctx.step,
                ctx.attempt,
                ctx.workflow,
                ctx.version,
                input_json,
                results_json,
                attempt.timeout_s,
            )
            return inflight
        beat_json = b"" if ctx.last_heartbeat is None else orjson.dumps(ctx.last_heartbeat)
        durable = _durable_pb(journal)
        conn.assign(
            token,
            len(input_json)
            + len(results_json)
            + len(beat_json)
            + (0 if durable is None else durable.ByteSize()),
            durable=durable,
            traceparent=tracing.traceparent_now() if tracing.on() else "",
            task_id=ctx.task_id,
            step=ctx.step,
            attempt=ctx.attempt,
            workflow=ctx.workflow,
            version=ctx.version,
            input_json=input_json,
            results_json=results_json,
            timeout_s=attempt.timeout_s,
            last_heartbeat_json=beat_json,
            node_id=self.node_id,
        )
        return inflight

    async def adopt(self, attempt: Attempt, where: str) -> Outcome:
        ctx = attempt.ctx
        key = (ctx.task_id, ctx.step)
        token = attempt.token
        self._held[key] = where
        if (conn := self.workers.get(where)) is not None:
            conn.held.add(key)
        self._keys[key] = token
        inflight = _Inflight(token, key, where, ctx.beat)
        inflight.journal = _journal_of(ctx.journal)
        self._inflight[token] = inflight
        reported = self._reported.pop(token, None)
        if reported is not None:
            inflight.worker = reported.worker
            inflight.confirm()
            if reported.outcome is not None:
                self._acks[key] = (reported.worker, token)
                inflight.end(reported.outcome)
        if not inflight.confirmed:
            # Wait for the worker to come back and report it, for as long as a
            # silent worker would be given.
            inflight.reported = asyncio.get_running_loop().create_future()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.heartbeat_timeout_s):
                    await inflight.reported
            if not inflight.confirmed:
                self._inflight.pop(token, None)
                self._count_lost("not back")
                return Lost(
                    f"worker {where} did not report the attempt within "
                    f"{self.heartbeat_timeout_s:g}s of this node taking over"
                )
        return await self._waiter(inflight)

    def _waiter(self, inflight: _Inflight) -> asyncio.Future[Outcome]:
        """What the step's runner awaits: done when the attempt ends. Cancelling it (the
        runner cancelled: a timeout, a cancel, leadership lost) leaves the attempt to
        `abandon` or to the next primary; `release`, which follows in every case,
        forgets it here."""
        if inflight.outcome is not None:
            return _ended(inflight.outcome)
        fut = inflight.waiter = asyncio.get_running_loop().create_future()
        return fut

    def abandon(self, task_id: str, step: str, reason: str) -> None:
        key = (task_id, step)
        token = self._keys.get(key)
        inflight = None if token is None else self._inflight.get(token)
        if inflight is None or inflight.cancelling:
            return
        if inflight.ended:
            # Its result arrived, but the timeout (or cancel) got there first: the log
            # records that, so the worker is told its result was not taken.
            ack = self._acks.pop(key, None)
            if ack is not None and (conn := self.workers.get(ack[0])) is not None:
                conn.ack(ack[1], False, f"not taken: {reason}")
            return
        inflight.cancelling = True
        self._settling[key] = asyncio.get_running_loop().create_future()
        conn = self.workers.get(inflight.worker)
        if conn is None:
            self._settled(key)
            return
        conn.cancel(inflight.token, reason)

    def settle(self, task_id: str, step: str) -> Awaitable[None] | None:
        fut = self._settling.get((task_id, step))
        if fut is None or fut.done():
            return None
        log.info("step %s/%s: waiting for its worker to cancel the attempt", task_id, step)
        return fut

    def _settled(self, key: Key) -> None:
        fut = self._settling.get(key)
        if fut is not None and not fut.done():
            fut.set_result(None)
        token = self._keys.get(key)
        if token is not None:
            self._inflight.pop(token, None)

    # ----------------------------------------------------------- the streams

    def connect(self, conn: WorkerConn, running: list[wpb.RunningAttempt]) -> list[AttemptToken]:
        """A worker registered; `running`: what it still runs. Returns the tokens it
        should cancel (not a current attempt any more)."""
        if not self.accepting:
            raise RefusedError("this node is not the primary")
        old = self.workers.get(conn.name)
        unsent: set[AttemptToken] = set()
        if old is not None and old.closed is None:
            if old.instance != conn.instance:
                raise RefusedError(
                    f"a worker named {conn.name!r} is already connected (from "
                    f"{old.address}); names must be unique"
                )
            # The same process on a new stream (its old one broke on its side first):
            # its attempts and what was queued for it move over; nothing is lost.
            unsent = conn.take_over(old)
            old.close("replaced by its own new connection")
        self.workers[conn.name] = conn
        stale: list[AttemptToken] = []
        reported: set[AttemptToken] = set()
        for r in running:
            token = AttemptToken(r.token.term, r.token.event_id)
            key = (r.task_id, r.step)
            reported.add(token)
            inflight = self._inflight.get(token)
            if inflight is not None and inflight.key == key and inflight.worker == conn.name:
                if inflight.ended:
                    stale.append(token)  # lost, or ended, here already: it must stop
                    continue
                inflight.confirm()
                conn.held.add(key)
                self._held[key] = conn.name
                if inflight.cancelling:
                    conn.cancel(token, "cancelled")  # the cancel may have gone with the stream
            elif inflight is None and self._is_current(r.task_id, r.step, token, conn.name):
                self._reported[token] = _Reported(conn.name, None)
                conn.held.add(key)
            else:
                stale.append(token)  # not this worker's current attempt: stop it
                continue
            if r.heartbeat_json:
                self._beat(conn, token, r.heartbeat_json)
        if old is not None:
            # What was sent on the old stream and is not reported never reached it.
            for inflight in list(self._inflight.values()):
                if (
                    inflight.worker == conn.name
                    and inflight.confirmed
                    and inflight.token not in reported
                    and inflight.token not in unsent
                ):
                    if inflight.cancelling:
                        self._settled(inflight.key)
                    elif not inflight.ended:
                        inflight.end(Lost(f"worker {conn.name} reconnected without it"))
                        self._count_lost("closed")
        log.info(
            "worker %s connected from %s: %d slots, %d workflow(s), %d attempt(s) running",
            conn.name,
            conn.address,
            conn.slots,
            len(conn.workflows),
            len(running),
        )
        for notify in self._notify:
            notify()
        return stale

    def heartbeat(self, conn: WorkerConn, beat: wpb.WorkerHeartbeat) -> None:
        conn.last_seen = time.monotonic()
        for r in beat.running:
            if r.heartbeat_json:
                self._beat(conn, AttemptToken(r.token.term, r.token.event_id), r.heartbeat_json)

    def _beat(self, conn: WorkerConn, token: AttemptToken, raw: bytes) -> None:
        inflight = self._inflight.get(token)
        # Only the worker an attempt was given to speaks for it: the token is no
        # secret (any reader sees it), and the details become its retry's input.
        if inflight is None or inflight.beat is None or inflight.worker != conn.name:
            return
        try:
            inflight.beat(orjson.loads(raw))
        except orjson.JSONDecodeError:
            log.warning("attempt %s: a heartbeat's details are not JSON; ignored", token)
        except ValueError as e:  # nested past json_max_depth: the last good ones stay
            log.warning("attempt %s: a heartbeat's details are refused, ignored: %s", token, e)

    def results(self, conn: WorkerConn, results: wpb.Results) -> None:
        conn.last_seen = time.monotonic()
        for r in results.results:
            self._result(conn, r)
        self._succeeded(conn, results)

    def _succeeded(self, conn: WorkerConn, res: wpb.Results) -> None:
        """Succeeded results in columns (Results.ok_*): the everyday case taken here,
        without a message each; anything else as a whole result (`_result`)."""
        columns = (
            res.ok_terms,
            res.ok_event_ids,
            res.ok_task_ids,
            res.ok_steps,
            res.ok_attempts,
            res.ok_results_json,
        )
        lengths = {len(c) for c in columns} | {len(res.ok_seconds)}
        if lengths == {0}:
            return  # none: the message carried whole results only
        if len(lengths) != 1:
            # A worker's fault, never skipped: its attempts are lost and run again.
            log.error("worker %s sent results whose columns differ in length", conn.name)
            why = "it sent results whose columns differ in length"
            if self.workers.get(conn.name) is conn:
                self._gone(conn, why)
            else:  # a stream its process replaced: its attempts are the new one's now
                conn.close(why)
            return
        name = conn.name
        inflights = self._inflight
        acks = self._acks
        for term, event_id, task_id, step, attempt, body in zip(*columns, strict=True):
            inflight = inflights.get((term, event_id))
            if (
                inflight is None
                or inflight.worker != name
                or inflight.cancelling
                or inflight.key != (task_id, step)
            ):
                r = wpb.StepResult(task_id=task_id, step=step, attempt=attempt, result_json=body)
                r.token.term, r.token.event_id = term, event_id
                self._result(conn, r)
                continue
            if inflight.outcome is None:
                inflight.confirm()
                inflight.end(_success(body))
                acks[inflight.key] = (name, inflight.token)

    def _result(self, conn: WorkerConn, r: wpb.StepResult) -> None:
        t = r.token  # each read of a message field builds a new Python object: once
        term, event_id = t.term, t.event_id
        kind = r.WhichOneof("outcome")
        # a plain tuple finds it (equal to its AttemptToken as a key), one per result
        inflight = self._inflight.get((term, event_id))
        if inflight is not None and inflight.worker != conn.name:
            # Only the worker an attempt was given to speaks for it.
            self._refuse(conn, r, f"the attempt was given to worker {inflight.worker}")
            return
        # a cancel's answer is matched by its token alone
        if inflight is not None and (kind == "cancelled" or inflight.key == (r.task_id, r.step)):
            self._matched(conn, inflight, r, kind)
            return
        token = AttemptToken(term, event_id)
        key = (r.task_id, r.step)
        if kind != "cancelled" and self._is_current(r.task_id, r.step, token, conn.name):
            # Finished while no primary was there to hear it: kept for adoption.
            self._reported[token] = _Reported(conn.name, _outcome(r, kind))
            conn.held.add(key)
            return
        if kind == "cancelled":
            conn.ack(token, True)
            return
        self._refuse(
            conn,
            r,
            "it is not the step's current attempt (retried, skipped, cancelled, or declared lost)",
        )

    def _matched(
        self, conn: WorkerConn, inflight: _Inflight, r: wpb.StepResult, kind: str | None
    ) -> None:
        """A worker's answer for an attempt this node waits on."""
        token, key = inflight.token, inflight.key
        if inflight.cancelling:
            # The cancel's answer (or a result that crossed it): nothing runs now.
            self._settled(key)
            conn.ack(token, kind == "cancelled", "" if kind == "cancelled" else "cancelled")
            if kind != "cancelled":
                self._refuse(conn, r, "its attempt was cancelled", ack=False)
            return
        if kind == "cancelled":  # cancelled by the worker itself (it is stopping)
            inflight.end(Lost(f"worker {conn.name} cancelled it"))
            self._acks[key] = (conn.name, token)
            return
        if not inflight.ended:
            inflight.confirm()
            inflight.end(_outcome(r, kind))
            self._acks[key] = (conn.name, token)

    def journal(self, conn: WorkerConn, req: wpb.JournalRequest) -> None:
        """A durable main on `conn` asks to record, or to resolve a wait: answered once
        done (a record, once committed), on a task of its own."""
        conn.last_seen = time.monotonic()
        task = asyncio.ensure_future(self._journal(conn, req))
        self._journaling.add(task)
        task.add_done_callback(self._journaling.discard)

    async def _journal(self, conn: WorkerConn, req: wpb.JournalRequest) -> None:
        token = AttemptToken(req.token.term, req.token.event_id)
        reply = wpb.JournalReply(id=req.id)
        inflight = self._inflight.get(token)
        j = inflight.journal if inflight is not None else None
        try:
            if inflight is None or j is None:
                if self._is_current(req.task_id, req.step, token, conn.name):
                    reply.retry = True  # this node is taking it over: adopt() is on its way
                else:
                    reply.error = (
                        "it is not the step's current attempt (retried, cancelled, or "
                        "declared lost)"
                    )
            elif inflight.worker != conn.name or inflight.key != (req.task_id, req.step):
                reply.error = f"the attempt was given to worker {inflight.worker}"
            elif inflight.cancelling or inflight.ended:
                reply.error = "the attempt was cancelled"
            elif req.WhichOneof("body") == "record":
                r = req.record
                renamed = await j.record_planned(
                    orjson.loads(r.checkpoints_json or b"[]"),
                    orjson.loads(r.wait_json) if r.wait_json else None,
                    orjson.loads(r.children_json or b"[]"),
                )
                if renamed:
                    reply.children_json = orjson.dumps(renamed)
            elif req.WhichOneof("body") == "resolve_wait_json":
                found = await j.resolve(orjson.loads(req.resolve_wait_json), j.now_ms())
                if found is not None:
                    reply.resolution_json = orjson.dumps(found)
            else:
                reply.error = "a journal request with nothing to do"
        except LeaseLostError:
            reply.retry = True  # the worker follows the next primary and asks it
        except (ApolloError, StepError, orjson.JSONDecodeError, TypeError, ValueError) as e:
            reply.error = str(e)
        if j is not None:
            reply.now_ms = j.now_ms()
        conn.reply(reply)

    def _refuse(self, conn: WorkerConn, r: wpb.StepResult, why: str, *, ack: bool = True) -> None:
        token = AttemptToken(r.token.term, r.token.event_id)
        metrics.REFUSED_RESULTS.inc()
        log.warning(
            "refused a late result from worker %s for %s/%s attempt %d (token %s): %s",
            conn.name,
            r.task_id,
            r.step,
            r.attempt,
            token,
            why,
        )
        if ack:
            conn.ack(token, False, why)

    def disconnect(self, conn: WorkerConn, how: str) -> None:
        """Its stream ended (`how`: why)."""
        if self.workers.get(conn.name) is conn:
            self._gone(conn, how)

    def _gone(self, conn: WorkerConn, how: str, *, counted: str = "closed") -> None:
        conn.close(how)
        if self.workers.get(conn.name) is conn:
            del self.workers[conn.name]
        lost = 0
        for inflight in list(self._inflight.values()):
            if inflight.worker != conn.name or not inflight.confirmed:
                continue
            if inflight.cancelling:
                self._settled(inflight.key)
            elif not inflight.ended:
                inflight.end(Lost(f"worker {conn.name}: {how}"))
                lost += 1
        for token, rep in list(self._reported.items()):
            if rep.worker == conn.name and rep.outcome is None:
                del self._reported[token]
        if lost:
            self._count_lost(counted, lost)
        log.warning("worker %s is gone (%s): %d attempt(s) lost", conn.name, how, lost)

    async def _watch(self) -> None:
        """Cut off workers silent for longer than the heartbeat timeout, and ping the
        streams this node has not written to for an interval (a worker takes a silent
        primary for a frozen one)."""
        period = min(0.5, self.heartbeat_timeout_s / 4, self.heartbeat_interval_s / 2)
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for conn in list(self.workers.values()):
                if now - conn.last_sent >= self.heartbeat_interval_s:
                    conn.ping()
                silent = now - conn.last_seen
                if silent > self.heartbeat_timeout_s:
                    self._gone(
                        conn,
                        f"silent for {silent:.1f}s (heartbeat timeout "
                        f"{self.heartbeat_timeout_s:g}s)",
                        counted="silent",
                    )

    # ----------------------------------------------------------------- views

    def statuses(self) -> tuple[WorkerStatus, ...]:
        """The connected workers, by name, for `apollo11 status` and `apollo11 workers`."""
        now, wall = time.monotonic(), time.time()
        running: dict[str, int] = {}
        for inflight in self._inflight.values():
            if inflight.confirmed:
                running[inflight.worker] = running.get(inflight.worker, 0) + 1
        return tuple(
            WorkerStatus(
                name=c.name,
                address=c.address,
                slots=c.slots,
                slots_used=len(c.held),
                workflows=tuple(f"{n} v{v}" for n, v in sorted(c.workflows)),
                labels=tuple(sorted(c.labels.items())),
                last_heartbeat_s_ago=round(now - c.last_seen, 3),
                attempts_running=running.get(c.name, 0),
                connected_s_ago=round(wall - c.connected_at, 3),
                version=c.version,
            )
            for c in sorted(self.workers.values(), key=lambda c: c.name)
        )

    def _offers(self) -> Iterable[WorkerConn]:
        # A closed connection leaves `workers` as it closes (`_gone`, `connect`, `stop`):
        # the connections themselves, with no filter, at every placement.
        return self.workers.values()

    def _count_lost(self, how: str, n: int = 1) -> None:
        metrics.WORKER_LOST_ATTEMPTS.labels(how).inc(n)


def _ended(outcome: Outcome) -> asyncio.Future[Outcome]:
    fut = asyncio.get_running_loop().create_future()
    fut.set_result(outcome)
    return fut


def _journal_of(journal: object) -> StoreJournal | None:
    return journal if isinstance(journal, StoreJournal) else None


def _durable_pb(j: StoreJournal | None) -> wpb.DurableJournal | None:
    """What a durable main's attempt replays from, for its worker."""
    if j is None:
        return None
    wait = j.wait
    return wpb.DurableJournal(
        checkpoints_json=orjson.dumps(list(j.checkpoints)),
        wait_json=b"" if wait is None else orjson.dumps(wait),
        first_event_id=j.first_event_id,
        now_ms=j.now_ms(),
    )


def _success(body: bytes) -> Outcome:
    try:
        return Succeeded(orjson.loads(body) if body else None)
    except orjson.JSONDecodeError as e:
        return Failed("InvalidResult", f"the worker sent a result that is not JSON: {e}", {})


def _outcome(r: wpb.StepResult, kind: str | None) -> Outcome:
    """`kind`: r.WhichOneof("outcome"), which the caller has read already."""
    if kind == "result_json":
        return _success(r.result_json)
    if kind == "failure":
        f = r.failure
        details: dict[str, Any] = {}
        if f.details_json:
            try:
                loaded = orjson.loads(f.details_json)
                details = loaded if isinstance(loaded, dict) else {"details": loaded}
            except orjson.JSONDecodeError:
                details = {}
        # mro: empty from a worker older than it (its cause is then its short name)
        return Failed(
            f.error_type or "Error", f.message, details, declared=f.declared, mro=tuple(f.mro)
        )
    return Failed("InvalidResult", "the worker sent a result without an outcome", {})
