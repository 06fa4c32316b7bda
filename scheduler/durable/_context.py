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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from apollo11.scheduler.workflow import (
    Idempotency,
    Journal,
    NotIdempotent,
    Retry,
    StepError,
)

STEP = "step"
SLEEP = "sleep"
EVENT = "event"
NOW = "now"
UUID = "uuid"
RANDOM = "random"

_JSON_OPTS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS


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


def _roundtrip(value: Any) -> Any:
    """What a replay will return: the value as the log keeps it (JSON)."""
    try:
        return orjson.loads(orjson.dumps(value))
    except TypeError as e:
        raise StepError(f"output is not JSON-serializable: {e}", final=True) from e


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
    ) -> Any:
        """Run the side effect `fn(*args)` once per task: its output is recorded, and
        returned without running it at every replay. `idempotency` says how it is safe
        to run again if its node dies mid-call (`Idempotent()`, `DedupeKey()`: use
        `current_step().dedupe_key`, `Checkpoint()`). Tried by `retry` (default: 3
        attempts); a final failure raises `DurableStepError`, at every replay too."""
        if idempotency is None or isinstance(idempotency, NotIdempotent):
            raise StepError(
                f"ctx.step {name!r}: declare idempotency=Idempotent(), DedupeKey() or "
                f"Checkpoint() (NotIdempotent with a compensation is not supported in "
                f"durable tasks yet)",
                final=True,
            )
        digest = input_hash(list(args))
        seq, rec = self._at(STEP, name, digest)
        if rec is not None:
            if "error" in rec:
                e = rec["error"]
                raise DurableStepError(e["type"], e["message"], e.get("details") or {})
            return rec.get("output")
        policy = retry or Retry()
        base = {"seq": seq, "kind": STEP, "name": name, "input_hash": digest}
        tries = 0
        while True:
            tries += 1
            token = _CURRENT.set(StepInfo(self.task_id, name, seq, tries))
            try:
                out = _roundtrip(await _call(fn, args))
            except Exception as e:
                final = isinstance(e, StepError) and bool(e.details.get("final"))
                if not final and tries < policy.attempts:
                    await self._journal.sleep(policy.delay_s(tries, f"{self.task_id}:{seq}"))
                    continue
                details = dict(e.details) if isinstance(e, StepError) else {}
                kind, message = type(e).__name__, str(e)
                err = {"type": kind, "message": message, "details": details}
                await self._record({**base, "error": err, "attempts": tries})
                raise DurableStepError(kind, message, details) from e
            finally:
                _CURRENT.reset(token)
            await self._record({**base, "output": out, "attempts": tries})
            return out

    # ------------------------------------------------------------ waits

    async def sleep(self, duration: timedelta | float) -> None:
        """Sleep `duration` (a timedelta or seconds), measured from the first time the
        code got here; the task is evicted meanwhile."""
        seconds = _seconds(duration)
        await self._sleep("sleep", {"seconds": seconds}, lambda now: now + int(seconds * 1000))

    async def sleep_until(self, when: datetime) -> None:
        """Sleep until `when` (an aware datetime; naive is taken as UTC)."""
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        until = int(when.timestamp() * 1000)
        await self._sleep("sleep_until", {"until_ms": until}, lambda now: until)

    async def _sleep(self, name: str, asked: Any, deadline: Callable[[int], int]) -> None:
        digest = input_hash(asked)
        seq, rec = self._at(SLEEP, name, digest)
        if rec is not None:
            return
        w = self._registered(seq)
        now = self._journal.now_ms()
        until = int(w["until_ms"]) if w is not None else deadline(now)
        base = {"seq": seq, "kind": SLEEP, "name": name, "input_hash": digest}
        if now >= until:
            await self._record({**base, "output": None})
            return
        raise Suspended({**base, "until_ms": until})

    async def wait_for_event(
        self,
        key: str,
        *,
        timeout: timedelta | float | None = None,  # noqa: ASYNC109 - the API (issue 18)
        since: int | None = None,
    ) -> Any:
        """The payload of the first event sent with `key` at or after `since` (an event
        id; default: the task's start, or just after the event this task's previous
        wait on `key` received), or None once `timeout` has passed."""
        t = None if timeout is None else _seconds(timeout)
        digest = input_hash({"key": key, "timeout_s": t, "since": since})
        seq, rec = self._at(EVENT, key, digest)
        if rec is not None:
            return rec.get("output")
        w = self._registered(seq)
        now = self._journal.now_ms()
        if w is not None:
            start = int(w.get("since") or 0)
            until = w.get("until_ms")
        else:
            start = since if since is not None else self._default_since(key)
            until = None if t is None else now + int(t * 1000)
        base = {"seq": seq, "kind": EVENT, "name": key, "input_hash": digest}
        found = self._journal.first_event(key, start)
        if found is not None:
            event_id, payload = found
            self._consumed[key] = event_id
            await self._record({**base, "output": payload, "event_id": event_id})
            return payload
        if until is not None and now >= int(until):
            await self._record({**base, "output": None, "timeout": True})
            return None
        wait = {**base, "key": key, "since": start}
        if until is not None:
            wait["until_ms"] = int(until)
        raise Suspended(wait)

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
