"""Acting on a step: run one attempt under its timeout, record its outcome, compensate.

Every transition is written before it is acted on: an attempt runs only once
its STARTED is committed (a new primary that did not know it started could
run it a second time), a compensation only once its COMPENSATING is; the
outcome is recorded after. What to run is decided elsewhere (decide.py,
retry.py); the code runs in an executor (executor.py), which reports how it
ended as data. This module turns that into events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson

from apollo11.scheduler import jsondepth, logfmt, metrics, tracing
from apollo11.scheduler.cause import Cause, of_class
from apollo11.scheduler.clock import Clock
from apollo11.scheduler.engine.deadlines import Deadlines
from apollo11.scheduler.engine.decide import FailLost, own_exhaustion_moot, starts_nothing
from apollo11.scheduler.engine.executor import (
    Attempt,
    AttemptToken,
    Executor,
    Failed,
    Lost,
    NotBegun,
    Outcome,
    Succeeded,
    failure,
)
from apollo11.scheduler.engine.journal import Resolve, StoreJournal
from apollo11.scheduler.engine.retrypacer import RetryPacer, pacing_key
from apollo11.scheduler.errors import ApolloError, InvalidEventError
from apollo11.scheduler.log import EventType
from apollo11.scheduler.retry import (
    compensation_delay,
    counts,
    final_after_loss,
    judge,
    paced_after_loss,
    paced_by,
    rule_label,
    says_final,
    then_after_loss,
)
from apollo11.scheduler.retrypace import Slot
from apollo11.scheduler.state import Store, TaskState
from apollo11.scheduler.workflow import AUTO, FencingToken, Retry, Step, StepContext

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (task_id, step)
ERROR_TEXT_MAX = 1024  # our own error strings are cut (visibly) to stay under the payload cap
AUTO_REFRESH_SAMPLES = 10  # an `auto` timeout follows new durations within this many
# kept when details are too big (the cause and the verdict: the next decision reads them)
SLIM_KEYS = (
    *("error", "final", "lost", "timeout", "compensate"),
    *("cause", "rule", "decision", "retry_in_s", "exhausted"),
)
_NO_BEAT = object()


def check_details(details: Any, limit: int) -> None:
    """Refuse heartbeat details nested past json_max_depth (`limit`) in the step that
    passed them, with a ValueError: they are written in the attempt's FAILED, and a
    value that deep would break every later snapshot of the node."""
    try:
        deep = jsondepth.deeper_than(orjson.dumps(details), limit)
    except TypeError:  # not JSON, or past orjson's own limit
        depth = jsondepth.value_depth(details)
        deep = depth if depth > limit else None  # not JSON: the FAILED keeps the rest
    if deep is not None:
        said = jsondepth.too_deep_value("ctx.heartbeat details", deep, limit)
        raise ValueError(f"{said}: report progress (a cursor, a count), not data")


def cut(text: str) -> str:
    return text if len(text) <= ERROR_TEXT_MAX else text[: ERROR_TEXT_MAX - 14] + " …(truncated)"


def failure_payload(outcome: Failed, cause: Cause | None = None) -> dict[str, Any]:
    """The FAILED payload of an attempt whose code raised (`cause`: its `outcome.cause`,
    when the caller has it already)."""
    record = (cause if cause is not None else outcome.cause).record()
    record["message"] = cut(record["message"])
    if outcome.declared:  # a StepError: its message, and the details it chose
        # but not `lost`: replay would count the failure as a loss, which uses no
        # attempts and was never final (retry.py: only the engine says an attempt was lost)
        details = {k: v for k, v in outcome.details.items() if k != "lost"}
        return {"error": cut(outcome.message) or "failed", **details, "cause": record}
    return {"error": cut(f"{outcome.error_type}: {outcome.message}"), "cause": record}


def lost_payload(action: FailLost) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "error": f"lost: attempt {action.attempt} stopped without an outcome (its node died "
        f"or lost the lease)",
        "lost": True,
        "final": action.final,
    }
    if action.compensate:
        payload["compensate"] = True
    if action.final and action.then != "fail":
        payload["exhausted"] = action.then
    return payload


class StepRunner:
    """Runs attempts and compensations for one engine, and records how they ended.

    What it needs from the engine is passed in: `committed(event_id)` waits for
    a commit (False: leadership was lost on the way), `lapsed(what)` reports a
    lease that lapsed before an attempt could begin, `ended()` frees the slot of
    an attempt once nothing of it is still executing.
    """

    def __init__(
        self,
        *,
        store: Store,
        executor: Executor,
        clock: Clock,
        node_id: str,
        default_timeout_s: float,
        lease_valid: Callable[[], bool],
        committed: Callable[[int], Awaitable[bool]],
        lapsed: Callable[[str], None],
        ended: Callable[[], None],
        compensator: Executor | None = None,
        resolve: Resolve | None = None,
        adopt_grace_s: float = 0.0,
        pacer: RetryPacer | None = None,
    ) -> None:
        self.store = store
        # the steps' retry budgets: outcomes counted here, each retry's slot judged here
        self.pacer = pacer if pacer is not None else RetryPacer(None)
        # An adopted attempt is given at least this long (the time a worker has to come
        # back after a failover): its timeout counts from its STARTED, so a failover
        # longer than what was left of it would fail it before its worker could report.
        self.adopt_grace_s = adopt_grace_s
        self._resolve = resolve  # a durable main's ctx.spawn: the child's workflow
        self.executor = executor
        # Compensations run where this node is (workers run attempts only).
        self.compensator = compensator or executor
        self.clock = clock
        self.node_id = node_id
        self.default_timeout_s = default_timeout_s
        self._lease_valid = lease_valid
        self._committed = committed
        self._lapsed = lapsed
        self._ended = ended
        # why a running attempt was given up on by us: the payload of its FAILED event
        self._cancel_why: dict[Key, dict[str, Any]] = {}
        self._deadlines = Deadlines()  # the running attempts' timeouts
        self._timeouts: dict[Key, tuple[int, float]] = {}  # (workflow, step) -> (samples, s)
        self._metric_children: dict[Key, tuple[Any, Any, Any, Any]] = {}
        self._cause_children: dict[tuple[str, str, str], Any] = {}  # rules are declared: bounded
        # the latest heartbeat details of each running attempt (written from a step's
        # thread too: one dict store, atomic under the GIL)
        self._beats: dict[Key, Any] = {}
        # the journals of the running attempts of durable mains (`journaled` steps)
        self._journals: dict[Key, StoreJournal] = {}

    # ------------------------------------------------------------ attempts

    async def run(
        self, task_id: str, name: str, spec: Step, attempt: int, started: asyncio.Future[bool]
    ) -> None:
        """Run attempt `attempt` once `started` (its STARTED committed) says it may."""
        key = (task_id, name)
        try:
            # The step's own future (engine.py's _StartGate): cancelling it spares
            # the steps started with it.
            if not await started:
                return
            task = self.store.state.tasks[task_id]
            if task.cancelled is not None or task.failed_final:
                # Cancelled (or failed for good) while STARTED was being committed: do
                # not run it; record that, so its compensation (if any) follows.
                stopped: dict[str, Any] = {
                    "error": "cancelled by operator" if task.cancelled else "task failed",
                    "final": True,
                }
                if spec.needs_compensation:
                    stopped["compensate"] = True
                await self.fail(task_id, name, attempt, stopped)
                return
            timeout = self.timeout_for(task.workflow, name, spec)
            # the attempt is the executor's alone (nothing here keeps it alive while it
            # runs: a remote executor lets it go once it is sent)
            call = self.executor.run(self._attempt(task, name, spec, attempt, timeout))
            await self._execute(key, task, spec, attempt, timeout, call)
        except ApolloError as e:
            log.error(
                "step %s/%s attempt %d: cannot record its outcome: %s", task_id, name, attempt, e
            )
        finally:
            await self._finish(key)

    async def adopt(self, task_id: str, name: str, spec: Step, attempt: int) -> None:
        """Take over attempt `attempt`, STARTED on a worker by an earlier primary (or by
        this node before it restarted): its outcome, when the worker reports it."""
        key = (task_id, name)
        try:
            task = self.store.state.tasks[task_id]
            step = task.steps[name]
            where = step.worker or ""
            timeout = self.timeout_for(task.workflow, name, spec)
            if step.started_ms is not None:  # what is left of it, by the log's clock
                timeout = max(0.0, timeout - (self.clock.now_ms() - step.started_ms) / 1000)
            # ...but never less than its worker's time to report: the worker stops an
            # attempt that overran its timeout itself, and reports that.
            timeout = max(timeout, self.adopt_grace_s)
            prepared = self._attempt(task, name, spec, attempt, timeout)
            log.info(
                "step %s/%s attempt %d: adopting it from worker %s", task_id, name, attempt, where
            )
            await self._execute(
                key, task, spec, attempt, timeout, self.executor.adopt(prepared, where)
            )
        except ApolloError as e:
            log.error(
                "step %s/%s attempt %d: cannot record its outcome: %s", task_id, name, attempt, e
            )
        finally:
            await self._finish(key)

    def _attempt(
        self, task: TaskState, name: str, spec: Step, attempt: int, timeout: float
    ) -> Attempt:
        step = task.steps[name]
        journal = None
        if spec.journaled:
            journal = self._journals[(task.task_id, name)] = self._journal(
                task.task_id, name, attempt
            )
        ctx = self.context(task, name, attempt, spec.after, journal)
        token = AttemptToken(step.started_term, step.started_event)
        return Attempt(spec.fn, ctx, self._lease_valid, token, timeout)

    def _journal(self, task_id: str, name: str, attempt: int) -> StoreJournal:
        """A durable main's window on the log, for one attempt (or its compensation)."""
        return StoreJournal(
            store=self.store,
            clock=self.clock,
            task_id=task_id,
            step=name,
            attempt=attempt,
            lease_valid=self._lease_valid,
            committed=self._committed,
            resolve=self._resolve,
        )

    async def _execute(
        self,
        key: Key,
        task: TaskState,
        spec: Step,
        attempt: int,
        limit_s: float,
        call: Awaitable[Outcome],
    ) -> None:
        """Await an attempt's outcome under its timeout, and record it."""
        task_id, name = key
        # the lines logged from here on carry the attempt, a run's and an adopted one's
        # alike (each runs in an asyncio task of its own, which the fields end with)
        logfmt.tag_task(task_id, name, attempt, task.steps[name].started_term)
        if task.trace is None or not tracing.on():  # the everyday case: nothing to pay
            await self._execute_traced(key, task, spec, attempt, limit_s, call, None)
            return
        with tracing.attempt_span(task.trace, _span_attributes(task, name, attempt)) as span:
            await self._execute_traced(key, task, spec, attempt, limit_s, call, span)

    async def _execute_traced(
        self,
        key: Key,
        task: TaskState,
        spec: Step,
        attempt: int,
        limit_s: float,
        call: Awaitable[Outcome],
        span: Any,
    ) -> None:
        task_id, name = key
        t0 = time.perf_counter()
        outcome: Outcome | None = None
        error: dict[str, Any] | None = None
        cause: Cause | None = None  # the failure's, judged as it is (not read back from error)
        run = asyncio.current_task()
        # A deadline, not asyncio.timeout nor a loop timer of its own: cheaper
        # bookkeeping at thousands of steps a second (deadlines.py).
        deadline = self._deadlines.add(limit_s, self._time_out, key, limit_s, run)
        try:
            # may_begin is asked again right before the attempt begins: turns of the
            # loop (or a SIGSTOP) may separate the commit's lease check from it.
            outcome = await call
        except asyncio.CancelledError:
            error = self._cancel_why.pop(key, None)
            if error is None:
                raise  # leadership lost: leave it STARTED for the next leader
            if run is not None:
                run.uncancel()  # our own cancel, handled here
        except Exception as e:  # an executor's own fault fails the attempt, like the step's
            outcome = failure(e)
        finally:
            self._deadlines.cancel(deadline)
        if isinstance(outcome, NotBegun):
            # Its STARTED is committed: the next leader fails it as lost.
            self._lapsed(f"step {task_id}/{name} attempt {attempt} not begun")
            return
        journal = self._journals.get(key)
        if journal is not None and journal.ended:
            return  # a durable main's WAIT ended this attempt: it has no outcome to record
        seconds, succeeded, failed, retries = self._step_metrics(task.workflow, name)
        seconds.observe(time.perf_counter() - t0)
        state = self.store.state.tasks[task_id].steps[name]
        if isinstance(outcome, Succeeded):
            try:
                await self.store.log.append(
                    EventType.STEP_SUCCEEDED,
                    task_id,
                    name,
                    {"result": outcome.result},
                    attempt=attempt,
                )
                succeeded.inc()
                self.pacer.succeeded(pacing_key(task, name), self.clock.now_ms())
                self._beats.pop(key, None)
                return
            except InvalidEventError as e:
                error = {
                    "error": cut(
                        f"result rejected: {e}. Return a small JSON summary (counts, "
                        f"checksums, a path or URL) and store bulk output elsewhere"
                    ),
                    "final": True,
                }
        elif isinstance(outcome, Failed):
            cause = outcome.cause
            error = failure_payload(outcome, cause)
        elif isinstance(outcome, Lost):
            error = {
                "error": cut(f"lost: {outcome.reason}"),
                "lost": True,
                "final": final_after_loss(state, spec.retry),
            }
            metrics.STEP_OUTCOMES.labels(task.workflow, name, "lost").inc()
        assert error is not None
        if span is not None:
            tracing.failed(span, str(error.get("error", "failed")))
        # a task cancelled, or already compensated by another step's exhaustion: what
        # this failure's rule says of exhaustion no longer applies (decide.py)
        now = self.store.state.tasks[task_id]
        ending = own_exhaustion_moot(now)
        # ...and one that starts nothing more retries nothing on its own: no slot in the
        # step's retry budget (a place there delays the retries of tasks that will run)
        idle = starts_nothing(now)
        if error.get("lost"):  # no cause: it spends max_lost, judged above
            final = says_final(error)
            label = "lost"
            if final and not ending and (then := then_after_loss(spec.retry)) != "fail":
                error["exhausted"] = then
            self.pace_loss(now, name, spec.retry, error)
        else:  # judged by its cause's rule, and the verdict recorded (retry.py)
            if cause is None:  # a timeout's, or none (a cancel, a refused result)
                cause = Cause.from_record(error)
            seed = f"{task_id}:{name}"
            verdict = judge(spec.retry, counts(state), cause, seed, final=says_final(error))
            slot = self._slot(task, name, retried=not (verdict.final or idle))
            if slot is not None:  # its slot in the step's budget added to the delay
                verdict = paced_by(verdict, slot)
            if ending:
                verdict = verdict._replace(then="fail")
            error.update(verdict.record())
            final, label = verdict.final, rule_label(verdict.rule)
        error["final"] = bool(final)
        self._cause_metric(task.workflow, name, label).inc()
        if spec.needs_compensation:
            error["compensate"] = True
        beat = self._beats.pop(key, _NO_BEAT)
        if beat is not _NO_BEAT:
            error["heartbeat"] = beat  # the next attempt's ctx.last_heartbeat
        await self.fail(task_id, name, attempt, error)
        failed.inc()
        if not final:
            retries.inc()

    def pace_loss(self, task: TaskState, name: str, policy: Retry, payload: dict[str, Any]) -> None:
        """A loss (`payload`: its FAILED's, before it is written) takes its slot in the
        step's retry budget as an own failure does: a herd lost with its primary or a
        worker is paced like any herd. The pacing is recorded (retry.paced_after_loss),
        never recomputed by a replay."""
        retried = not (says_final(payload) or starts_nothing(task))
        slot = self._slot(task, name, retried=retried)
        if slot is not None:
            seed = f"{task.task_id}:{name}"
            payload.update(paced_after_loss(task.steps[name], policy, seed, slot))

    def _slot(self, task: TaskState, name: str, *, retried: bool) -> Slot | None:
        """A failure of the step's own, counted in its retry budget (retrypace.py); when
        it will be retried on its own (`retried`) and the budget paces it, its slot
        (None: not paced). The metrics keep the workflow's name (bounded labels)."""
        pacer = self.pacer
        if pacer.budget is None:
            return None
        workflow = task.workflow
        key, now_ms = pacing_key(task, name), self.clock.now_ms()
        pacer.failed(key, now_ms)
        if not retried:
            return None
        slot = pacer.slot(key, now_ms)
        if slot is None or slot.paced_s <= 0:
            return None
        metrics.RETRIES_PACED.labels(workflow, name).inc()
        metrics.RETRY_PACED_SECONDS.labels(workflow, name).inc(slot.paced_s)
        return slot

    async def _finish(self, key: Key) -> None:
        task_id, name = key
        self._cancel_why.pop(key, None)
        self._beats.pop(key, None)
        self._journals.pop(key, None)
        # The slot (and the step's place among the busy) stay taken while an
        # abandoned thread of this attempt still runs: no retry beside it.
        lingering = self.executor.settle(task_id, name)
        if lingering is not None:
            with contextlib.suppress(BaseException):
                await asyncio.shield(lingering)
        self.executor.release(task_id, name)
        self._ended()

    def cancel(self, key: Key, why: str | dict[str, Any], run: asyncio.Task[None] | None) -> None:
        """Give up on the attempt `run` is running; `why` becomes its FAILED payload
        (a reason alone fails it for good)."""
        if run is not None and key not in self._cancel_why:
            payload = {"error": why, "final": True} if isinstance(why, str) else why
            self._cancel_why[key] = payload
            self.executor.abandon(key[0], key[1], str(payload["error"]))
            run.cancel()

    def _time_out(self, key: Key, timeout: float, run: asyncio.Task[Any] | None) -> None:
        said = f"timed out after {timeout:g}s"
        # a TimeoutError as the rules see it: on={TimeoutError: ...} covers both the
        # step's own timeouts and the engine's
        why = {"error": said, "timeout": True, "cause": of_class(TimeoutError, said).record()}
        self.cancel(key, why, run)

    async def fail(self, task_id: str, name: str, attempt: int, payload: dict[str, Any]) -> None:
        """Append the FAILED of an attempt (a lost one too)."""
        try:
            await self.store.log.append(
                EventType.STEP_FAILED, task_id, name, payload, attempt=attempt
            )
        except InvalidEventError:
            # Details too big for the cap: keep the essentials.
            slim = {k: payload[k] for k in SLIM_KEYS if k in payload}
            await self.store.log.append(EventType.STEP_FAILED, task_id, name, slim, attempt=attempt)

    def timeout_for(self, workflow: str, name: str, spec: Step) -> float:
        """The step's timeout; an `auto` one is recomputed every few new samples, not
        sorted afresh for every start."""
        if spec.timeout != AUTO:
            return float(spec.timeout)
        history = self.store.state.durations.get(workflow, {}).get(name)
        n = len(history) if history else 0
        key = (workflow, name)
        cached = self._timeouts.get(key)
        if cached is not None and 0 <= n - cached[0] < AUTO_REFRESH_SAMPLES:
            return cached[1]
        value = spec.timeout_s(history, self.default_timeout_s)
        self._timeouts[key] = (n, value)
        return value

    def context(
        self,
        task: TaskState,
        name: str,
        attempt: int,
        wf_deps: Sequence[str],
        journal: StoreJournal | None = None,
    ) -> StepContext:
        step = task.steps[name]
        beats = self._beats
        key = (task.task_id, name)
        limit = self.store.log.config.json_max_depth

        def beat(details: Any) -> None:
            check_details(details, limit)
            beats[key] = details

        return StepContext(
            task_id=task.task_id,
            step=name,
            attempt=attempt,
            input=task.input,
            results={d: task.steps[d].result for d in wf_deps},
            node_id=self.node_id,
            workflow=task.workflow,
            version=task.version,
            # The term of the STARTED (an adopted attempt keeps its own).
            fencing_token=FencingToken(step.started_term or self.store.log.term, attempt),
            worker=step.worker or self.node_id,
            last_heartbeat=step.heartbeat,
            beat=beat,
            journal=journal,
        )

    def _step_metrics(self, workflow: str, name: str) -> tuple[Any, Any, Any, Any]:
        """The step's labelled metric children (looking them up costs more than using them)."""
        key = (workflow, name)
        found = self._metric_children.get(key)
        if found is None:
            found = self._metric_children[key] = (
                metrics.STEP_SECONDS.labels(workflow, name),
                metrics.STEP_OUTCOMES.labels(workflow, name, "succeeded"),
                metrics.STEP_OUTCOMES.labels(workflow, name, "failed"),
                metrics.STEP_RETRIES.labels(workflow, name),
            )
        return found

    def _cause_metric(self, workflow: str, name: str, label: str) -> Any:
        """The step's failures-by-cause child for `label` (looked up once, as above)."""
        key = (workflow, name, label)
        found = self._cause_children.get(key)
        if found is None:
            found = self._cause_children[key] = metrics.STEP_FAILURE_CAUSES.labels(*key)
        return found

    # -------------------------------------------------------- compensation

    async def compensate(self, task_id: str, name: str, spec: Step, *, resume: bool) -> None:
        """COMPENSATING, the action (retried with backoff, failures visible), COMPENSATED.
        `resume`: the step is COMPENSATING already."""
        logw = self.store.log
        action = spec.compensate
        assert action is not None  # decide() names a compensation only when one is declared
        try:
            task = self.store.state.tasks[task_id]
            step = task.steps[name]
            if not resume:
                await logw.append(EventType.STEP_COMPENSATING, task_id, name, attempt=step.attempt)
                metrics.COMPENSATIONS.labels(task.workflow, name).inc()
            # Like a step, the action runs only once COMPENSATING is committed (also when
            # resuming one: it may be this node's own uncommitted record).
            if not await self._committed(task.last_event_id):
                return
            n = 0
            while True:
                n += 1
                # A compensation sees the step's own result beside its inputs (and a
                # durable main's, its checkpoints: what it did is what it undoes).
                journal = self._journal(task_id, name, step.attempt) if spec.journaled else None
                ctx = _with_own_result(
                    self.context(task, name, step.attempt, spec.after, journal),
                    name,
                    step.result,
                )
                try:
                    outcome = await self.compensator.run(Attempt(action, ctx, self._lease_valid))
                except Exception as e:
                    outcome = failure(e)
                if isinstance(outcome, NotBegun):
                    self._lapsed(f"compensation of {task_id}/{name} not begun")
                    return
                if isinstance(outcome, Succeeded):
                    break
                why = (
                    f"lost: {outcome.reason}"
                    if isinstance(outcome, Lost)
                    else f"{outcome.error_type}: {outcome.message}"
                )
                await logw.append(
                    EventType.STEP_FAILED,
                    task_id,
                    name,
                    {
                        "error": cut(f"compensation failed: {why}"),
                        "compensation": True,
                    },
                    attempt=step.attempt,
                )
                await self.clock.sleep(
                    compensation_delay(spec.compensation_retry, n, task_id, name)
                )
                await logw.append(EventType.STEP_COMPENSATING, task_id, name, attempt=step.attempt)
            await logw.append(EventType.STEP_COMPENSATED, task_id, name, attempt=step.attempt)
        except ApolloError as e:
            log.error("compensation of %s/%s: cannot record its outcome: %s", task_id, name, e)


def _span_attributes(task: TaskState, name: str, attempt: int) -> dict[str, Any]:
    step = task.steps[name]
    return {
        "apollo11.task_id": task.task_id,
        "apollo11.workflow": task.workflow,
        "apollo11.step": name,
        "apollo11.attempt": attempt,
        "apollo11.term": step.started_term,
        "apollo11.worker": step.worker or "",
    }


def _with_own_result(ctx: StepContext, name: str, result: Any) -> StepContext:
    return StepContext(
        task_id=ctx.task_id,
        step=ctx.step,
        attempt=ctx.attempt,
        input=ctx.input,
        results={**ctx.results, name: result},
        node_id=ctx.node_id,
        workflow=ctx.workflow,
        version=ctx.version,
        fencing_token=ctx.fencing_token,
        worker=ctx.worker,
        last_heartbeat=ctx.last_heartbeat,
        journal=ctx.journal,
    )
