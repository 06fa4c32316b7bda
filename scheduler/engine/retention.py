"""The retention sweep: on the primary, the finished tasks past their retention purged.

Every `interval_s` (real seconds) the sweep reads the finished tasks a page at a time (summaries:
memory and the archive's listing; only a task past its rule is read whole, with its
parent, for the fold's own test, State.purge_refused), asks scheduler/retention.py
which are due, and writes them as TASK_PURGED events, as many task ids each as the
log's payload limit takes (~140 at the default 4 KB), each committed before the
next. The event is the purge: every standby and every replay drops the same tasks
(state/fold.py). A held task is never asked for.

The sweep's time is the engine's clock (the log's on a node, a fake in tests).
A sweep that purges nothing still writes an empty TASK_PURGED when event
idempotency keys are past their TTL: the fold forgets them at that point of the
log, on every node, instead of only at the next EVENT.

Holds are here too (`hold`, `release`): a TASK_HELD on the task, naming the
authenticated principal and why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from apollo11.scheduler import metrics, retention
from apollo11.scheduler.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    NotLeaderError,
)
from apollo11.scheduler.log import Event, EventType

if TYPE_CHECKING:
    from apollo11.scheduler.clock import Clock
    from apollo11.scheduler.state import State, Store, Summary

log = logging.getLogger(__name__)

BATCH = 500  # tasks one sweep step reads as due (written in events under payload_max_bytes)
PAGE = 2000  # summaries read between turns of the event loop
DEFAULT_INTERVAL_S = 60.0
MAX_REASON = 1024  # as an operator's other actions (nodeview/checks.py)


@dataclass(frozen=True, slots=True)
class RetentionOptions:
    """What the node's settings say (node/options.py)."""

    rules: retention.Rules = field(default_factory=retention.Rules)
    counted_from: retention.From = "finish"
    interval_s: float = DEFAULT_INTERVAL_S


class Host(Protocol):
    """What the sweep needs of the engine (engine.py's `Engine`)."""

    @property
    def store(self) -> Store: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def leading(self) -> bool: ...

    def check_leading(self) -> None: ...
    async def wait_commit(self, event_id: int) -> None: ...


def _finished(s: Summary) -> bool:
    return s.status in retention.FINISHED


def due_now(state: State, options: RetentionOptions, now_ms: int, limit: int) -> list[str]:
    """Up to `limit` task ids due now, newest first (reads the listing a page at a time;
    for tests and the sweep)."""
    out: list[str] = []
    before: str | None = None
    while len(out) < limit:
        rows, before = state.list_summaries(_finished, before, limit=PAGE)
        out += retention.due(
            options.rules,
            rows,
            now_ms,
            held=state.holds,
            counted_from=options.counted_from,
            limit=limit - len(out),
            refused=state.purge_refused,
        )
        if before is None:
            break
    return out


def _fitted(task_ids: list[str], payload_max: int) -> list[list[str]]:
    """`task_ids` in runs whose TASK_PURGED payload stays under `payload_max` bytes (the
    log refuses a bigger one): a task id costs its length and 3 bytes of JSON."""
    room = max(1, payload_max - 64)
    out: list[list[str]] = [[]]
    used = 0
    for t in task_ids:
        cost = len(t.encode()) + 3
        if out[-1] and used + cost > room:
            out.append([])
            used = 0
        out[-1].append(t)
        used += cost
    return out


