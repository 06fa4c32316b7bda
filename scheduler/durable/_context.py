"""`DurableContext`: what a durable main calls, replayed from its checkpoints.

Each `ctx.*` call takes the next position (`seq`). A position the log holds a
checkpoint for returns the recorded output (or raises the recorded error) and
runs nothing; the first position past the log executes and records its
checkpoint before the code goes on. A call whose kind, name or input hash
differs from what the log holds at its position is non-determinism: the main
stops (`NonDeterminism`, which user code cannot catch as an `Exception`) and
the task is reported with the position, what the log holds and what the code
asked for. A wait that cannot resolve now registers a WAIT and unwinds the
main (`Suspended`, likewise): the attempt ends, and a later one replays.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import inspect
import random as _random
import uuid as _uuid
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

import orjson

from apollo11.scheduler import jsondepth, waits
from apollo11.scheduler.cause import of_exception
from apollo11.scheduler.retry import next_try, next_undo_in, says_final
from apollo11.scheduler.workflow import (
    Idempotency,
    Journal,
    NotIdempotent,
    Retry,
    StepError,
)

STEP = "step"
INTENT = "intent"  # a NotIdempotent ctx.step about to run
SLEEP = waits.SLEEP
EVENT = waits.EVENT
CHILD = waits.CHILD
SPAWN = "spawn"
NOW = "now"
UUID = "uuid"
RANDOM = "random"
CLOSE_POLICIES = ("cancel", "abandon")

T = TypeVar("T")

_JSON_OPTS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
_UNDO_RETRY = Retry()  # as the main's compensation_retry (_workflow.py)


def input_hash(value: Any) -> str:
    """A change detector for what a call was asked: 16 hex digits of blake2b over the
    canonical JSON (sorted keys; what JSON cannot carry, by `str`)."""
    data = orjson.dumps(value, option=_JSON_OPTS, default=str)
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def _seconds(d: timedelta | float) -> float:
    return d.total_seconds() if isinstance(d, timedelta) else float(d)


class DurableStepError(Exception):
    """A `ctx.step` failed for good; raised at its `await`, and again, identically, at
    every replay (its type name, message and details are in the log)."""

    def __init__(self, error_type: str, message: str, details: Mapping[str, Any]) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type
        self.message = message
        self.details = dict(details)


class ChildFailed(DurableStepError):
    """A spawned task failed, was cancelled or stopped as non-deterministic: raised at
    the `await` of its handle (or of a `gather`/`first` it decided), and again,
    identically, at every replay."""

    @property
    def task_id(self) -> str:
        return str(self.details.get("task_id", ""))

    @property
    def state(self) -> str:
        """The child's state: FAILED, CANCELLED or NONDETERMINISTIC; PURGED when
        retention purged it before this (re-run) parent joined it (its result is gone)."""
        return str(self.details.get("state", ""))


def _raise_recorded(error: Mapping[str, Any]) -> None:
    kind = str(error.get("type"))
    cls = ChildFailed if kind == waits.CHILD_FAILED else DurableStepError
    raise cls(kind, str(error.get("message")), error.get("details") or {})


class NonDeterminism(BaseException):  # a signal, like CancelledError
    """The code asked for something other than the log holds at `seq`."""

    def __init__(
        self, seq: int, expected: Mapping[str, Any] | None, got: Mapping[str, Any] | None
    ) -> None:
        self.seq = seq
        self.expected = None if expected is None else dict(expected)
        self.got = None if got is None else dict(got)
        super().__init__(self.describe())

    def describe(self) -> str:
        def what(c: Mapping[str, Any] | None, none: str) -> str:
            if c is None:
                return none
            return f"{c['kind']} {c['name']!r} (input {c['input_hash']})"

        return (
            f"non-determinism at checkpoint {self.seq}: the log holds "
            f"{what(self.expected, 'nothing more')}, the code asked for "
            f"{what(self.got, 'nothing more (it returned)')}. Deploy code that replays this "
            f"history (a changed flow belongs in a new workflow version) and retry step "
            f"main, or cancel the task"
        )

    def report(self) -> dict[str, Any]:
        return {"seq": self.seq, "expected": self.expected, "got": self.got}


class Suspended(BaseException):  # a signal, like CancelledError
    """The main waits: `wait` is the WAIT payload to record; its attempt ends."""

    def __init__(self, wait: dict[str, Any]) -> None:
        super().__init__(f"waiting: {wait['kind']} {wait['name']!r}")
        self.wait = wait


class Frontier(BaseException):  # a signal, like CancelledError
    """A replay-only run (`apollo11 replay-check`) reached a position the log does not
    hold: everything before it matched, and nothing past it may run."""

    def __init__(self, seq: int) -> None:
        super().__init__(seq)
        self.seq = seq


class JournalFailed(BaseException):  # a signal, like CancelledError
    """Recording failed (the lease is in doubt, a payload over the cap): the attempt
    stops with `error`, which user code must not be able to catch and carry on past."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(frozen=True, slots=True)
