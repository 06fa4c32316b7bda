"""Flow control on the primary: which starts may happen now, and the order of those
that wait (docs/flow-control.md).

The decision is pure (`scheduler/flow/admit.py`) over what this module gathers for one
start: each limit that applies with its effective max (an operator's LIMIT, else the
declaration) and its occupancy, each rate's arrival time, a debounce's not-before.

Occupancy is the fold's holders (state/occupancy.py) united with the starts this
engine has begun and not yet seen folded: both are sets of (task, step), so an
attempt counts while either says it runs, never twice, and nothing here is a counter
a crash could leave wrong (a new primary begins with none of its own: the log's
holders are the truth). A rate's arrival time is likewise the fold's, or the one
this engine wrote on a STARTED not yet folded.

A start that must wait is *held*: behind a full key it joins that key's queue
(`FairQueue`: priority with aging, fairness values in weighted turns) and is released,
in that order, as holders end or the limit rises; behind a debounce it waits for a
timer. A task arriving at a key that has a queue joins it even when a slot looks
free: the released ones are on their way to it.

Behind a rate, one task per key value waits for the timer (the key's *front*) and
the others queue behind it in the same order; when the front starts (or goes to wait
for something else) the next is released to take its place. Each start costs a
decision or two, where a timer for every waiting task woke them all at each start
(a backlog of 2,000 behind 200 starts a second took a whole core).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from apollo11.scheduler import metrics
from apollo11.scheduler.flow import (
    DEFAULT_PRIORITY,
    Admit,
    Concurrency,
    FairQueue,
    Need,
    NotYet,
    Rate,
    RateNeed,
    SlotNeed,
    admit,
    format_ms,
    limit_name,
)
from apollo11.scheduler.log import Event, EventType
from apollo11.scheduler.state import BUSY, State, TaskState, TaskStatus
from apollo11.scheduler.workflow import Step, Workflow

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (limit id, key value)
Holder = tuple[str, str]  # (task id, step); "" for the task itself

_RUNNING = TaskStatus.RUNNING
_ENDS = frozenset(
    {
        EventType.STEP_SUCCEEDED,
        EventType.STEP_FAILED,
        EventType.STEP_COMPENSATED,
        EventType.TASK_CANCELLED,
        EventType.MANUAL_OVERRIDE,
        EventType.WAIT,
    }
)


class Host(Protocol):
    """What the gate needs of the engine."""

    @property
    def state(self) -> State: ...

    def now_ms(self) -> int:
        """The engine's clock."""

    def release(self, task_ids: Iterable[str]) -> None:
        """Decide these tasks first, at the next pass."""

    def wake_at(self, task_id: str, at_s: float) -> None:
        """Decide the task again at `at_s` (the engine's clock)."""

    def runs(self, task_id: str) -> bool:
        """Whether this engine runs anything of the task now."""

    def declared(self) -> Mapping[str, Concurrency | Rate]:
        """Every limit the loaded workflows declare, by id (the newest version's)."""


# apollo11_flow_held_total, by why a start waits (one increment per hold, no lookup)
_HELD = {reason: metrics.FLOW_HELD.labels(reason) for reason in metrics.FLOW_HOLD_REASONS}


@dataclass(slots=True)
class _Held:
    key: Key | None  # a concurrency key's, or a rate's (paced); None: behind a timer
    reason: str
    kind: str = "concurrency"  # FLOW_HOLD_REASONS: what the metric counts it as
    paced: bool = False  # behind a rate: its key's front, or in the queue behind it