class RetentionSweep:
    def __init__(self, host: Host, options: RetentionOptions) -> None:
        self.host = host
        self.options = options
        self._task: asyncio.Task[None] | None = None
        self.purged = 0  # by this node, since it started

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="apollo11-retention")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    async def _run(self) -> None:
        h = self.host
        # Paced by real time, decided by the engine's clock: a fake clock's sleep moves
        # that clock, and a sweep loop on it would race time forward.
        while h.leading:
            await asyncio.sleep(self.options.interval_s)
            try:
                sentence = await self.sweep()
                if sentence:
                    log.info("%s", sentence)
            except asyncio.CancelledError:
                raise
            except NotLeaderError:
                continue  # draining for a switchover or a shutdown: not this node's now
            except Exception as e:  # the next sweep tries again; nothing half written
                log.warning("retention sweep failed (will try again): %s", e)

    async def sweep(self) -> str:
        """Purge what is due now; the sentence says what was done ("" for nothing)."""
        h = self.host
        h.check_leading()
        state = h.store.state
        total = 0
        opts = self.options
        last: list[str] = []
        wrote = False  # a TASK_PURGED, which forgets expired event keys too
        while opts.rules:
            now = h.clock.now_ms()
            batch = due_now(state, opts, now, BATCH)
            if not batch or batch == last:  # nothing, or a purge the log refused
                break
            last = batch
            for part in _fitted(batch, h.store.log.config.payload_max_bytes):
                total += await self._purge(part)
                wrote = True
            await asyncio.sleep(0)
        forgot = await self._forget()
        wrote = wrote or forgot > 0
        heap = state.event_key_heap
        expired = bool(heap) and heap[0][0] <= h.clock.now_ms()
        if not wrote and expired:
            await self._purge([])  # event keys past their TTL forgotten at this point
        said = [f"purged {total} tasks past their retention ({opts.rules.text()})"] if total else []
        if forgot:
            said.append(f"forgot the carried-out redactions of {forgot} purged tasks")
        if not said and expired:
            said.append("forgot event idempotency keys past their TTL")
        return "; ".join(said)

    async def _forget(self) -> int:
        """Write the purged redacted tasks whose records are rewritten here and in the
        bucket (retention.forgettable) as a TASK_PURGED's "forget": the state stops
        remembering them, on every node alike. How many it forgot."""
        h = self.host
        state = h.store.state
        names = retention.forgettable(
            state.redacted,
            lambda t: state.peek(t) is not None,
            h.store.redaction_settled,
            limit=BATCH,
        )
        done = 0
        for part in _fitted(names, h.store.log.config.payload_max_bytes):
            if part:
                await self._purge([], forget=part)
                done += sum(t not in state.redacted for t in part)
        return done

    async def _purge(self, task_ids: list[str], *, forget: list[str] | None = None) -> int:
        """Write one TASK_PURGED; how many of `task_ids` it purged (the fold refuses one
        a hold or a change reached first: only the purged are counted). `forget`: the
        purged redacted tasks the state may stop remembering (`_forget`)."""
        h = self.host
        h.check_leading()
        payload: dict[str, Any] = {"tasks": task_ids, "by": "retention"}
        if forget:
            payload["forget"] = forget
        event = await h.store.log.append(EventType.TASK_PURGED, "", payload=payload)
        await h.wait_commit(event.event_id)
        purged = h.store.state.purged
        done = sum(purged.get(t) == event.event_id for t in task_ids)
        self.purged += done
        metrics.RETENTION_PURGED.inc(done)
        return done

    # ------------------------------------------------------------- holds

    async def hold(self, task_id: str, *, operator: str, reason: str, held: bool) -> Event:
        """Set (`held`) or release a task's legal hold: a TASK_HELD naming `operator`."""
        h = self.host
        h.check_leading()
        state = h.store.state
        if state.peek(task_id) is None:
            raise NotFoundError(state.not_found(task_id))
        if held and not reason.strip():
            raise InvalidArgumentError("reason is required to hold a task (why it is kept)")
        if len(reason) > MAX_REASON:
            raise InvalidArgumentError(f"reason is {len(reason)} characters; at most {MAX_REASON}")
        if held == (task_id in state.holds):
            what = "is held already" if held else "is not held"
            raise FailedPreconditionError(f"task {task_id!r} {what}")
        payload = {"held": held, "by": operator, "reason": reason}
        event = await h.store.log.append(EventType.TASK_HELD, task_id, payload=payload)
        await h.wait_commit(event.event_id)
        # A TASK_PURGED the sweep had decided on may be ahead of this one in the log:
        # the fold then finds no task to hold, and an acknowledged hold of a purged
        # task would be a lie to whoever relies on it.
        now = h.store.state
        if held and task_id not in now.holds:
            raise NotFoundError(now.not_found(task_id))
        return event