class StepInfo:
    """What a `ctx.step` function may ask about the call it runs in (`current_step()`)."""

    task_id: str
    name: str
    seq: int
    attempt: int  # the try within this call, from 1

    @property
    def dedupe_key(self) -> str:
        """Stable across tries, replays and failovers: `task_id:seq:name`."""
        return f"{self.task_id}:{self.seq}:{self.name}"


_CURRENT: contextvars.ContextVar[StepInfo | None] = contextvars.ContextVar(
    "apollo11_durable_step", default=None
)


def current_step() -> StepInfo | None:
    """Inside a `ctx.step` function (async, or sync in its thread): the call it runs in."""
    return _CURRENT.get()


async def _call(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    if inspect.iscoroutinefunction(fn):
        return await fn(*args)
    result = await asyncio.to_thread(fn, *args)  # copies the context: current_step() works
    if inspect.isawaitable(result):
        return await result
    return result


async def _call_within(
    fn: Callable[..., Any], args: tuple[Any, ...], limit_s: float | None, name: str
) -> Any:
    """`_call` bounded by `limit_s`. A coroutine is cancelled at the limit; a thread
    cannot be, so a sync function's try is waited out and its output thrown away:
    the next try never runs beside it (the engine's rule for a step's attempts)."""
    if limit_s is None:
        return await _call(fn, args)
    running = asyncio.ensure_future(_call(fn, args))
    done, _ = await asyncio.wait({running}, timeout=limit_s)
    if not done:
        if inspect.iscoroutinefunction(fn):
            running.cancel()
        # a cancelled coroutine ends at its next await; a thread ends when it ends
        await asyncio.wait({running})
        if not running.cancelled():
            running.exception()  # retrieved: what it raised late is not the outcome
        raise TimeoutError(f"ctx.step {name!r} timed out after {limit_s:g}s")
    return running.result()


def _roundtrip(value: Any, max_depth: int) -> Any:
    """What a replay will return: the value as the log keeps it (JSON), nested at most
    `max_depth` levels (json_max_depth: the log would refuse its checkpoint)."""
    try:
        data = orjson.dumps(value)
    except TypeError as e:
        depth = jsondepth.value_depth(value)
        if depth > max_depth:  # past orjson's own limit (254)
            said = jsondepth.too_deep_value("output", depth, max_depth)
            raise StepError(said, final=True) from None
        raise StepError(f"output is not JSON-serializable: {e}", final=True) from e
    deep = jsondepth.deeper_than(data, max_depth)
    if deep is not None:
        raise StepError(jsondepth.too_deep("output", deep, max_depth), final=True)
    return orjson.loads(data)


class DurableContext:
    """The API of a durable main (docs/durable.md). Built by the engine for each
    attempt from the task's checkpoints; never constructed by user code."""

    def __init__(self, journal: Journal, *, task_id: str, attempt: int) -> None:
        self._journal = journal
        self.task_id = task_id
        self.attempt = attempt  # of the main: how many times it has run (replays included)
        self._log = list(journal.checkpoints)
        self._wait = journal.wait
        self._seq = 0
        self._pending: list[dict[str, Any]] = []  # now/uuid/random not yet in the log
        self._consumed: dict[str, int] = {}  # event key -> the last event id a wait took
        # replay-check: stop at the first position past the log, before any side effect
        self._replay_only = bool(getattr(journal, "replay_only", False))
        # the node's json_max_depth where the journal knows it (a worker's does not:
        # the node's log refuses a deeper checkpoint there)
        self._max_depth = int(getattr(journal, "json_max_depth", jsondepth.MAX_DEPTH))
        # set by DurableWorkflow's compensation: the NotIdempotent ctx.steps that
        # succeeded, as (seq, name, undo, output, args), found by replaying to the end
        self.compensations: (
            list[tuple[int, str, Callable[..., Any], Any, tuple[Any, ...]]] | None
        ) = None

    @property
    def replaying(self) -> bool:
        """True while the code is still at positions the log holds."""
        return self._seq < len(self._log)

    # ------------------------------------------------------------ positions

    def _at(self, kind: str, name: str, digest: str) -> tuple[int, Mapping[str, Any] | None]:
        """Take the next position: (seq, its checkpoint if the log holds one)."""
        seq = self._seq
        self._seq += 1
        got = {"kind": kind, "name": name, "input_hash": digest}
        if seq < len(self._log):
            rec = self._log[seq]
            self._check(seq, rec, got)
            if kind == EVENT and rec.get("event_id") is not None:
                self._consumed[name] = int(rec["event_id"])
            return seq, rec
        w = self._wait
        if w is not None and w.get("seq") == seq:
            self._check(seq, w, got)
        if self._replay_only:
            raise Frontier(seq)
        return seq, None

    @staticmethod
    def _check(seq: int, rec: Mapping[str, Any], got: dict[str, Any]) -> None:
        expected = {k: rec.get(k) for k in ("kind", "name", "input_hash")}
        if expected != got:
            raise NonDeterminism(seq, expected, got)

    def _registered(self, seq: int) -> Mapping[str, Any] | None:
        w = self._wait
        return w if w is not None and w.get("seq") == seq else None

    async def _record(self, checkpoint: dict[str, Any]) -> None:
        try:
            await self._journal.record([*self._pending, checkpoint])
        except Exception as e:
            raise JournalFailed(e) from e
        self._pending.clear()

    @property
    def pending(self) -> list[dict[str, Any]]:
        """The now/uuid/random checkpoints drawn and not recorded yet."""
        return list(self._pending)

    async def flush(self) -> None:
        """Record the buffered now/uuid/random checkpoints (the main's end does this)."""
        if self._pending:
            await self._journal.record(self._pending)
            self._pending.clear()

    def finished(self) -> None:
        """The main returned: the log must hold nothing beyond where it got to."""
        seq = self._seq
        if seq < len(self._log):
            raise NonDeterminism(seq, _shape(self._log[seq]), None)
        w = self._wait
        if w is not None and int(w.get("seq", -1)) >= seq:
            raise NonDeterminism(seq, _shape(w), None)

    # ------------------------------------------------------------ steps

    async def step(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        idempotency: Idempotency,
        retry: Retry | None = None,
        timeout: timedelta | float | None = None,  # noqa: ASYNC109 (each try's, not the call's)
    ) -> Any:
        """Run the side effect `fn(*args)` once per task: its output is recorded, and
        returned without running it at every replay. `idempotency` says how it is safe
        to run again if its node dies mid-call (`Idempotent()`, `DedupeKey()`: use
        `current_step().dedupe_key`, `Checkpoint()`, or `NotIdempotent(compensate=undo)`:
        `undo(output, *args)` undoes it, `output` None when it did not finish). Tried by
        `retry` (default: 3 attempts); a final failure raises `DurableStepError`, at
        every replay too. `timeout` bounds each try (a timedelta or seconds): a try
        past it fails with TimeoutError and is retried like any failure; a sync
        function's thread cannot be stopped, so its try is waited out first. The main
        step's own timeout bounds the attempt as a whole.

        A NotIdempotent step takes two positions: its intent, recorded before it runs,
        then its outcome. Found with an intent and no outcome (its node died mid-call),
        or failing a try, it is undone before it runs again, and undone when it fails
        for good; when the task is cancelled, the ones that succeeded are undone, last
        first (DurableWorkflow's compensation)."""
        if idempotency is None:
            raise StepError(
                f"ctx.step {name!r}: declare idempotency=Idempotent(), DedupeKey(), "
                f"Checkpoint() or NotIdempotent(compensate=...)",
                final=True,
            )
        limit_s = None if timeout is None else _seconds(timeout)
        if limit_s is not None and limit_s <= 0:
            raise StepError(
                f"ctx.step {name!r}: timeout must be more than 0 seconds, got {limit_s:g}",
                final=True,
            )
        undo = idempotency.compensate if isinstance(idempotency, NotIdempotent) else None
        if isinstance(idempotency, NotIdempotent) and undo is None:
            raise StepError(
                f"ctx.step {name!r}: NotIdempotent needs compensate=undo (called as "
                f"undo(output, *args) to undo it)",
                final=True,
            )
        digest = input_hash(list(args))
        interrupted = False
        if undo is not None:
            seq_i, intent = self._at(INTENT, name, digest)
            interrupted = intent is not None
            if interrupted and self.compensations is not None and seq_i + 1 >= len(self._log):
                # begun, and no outcome in the log: it may have done part of it
                self.compensations.append((seq_i + 1, name, undo, None, args))
        seq, rec = self._at(STEP, name, digest)
        if rec is not None:
            if undo is not None and "error" not in rec and self.compensations is not None:
                self.compensations.append((seq, name, undo, rec.get("output"), args))
            return self._recorded(rec)
        base = {"seq": seq, "kind": STEP, "name": name, "input_hash": digest}
        if undo is not None:
            if interrupted:  # begun by a run that died: it may have done part of it
                await self._undo(name, seq, undo, None, args)
            else:
                await self._record({**base, "seq": seq_i, "kind": INTENT, "output": None})
        policy = retry or Retry()
        wrong = policy.problems() + _exhausted_problems(policy)
        if wrong:  # no registration sees a ctx.step's policy: refused at its first call
            raise StepError(f"ctx.step {name!r}: retry " + "; ".join(wrong), final=True)
        tries = 0
        failures: dict[str, int] = {}  # this call's failed tries, by the rule that judged them
        while True:
            tries += 1
            token = _CURRENT.set(StepInfo(self.task_id, name, seq, tries))
            try:
                out = _roundtrip(await _call_within(fn, args, limit_s, name), self._max_depth)
            except Exception as e:
                _CURRENT.reset(token)
                if undo is not None:
                    await self._undo(name, seq, undo, None, args)
                final = isinstance(e, StepError) and says_final(e.details)
                cause = of_exception(e)
                verdict = next_try(policy, failures, cause, self.task_id, seq, final=final)
                failures[verdict.rule] = verdict.failures
                if verdict.retry_in_s is not None:
                    await self._journal.sleep(verdict.retry_in_s)
                    continue
                details = dict(e.details) if isinstance(e, StepError) else {}
                kind, message = type(e).__name__, str(e)
                err = {
                    "type": kind,
                    "message": message,
                    "details": details,
                    "mro": list(cause.mro),
                    "rule": verdict.rule,
                }
                await self._record({**base, "error": err, "attempts": tries})
                raise DurableStepError(kind, message, details) from e
            _CURRENT.reset(token)
            done = {**base, "output": out, "attempts": tries}
            if undo is not None:
                done["compensate"] = True  # undone if the task is cancelled
            await self._record(done)
            return out

    async def run_undo(
        self, name: str, seq: int, undo: Callable[..., Any], output: Any, args: tuple[Any, ...]
    ) -> None:
        """Undo a NotIdempotent ctx.step (the compensation of a cancelled task): a
        failure is the compensation's, which the engine retries."""
        token = _CURRENT.set(StepInfo(self.task_id, name, seq, 1))
        try:
            await _call(undo, (output, *args))
        finally:
            _CURRENT.reset(token)

    async def _undo(
        self, name: str, seq: int, undo: Callable[..., Any], output: Any, args: tuple[Any, ...]
    ) -> None:
        """Undo a NotIdempotent ctx.step, tried as `next_undo_in` (retry.py) says; if it
        cannot be undone, the main stops (an operator must look)."""
        tries = 0
        while True:
            tries += 1
            token = _CURRENT.set(StepInfo(self.task_id, name, seq, tries))
            try:
                await _call(undo, (output, *args))
                return
            except Exception as e:
                delay = next_undo_in(_UNDO_RETRY, tries, self.task_id, seq)
                if delay is None:
                    raise JournalFailed(
                        StepError(f"ctx.step {name!r}: undoing it failed: {e}", final=True)
                    ) from e
                await self._journal.sleep(delay)
            finally:
                _CURRENT.reset(token)

    # ------------------------------------------------------------ waits

    def sleep(self, duration: timedelta | float) -> Wait[None]:
        """Sleep `duration` (a timedelta or seconds), measured from the first time the
        code got here; the task is evicted meanwhile. Await it, or pass it to
        `gather`/`first`."""
        seconds = _seconds(duration)
        return Wait(
            self,
            SLEEP,
            "sleep",
            {"seconds": seconds},
            lambda now: {"kind": SLEEP, "until_ms": now + int(seconds * 1000)},
        )

    def sleep_until(self, when: datetime) -> Wait[None]:
        """Sleep until `when` (an aware datetime; naive is taken as UTC)."""
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        until = int(when.timestamp() * 1000)
        return Wait(
            self,
            SLEEP,
            "sleep_until",
            {"until_ms": until},
            lambda now: {"kind": SLEEP, "until_ms": until},
        )

    def wait_for_event(
        self,
        key: str,
        *,
        timeout: timedelta | float | None = None,
        since: int | None = None,
    ) -> Wait[Any]:
        """The payload of the first event sent with `key` at or after `since` (an event
        id; default: the task's start, or just after the event this task's previous
        wait on `key` received), or None once `timeout` has passed."""
        t = None if timeout is None else _seconds(timeout)

        def part(now: int) -> dict[str, Any]:
            start = since if since is not None else self._default_since(key)
            p: dict[str, Any] = {"kind": EVENT, "key": key, "since": start}
            if t is not None:
                p["until_ms"] = now + int(t * 1000)
            return p

        return Wait(self, EVENT, key, {"key": key, "timeout_s": t, "since": since}, part)

    def spawn(
        self,
        workflow: str | Any,
        input: Any = None,
        *,
        key: str | None = None,
        version: int | None = None,
        close: str = "cancel",
    ) -> ChildHandle:
        """Start a child task of `workflow` (a name, or the Workflow) with `input`; await
        the handle (or pass it to `gather`/`first`) for its result. The child is an
        ordinary task with a link to this one and the idempotency key `<task>:<key>`
        (`key` defaults to this call's position), so a replay never starts it twice.
        `close`: what becomes of it if this task is cancelled or returns first:
        "cancel" (default) or "abandon" (it runs on)."""
        name = workflow if isinstance(workflow, str) else str(workflow.name)
        if close not in CLOSE_POLICIES:
            raise ValueError(f"ctx.spawn {name!r}: close must be one of {CLOSE_POLICIES}")
        if hasattr(input, "model_dump"):
            input = input.model_dump(mode="json")  # a typed workflow's model, as JSON
        asked = {"workflow": name, "input": input, "key": key, "version": version}
        digest = input_hash(asked)
        seq, rec = self._at(SPAWN, name, digest)
        if rec is not None:
            return ChildHandle(self, rec, name, seq)
        ckey = f"{self.task_id}:{key if key is not None else seq}"
        parent = {"task_id": self.task_id, "seq": seq, "close": close}
        try:
            child = self._journal.plan_child(name, input, version, ckey, parent)
        except Exception as e:  # its position is taken: the main must not carry on past it
            raise JournalFailed(
                StepError(f"ctx.spawn {name!r} at checkpoint {seq}: {e}", final=True)
            ) from e
        spawned = {
            "seq": seq,
            "kind": SPAWN,
            "name": name,
            "input_hash": digest,
            "output": child,
            "child": child,
            "close": close,
        }
        self._pending.append(spawned)
        return ChildHandle(self, spawned, name, seq)

    async def gather(self, *awaitables: Wait[Any]) -> list[Any]:
        """Wait for all of them (children, sleeps, events): their values, in order. A
        child that failed raises `ChildFailed` as soon as it is known, the others
        running on."""
        if not awaitables:
            return []
        out = await self._wait_many(waits.ALL, "gather", awaitables)
        return list(out)

    async def first(self, *awaitables: Wait[Any]) -> tuple[int, Any]:
        """Wait for the first of them (children, sleeps, events): (its index, its value).
        Those resolved at the same moment go by their order here; a child that failed
        first raises `ChildFailed`."""
        if not awaitables:
            raise ValueError("ctx.first needs at least one thing to wait for")
        index, value = await self._wait_many(waits.ANY, "first", awaitables)
        return int(index), value

    async def _wait_one(self, w: Wait[Any]) -> Any:
        digest = input_hash(w.asked)
        seq, rec = self._at(w.kind, w.name, digest)
        if rec is not None:
            return self._recorded(rec)
        base = {"seq": seq, "kind": w.kind, "name": w.name, "input_hash": digest}
        registered = self._registered(seq)
        now = self._journal.now_ms()
        wait = dict(registered) if registered is not None else {**base, **w.part(now)}
        return await self._settle(base, wait, now, [w])

    async def _wait_many(self, mode: str, name: str, ws: tuple[Wait[Any], ...]) -> Any:
        for w in ws:
            if not isinstance(w, Wait):
                for c in ws:
                    if inspect.iscoroutine(c):
                        c.close()  # never to run: no "was never awaited" warning
                raise TypeError(
                    f"ctx.{name} takes what ctx.spawn, ctx.sleep, ctx.sleep_until and "
                    f"ctx.wait_for_event return, not {type(w).__name__}: run ctx.step calls "
                    f"one after the other"
                )
        digest = input_hash([[w.kind, w.name, input_hash(w.asked)] for w in ws])
        seq, rec = self._at(mode, name, digest)
        if rec is not None:
            for i, taken in (rec.get("parts") or {}).items():
                self._took(ws[int(i)], taken)
            return self._recorded(rec)
        base = {"seq": seq, "kind": mode, "name": name, "input_hash": digest}
        registered = self._registered(seq)
        now = self._journal.now_ms()
        if registered is not None:
            wait = dict(registered)
        else:
            wait = {**base, "parts": [w.part(now) for w in ws]}
        return await self._settle(base, wait, now, list(ws))

    async def _settle(
        self, base: dict[str, Any], wait: dict[str, Any], now: int, ws: list[Wait[Any]]
    ) -> Any:
        """Resolve a wait now (recorded at its position before the code goes on), or
        end the attempt with it registered."""
        try:
            resolution = await self._journal.resolve(wait, now)
        except Exception as e:  # the main must not carry on past a wait it could not ask
            raise JournalFailed(e) from e
        if resolution is None:
            raise Suspended(wait)
        if len(ws) == 1 and wait.get("kind") not in (waits.ALL, waits.ANY):
            self._took(ws[0], resolution)
        else:
            for i, taken in (resolution.get("parts") or {}).items():
                self._took(ws[int(i)], taken)
        await self._record({**base, **resolution})
        return self._recorded(resolution)

    def _took(self, w: Wait[Any], taken: Mapping[str, Any]) -> None:
        """An event wait took an event: a later wait on its key starts after it."""
        if w.kind == EVENT and taken.get("event_id") is not None:
            self._consumed[w.name] = int(taken["event_id"])

    @staticmethod
    def _recorded(rec: Mapping[str, Any]) -> Any:
        if "error" in rec:
            _raise_recorded(rec["error"])
        return rec.get("output")

    def _default_since(self, key: str) -> int:
        taken = self._consumed.get(key)
        first = self._journal.first_event_id
        return first if taken is None else max(first, taken + 1)

    # ------------------------------------------------------------ memoized values

    def _memo(self, kind: str, make: Callable[[], Any]) -> Any:
        seq, rec = self._at(kind, kind, input_hash(None))
        if rec is not None:
            return rec.get("output")
        value = make()
        self._pending.append(
            {
                "seq": seq,
                "kind": kind,
                "name": kind,
                "input_hash": input_hash(None),
                "output": value,
            }
        )
        return value

    def now(self) -> datetime:
        """The time, as recorded the first time the code got here (UTC)."""
        ms = int(self._memo(NOW, self._journal.now_ms))
        return datetime.fromtimestamp(ms / 1000, tz=UTC)

    def uuid(self) -> _uuid.UUID:
        """A random UUID, the same at every replay."""
        return _uuid.UUID(str(self._memo(UUID, lambda: str(_uuid.uuid4()))))

    def random(self) -> float:
        """A random float in [0, 1), the same at every replay."""
        return float(self._memo(RANDOM, _random.random))


def _shape(rec: Mapping[str, Any]) -> dict[str, Any]:
    return {k: rec.get(k) for k in ("kind", "name", "input_hash")}


class Wait(Generic[T]):
    """Something a durable main waits for (what `ctx.sleep`, `ctx.sleep_until`,
    `ctx.wait_for_event` and `ctx.spawn` return): await it for its value, or hand it
    to `ctx.gather` / `ctx.first`. It takes its checkpoint position when awaited
    (or when the gather or first that holds it is), not when made."""

    __slots__ = ("_ctx", "asked", "kind", "name", "part")

    def __init__(
        self,
        ctx: DurableContext,
        kind: str,
        name: str,
        asked: Any,
        part: Callable[[int], dict[str, Any]],
    ) -> None:
        self._ctx = ctx
        self.kind = kind
        self.name = name
        self.asked = asked  # what its input hash is taken over
        self.part = part  # its condition, registered at `now` (ms)

    def __await__(self) -> Generator[Any, None, T]:
        return self._ctx._wait_one(self).__await__()

    def __repr__(self) -> str:
        return f"<{self.kind} {self.name!r}>"


class ChildHandle(Wait[Any]):
    """A spawned child task: `task_id`, and its result when awaited (`ChildFailed`
    when it failed, was cancelled or is non-deterministic)."""

    __slots__ = ("_spawn", "seq", "workflow")

    def __init__(
        self, ctx: DurableContext, spawn: Mapping[str, Any], workflow: str, seq: int
    ) -> None:
        super().__init__(
            ctx,
            CHILD,
            workflow,
            {"spawn": seq},
            lambda now: {"kind": CHILD, "task_id": self.task_id},
        )
        self._spawn = spawn  # its checkpoint: the child's id as the log holds it
        self.workflow = workflow
        self.seq = seq  # the position of its spawn

    @property
    def task_id(self) -> str:
        return str(self._spawn["child"])


def _exhausted_problems(policy: Retry) -> list[str]:
    """A ctx.step's final failure is recorded and raised in the main as DurableStepError
    (at every replay too): it cannot pause or compensate the task by itself, which is
    the main's to say (DurableWorkflow(on_exhausted=...))."""
    modes = {policy.on_exhausted} | {
        r.on_exhausted for r in policy.on.values() if isinstance(r, Retry)
    }
    if modes & {"pause", "compensate"}:
        return [
            "on_exhausted must be 'fail' (or unset) for a ctx.step: its final failure is "
            "raised in the main as DurableStepError; to pause or compensate the task when "
            "the main fails for good, pass on_exhausted= to DurableWorkflow"
        ]
    return []