class FlowGate:
    def __init__(self, host: Host) -> None:
        self._host = host
        self._queues: dict[Key, FairQueue[str]] = {}
        self._held: dict[str, _Held] = {}  # task id -> why it waits
        # released from a key's queue, on their way to be decided: they, not newcomers,
        # take the slots that freed (cleared after each pass)
        self._released: dict[Key, set[str]] = {}
        # the starts this engine began: holder -> the keys it holds; and per key
        self._own_keys: dict[Holder, list[Key]] = {}
        self._own: dict[Key, set[Holder]] = {}
        self._tats: dict[Key, float] = {}  # arrival times written, maybe not yet folded
        self._dirty: set[Key] = set()  # keys whose holders fell or whose max rose
        # limit id -> its declaration, from every workflow version a start was checked for
        self._declared: dict[str, Any] = {}
        self._seen: set[tuple[str, int]] = set()
        self._frozen: set[str] = set()  # tasks whose DEBOUNCED is being written
        # behind a rate: per key, the task that waits for the timer, and those behind it
        self._fronts: dict[Key, str] = {}
        self._front_of: dict[str, Key] = {}
        self._paced: dict[Key, FairQueue[str]] = {}

    # ------------------------------------------------------------ admission

    def check(
        self, task: TaskState, wf: Workflow, spec: Step, now_s: float
    ) -> Admit | NotYet | None:
        """May `spec`'s attempt of `task` start now? None: no flow control applies."""
        f = task.flow
        if f is None:
            return None
        tid = task.task_id
        self._learn(wf)
        if tid in self._frozen:  # a newer input is being written for it: not before that
            return NotYet(
                "debouncing: a newer input is being recorded", "", "", int(now_s * 1000) + 20
            )
        holding = task.busy > 0 or task.status is _RUNNING or self._host.runs(tid)
        step_keys = (f.get("steps") or {}).get(spec.name)
        if not step_keys and (holding or not (f.get("hold") or f.get("rate"))):
            # Nothing to count (a task holds its workflow's keys already; rates apply to
            # its first start) and nothing to record: most starts of a limited workflow.
            not_before = f.get("not_before_ms")
            if not_before is None or now_s * 1000 >= not_before:
                self._held.pop(tid, None)
                return None
        limits: list[SlotNeed] = []
        queued: Key | None = None
        wanted = [] if holding else list((f.get("hold") or {}).items())
        wanted += list((step_keys or {}).items())
        for lid, value in wanted:
            key = (lid, value)
            limits.append(SlotNeed(lid, value, self.max_of(lid), self.count(key)))
            if queued is None and self._must_wait(key, tid):
                queued = key
        rates: list[RateNeed] = []
        paced: Key | None = None
        if not holding and not task.touched:
            for rid, value in (f.get("rate") or {}).items():
                limit, per_ms, burst = self.rate_of(rid)
                rates.append(RateNeed(rid, value, limit, per_ms, burst, self._tat((rid, value))))
                if paced is None and self._behind((rid, value), tid):
                    paced = (rid, value)
        now_ms = int(now_s * 1000)
        need = Need(tuple(limits), tuple(rates), f.get("not_before_ms"))
        decision = admit(need, now_ms)
        front = self._front_of.get(tid)
        if front is not None and isinstance(decision, Admit) and front[0] in decision.tats:
            decision = self._on_time(decision, front, now_ms)
        if isinstance(decision, Admit) and queued is not None:
            # a slot looks free, but the released ones are on their way to it
            lid, value = queued
            return NotYet(
                f"{limit_name(lid)}={value} has {len(self._queues.get(queued) or ())} waiting",
                lid,
                value,
                None,
            )
        if paced is not None and (
            isinstance(decision, Admit) or decision.limit_id in (f.get("rate") or {})
        ):
            # another waits for this rate's next start: behind it, not beside it
            rid, value = paced
            return NotYet(self._rate_reason(rid, value), rid, value, None)
        return decision

    def hold(self, task: TaskState, h: NotYet, now_s: float) -> None:
        """Park a held start: in its key's queue, or behind a timer."""
        tid = task.task_id
        key = (h.limit_id, h.value)
        rated = h.limit_id in ((task.flow or {}).get("rate") or {})
        kind = "rate" if rated else "concurrency" if h.until_ms is None else "debounce"
        was = self._held.get(tid)
        if was is None or was.kind != kind:
            _HELD[kind].inc()
        if tid in self._front_of and not (rated and self._front_of[tid] == key):
            self._step_aside(tid)  # it waits for something else now
        if rated:
            self._held[tid] = _Held(key, h.reason, kind, paced=True)
            if h.until_ms is not None and self._fronts.get(key, tid) == tid:
                self._fronts[key] = tid
                self._front_of[tid] = key
                self._host.wake_at(tid, h.until_ms / 1000)
                return
            self._push(self._paced, key, task, now_s)
            if key not in self._fronts:
                self._promote(key)
            return
        if h.until_ms is not None:
            self._held[tid] = _Held(None, h.reason, kind)
            self._host.wake_at(tid, h.until_ms / 1000)
            return
        self._held[tid] = _Held(key, h.reason, kind)
        self._push(self._queues, key, task, now_s)

    def _push(
        self, queues: dict[Key, FairQueue[str]], key: Key, task: TaskState, now_s: float
    ) -> None:
        q = queues.get(key)
        if q is None:
            q = queues[key] = FairQueue()
            if self._host.state.occupancy.weights:
                q.set_weights(self._host.state.occupancy.weights)
        if task.task_id not in q:
            f = task.flow or {}
            q.push(
                task.task_id,
                priority=int(f.get("priority", DEFAULT_PRIORITY)),
                fair=str(f.get("fair", "")),
                at_ms=int(now_s * 1000),
            )

    def _behind(self, key: Key, tid: str) -> bool:
        """Another task is this rate key's front, or waits in its queue."""
        front = self._fronts.get(key)
        return front != tid if front is not None else bool(self._paced.get(key))

    def _step_aside(self, tid: str) -> None:
        """The front of a rate key starts, or waits for something else: the next one
        takes its place."""
        key = self._front_of.pop(tid, None)
        if key is not None and self._fronts.get(key) == tid:
            del self._fronts[key]
            self._promote(key)

    def _on_time(self, a: Admit, key: Key, now_ms: int) -> Admit:
        """A front that starts less than an interval after its time counts as started at
        its time. It waited for that time; the delay is the engine's (a timer rounded up
        to the millisecond, a turn of the loop, a pass that ran long), and GCRA's
        `tat = max(tat, now) + T` would take it from the key at every start of a backlog
        (4-5 % of a 200/s rate, bench flow). Over any window, at most one start more
        than the rate's own bound (the interval after a late one may be short)."""
        rid = key[0]
        old = self._tat(key)
        if old is None or now_ms <= old:
            return a  # on time: GCRA kept the schedule
        interval = a.tats[rid] - now_ms  # late: GCRA gave now + T
        if now_ms - old > interval:
            return a  # a stall longer than an interval: GCRA's rule, no burst after it
        kept = old + interval
        return Admit({**a.tats, rid: int(kept) if float(kept).is_integer() else kept})

    def _promote(self, key: Key) -> None:
        """The first of `key`'s queue becomes its front, decided at the next pass (and
        held there until the rate admits it)."""
        q = self._paced.get(key)
        if q is None:
            return
        tid = q.pop(self._host.now_ms())
        if not len(q):
            del self._paced[key]
        if tid is not None:
            self._fronts[key] = tid
            self._front_of[tid] = key
            self._host.release([tid])

    def _rate_reason(self, rid: str, value: str) -> str:
        limit, per_ms, burst = self.rate_of(rid)
        more = f", burst {burst}" if burst > 1 else ""
        return f"{limit_name(rid)}={value} is rate limited ({limit} per {format_ms(per_ms)}{more})"

    def began(self, task: TaskState, spec: Step, a: Admit) -> None:
        """`spec`'s attempt of `task` was admitted and its STARTED drafted."""
        tid = task.task_id
        self._held.pop(tid, None)
        if tid in self._front_of:
            self._step_aside(tid)
        f = task.flow or {}
        keys: list[Key] = [
            (lid, v) for lid, v in ((f.get("steps") or {}).get(spec.name) or {}).items()
        ]
        if keys:
            self._own_keys[(tid, spec.name)] = keys
            for k in keys:
                self._own.setdefault(k, set()).add((tid, spec.name))
        hold = f.get("hold")
        if hold and (tid, "") not in self._own_keys:
            tkeys = [(lid, v) for lid, v in hold.items()]
            self._own_keys[(tid, "")] = tkeys
            for k in tkeys:
                self._own.setdefault(k, set()).add((tid, ""))
        for rid, tat in a.tats.items():
            value = (f.get("rate") or {}).get(rid)
            if value is not None:
                self._tats[(rid, value)] = tat

    def ended(self, task_id: str, step: str) -> None:
        """The engine stopped running `step` of the task (its runner's end)."""
        if not self._own_keys:  # it began nothing under a limit (no flow control here)
            return
        self._drop_own((task_id, step))
        if not self._host.runs(task_id):
            self._drop_own((task_id, ""))

    def _drop_own(self, holder: Holder) -> None:
        keys = self._own_keys.pop(holder, None)
        for k in keys or ():
            own = self._own.get(k)
            if own is not None:
                own.discard(holder)
                if not own:
                    del self._own[k]
            self._dirty.add(k)

    # ------------------------------------------------------------ occupancy

    def count(self, key: Key) -> int:
        folded = self._host.state.occupancy.of(*key)
        own = self._own.get(key)
        if not own:
            return len(folded)
        return len(folded) + sum(1 for h in own if h not in folded)

    def _tat(self, key: Key) -> float | None:
        folded = self._host.state.occupancy.tat(*key)
        mine = self._tats.get(key)
        if mine is None:
            return folded
        if folded is not None and folded >= mine:
            del self._tats[key]  # the fold caught up with what this engine wrote
            return folded
        return mine

    def freeze(self, task_id: str, on: bool) -> None:
        """Hold back the start of a task whose DEBOUNCED is being written."""
        if on:
            self._frozen.add(task_id)
        else:
            self._frozen.discard(task_id)

    def max_for(self, wf: Workflow, lid: str) -> int:
        """The effective max of one of `wf`'s limits (at submit)."""
        self._learn(wf)
        return self.max_of(lid)

    def max_of(self, lid: str) -> int:
        override = self._host.state.occupancy.limits.get(lid)
        if override is not None and "max" in override:
            return int(override["max"])
        d = self._declared.get(lid)
        return int(d.max) if d is not None else 1  # unknown here: one at a time, safely

    def rate_of(self, rid: str) -> tuple[int, int, int]:
        """(limit, per_ms, burst): an operator's override, else the declaration."""
        override = self._host.state.occupancy.limits.get(rid) or {}
        d = self._declared.get(rid)
        limit = int(override.get("limit") or (d.limit if d is not None else 1))
        per_ms = int(override.get("per_ms") or (d.per_ms if d is not None else 1000))
        burst = int(override.get("burst") or (d.burst if d is not None else 1))
        return limit, per_ms, burst

    def _learn(self, wf: Workflow) -> None:
        """Know `wf`'s limits: every loaded workflow's, the newest version's declaration
        where versions share a limit id (the one `Registry.get` returns)."""
        k = (wf.name, wf.version)
        if k not in self._seen:
            self._seen.add(k)
            self._declared = dict(self._host.declared())
            for lid, decl in declared_limits(wf).items():
                self._declared.setdefault(lid, decl)  # a workflow not in the registry

    def _must_wait(self, key: Key, tid: str) -> bool:
        """Others are ahead at this key (or the task waits in its queue already)."""
        released = self._released.get(key)
        if released and tid in released:
            return False  # its turn
        return bool(released) or bool(self._queues.get(key))

    # ------------------------------------------------------------ releasing

    def on_events(self, events: Iterable[Event]) -> None:
        """Folded events: holders that ended free their keys; a LIMIT may raise one."""
        state = self._host.state
        for e in events:
            t = e.event_type
            if t is EventType.LIMIT:
                self._dirty.update(self._queues)  # cheap: only keys with a queue matter
                for q in itertools.chain(self._queues.values(), self._paced.values()):
                    q.set_weights(state.occupancy.weights)
                if self._fronts:  # a rate may have risen: not at the old pace's time
                    self._host.release(list(self._fronts.values()))
                continue
            if t not in _ENDS or not e.task_id:
                continue
            task = state.tasks.get(e.task_id)
            if task is None or task.flow is None:
                continue
            f = task.flow
            for lid, v in ((f.get("steps") or {}).get(e.step_name) or {}).items():
                self._dirty.add((lid, v))
            for lid, v in (f.get("hold") or {}).items():
                self._dirty.add((lid, v))

    def release(self, now_s: float, free: int) -> None:
        """At the start of a pass: from each key that may have room, as many waiting
        tasks as it has room for (and the engine has slots for), in their queue's
        order, to be decided first. Keys left when the slots run out stay dirty."""
        if free <= 0 or not self._dirty:
            return
        dirty, self._dirty = self._dirty, set()
        now_ms = int(now_s * 1000)
        out: list[str] = []
        for key in dirty:
            q = self._queues.get(key)
            if not q:
                continue
            if len(out) >= free:
                self._dirty.add(key)
                continue
            room = min(self.max_of(key[0]) - self.count(key), free - len(out))
            if room <= 0:
                continue
            released = self._released.setdefault(key, set())
            while room > 0:
                tid = q.pop(now_ms)
                if tid is None:
                    break
                released.add(tid)
                out.append(tid)
                room -= 1
            if not len(q):
                del self._queues[key]
        if out:
            self._host.release(out)

    def pass_ended(self) -> None:
        """Every released task was decided: newcomers may take what is still free."""
        for key in self._released:
            self._dirty.add(key)
        self._released.clear()

    def forget(self, task_id: str) -> None:
        """The task finished or was cancelled while it waited."""
        held = self._held.pop(task_id, None)
        if held is not None and held.key is not None:
            q = (self._paced if held.paced else self._queues).get(held.key)
            if q is not None:
                q.discard(task_id)
        if task_id in self._front_of:
            self._step_aside(task_id)

    # ------------------------------------------------------------ telling

    def why(self, task_id: str, now_s: float) -> str:
        """Why a task waits, for operators: `queued: host=db1 is full (2/2), 14 ahead`."""
        held = self._held.get(task_id)
        if held is None:
            return ""
        if held.key is None or self._front_of.get(task_id) == held.key:
            return f"waiting: {held.reason}"
        q = (self._paced if held.paced else self._queues).get(held.key)
        ahead = q.ahead(task_id, int(now_s * 1000)) if q is not None and task_id in q else 0
        if held.paced and held.key in self._fronts:
            ahead += 1  # the front, which waits for the rate's next start
        return f"queued: {held.reason}, {ahead} ahead"

    def queued(self, key: Key) -> int:
        """Tasks waiting at a key: a concurrency key's queue; a rate key's front and
        the queue behind it."""
        q = self._queues.get(key)
        if q is not None:
            return len(q)
        paced = self._paced.get(key)
        return (len(paced) if paced is not None else 0) + (key in self._fronts)

    def waiting_keys(self) -> Iterable[Key]:
        return {**self._queues, **self._paced, **dict.fromkeys(self._fronts)}.keys()

    def own_keys(self) -> Iterable[Key]:
        """The keys the starts this engine began hold (folded or not yet)."""
        return self._own.keys()

    def waited_since(self, key: Key) -> int | None:
        """Since when (ms, this engine's clock) the longest-waiting task in the key's
        queue has waited; None when none waits (the flow metrics read it)."""
        q = self._queues.get(key)
        return q.oldest_ms() if q else None


def declared_limits(wf: Workflow) -> dict[str, Concurrency | Rate]:
    """Every limit `wf` declares, by limit id."""
    return {limit.id: limit.decl for limit in wf.flow.limits}


def running_steps(task: TaskState) -> list[str]:
    return [n for n, s in task.steps.items() if s.status in BUSY]
