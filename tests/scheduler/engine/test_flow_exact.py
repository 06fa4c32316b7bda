"""Flow control's limits are exact (issue 31), proved by a state machine.

Hypothesis drives one engine on a real store, with a fake clock, through random
submissions (four workflows, three key values, limits on workflows and on steps, one
of them global, priorities and fairness values), and through what happens to their
attempts: they succeed, fail (retried, or for good), are lost (their worker dies:
the code stops, the engine records the loss), are cancelled with their task; an
operator changes a limit; the primary fails over (the engine stops, the store is
reopened and a new engine leads on the same log, as a new primary would), the
workers' attempts running on to be adopted, or dying with it.

After every rule, whatever the sequence:

* no key value is held by more than its effective max: counted by the step code
  itself as it begins (each attempt records where it runs, as a worker would), by
  the engine (`engine.flow.count`: the fold's holders with the starts it began), and
  by the fold (`state.occupancy`). An operator who lowers a max stops nothing that
  runs: the count may stay above the new max until enough holders end, never rise;
* the fold's holders and members are those a fresh replay of the whole log derives:
  derived, never drifting;
* no slot leaks: a key value with a queue does not keep a free slot, and at the end,
  every attempt let through, every task finishes and nothing holds anything.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.engine import (
    Attempt,
    Engine,
    Lost,
    NotBegun,
    Outcome,
    Succeeded,
    failure,
)
from apollo11.scheduler.log import EventType
from apollo11.scheduler.state import State, Store, replay
from apollo11.scheduler.workflow import (
    Concurrency,
    Idempotent,
    Registry,
    Retry,
    StepContext,
    StepError,
    Workflow,
)
from tests.scheduler.test_engine import CFG

T0 = 1_700_000_000.0
HOSTS = ("h0", "h1", "h2")
RETRY = Retry(attempts=2, backoff_s=1.0, jitter=0)

Key = tuple[str, str]  # (limit id, key value)
Holder = tuple[str, str]  # (task id, step); "" for the task itself
R = TypeVar("R")


async def _work(ctx: StepContext) -> dict[str, Any]:
    """Every step: record where it runs, wait for the test's verdict, leave."""
    workers = WORKERS[-1]
    code = workers.code[(ctx.task_id, ctx.step)]
    workers.enter(ctx)
    try:
        verdict = await code.verdict
    finally:
        workers.leave(ctx)
    if verdict == "fail":
        raise RuntimeError(f"{ctx.step} failed (attempt {ctx.attempt})")
    if verdict == "final":
        raise StepError(f"{ctx.step} failed for good", final=True)
    return {"ok": ctx.attempt}


# Two steps in turn under a workflow limit: a task holds its slot between them.
pair = Workflow("pair", version=1, concurrency=Concurrency(key="host", max=2), fairness="team")
pair.step(name="a", idempotency=Idempotent(), retry=RETRY)(_work)
pair.step(name="b", after=["a"], idempotency=Idempotent(), retry=RETRY)(_work)

# Two steps at once under a workflow limit (one slot for both), one of them limited too.
mixed = Workflow("mixed", version=1, concurrency=Concurrency(key="host", max=3))
mixed.step(name="prep", idempotency=Idempotent(), retry=RETRY)(_work)
mixed.step(
    name="load", idempotency=Idempotent(), retry=RETRY, concurrency=Concurrency(key="host", max=1)
)(_work)

# One global step limit, shared by two workflows.
_DISK = Concurrency(key="host", max=1, scope="global", name="disk")
g1 = Workflow("g1", version=1)
g1.step(name="io", idempotency=Idempotent(), retry=RETRY, concurrency=_DISK)(_work)
g2 = Workflow("g2", version=1)
g2.step(name="io", idempotency=Idempotent(), retry=RETRY, concurrency=_DISK)(_work)

FLOWS = (pair, mixed, g1, g2)
# workflow -> the limits its attempts hold: (limit id, the step it is on, "" for the task)
LIMITS: dict[str, tuple[tuple[str, str], ...]] = {
    "pair": (("pair/host", ""),),
    "mixed": (("mixed/host", ""), ("mixed.load/host", "load")),
    "g1": (("disk", "io"),),
    "g2": (("disk", "io"),),
}
LIMIT_IDS = sorted({lid for limits in LIMITS.values() for lid, _ in limits})
DECLARED = {"pair/host": 2, "mixed/host": 3, "mixed.load/host": 1, "disk": 1}
KEYS = [(lid, host) for lid in LIMIT_IDS for host in HOSTS]


# ------------------------------------------------------------------ the workers


@dataclass(eq=False)
class _Code:
    """One attempt's code, running on a worker: it outlives the engine that started it."""

    ctx: StepContext
    verdict: asyncio.Future[str]
    task: asyncio.Task[Outcome] | None = None
    outcome: Outcome | None = None
    lost: bool = False
    waiters: list[asyncio.Future[Outcome]] = field(default_factory=list)

    def waiter(self) -> asyncio.Future[Outcome]:
        """What one engine awaits (its own future: cancelling it leaves the code be)."""
        fut: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        if self.outcome is not None:
            fut.set_result(self.outcome)
        else:
            self.waiters.append(fut)
        return fut

    def ended(self, t: asyncio.Task[Outcome]) -> None:
        if t.cancelled():
            self.outcome = Lost("its worker died") if self.lost else Lost("stopped")
        else:
            self.outcome = t.result()
        for fut in self.waiters:
            if not fut.done():
                fut.set_result(self.outcome)
        self.waiters.clear()


class Workers:
    """The workers, shared by every engine of one example: where each attempt's code
    runs (by task and step: one attempt of a step at a time), and what the code saw
    as it began."""

    def __init__(self) -> None:
        self.code: dict[tuple[str, str], _Code] = {}
        self.running: dict[Key, collections.Counter[Holder]] = collections.defaultdict(
            collections.Counter
        )
        # the most that may hold each key value now: its max, or more for a while
        # after an operator lowered it below what held it then
        self.allowance: dict[Key, int] = {k: DECLARED[k[0]] for k in KEYS}
        self.violations: list[str] = []
        self.most: collections.Counter[Key] = collections.Counter()

    def begin(self, attempt: Attempt) -> _Code:
        ctx = attempt.ctx
        key = (ctx.task_id, ctx.step)
        old = self.code.get(key)
        if old is not None and (old.task is None or not old.task.done()):
            self.violations.append(f"{key} attempt {ctx.attempt} began beside {old.ctx.attempt}")
        code = self.code[key] = _Code(ctx, asyncio.get_running_loop().create_future())
        code.task = asyncio.ensure_future(_execute(attempt))
        code.task.add_done_callback(code.ended)
        return code

    def keys(self, ctx: StepContext) -> list[tuple[Key, Holder]]:
        host = str((ctx.input or {})["host"])
        return [
            ((lid, host), (ctx.task_id, step))
            for lid, step in LIMITS[ctx.workflow]
            if step in ("", ctx.step)
        ]

    def enter(self, ctx: StepContext) -> None:
        for key, holder in self.keys(ctx):
            held = self.running[key]
            held[holder] += 1
            n = len(held)
            self.most[key] = max(self.most[key], n)
            allowed = self.allowance[key]
            if n > allowed:
                self.violations.append(
                    f"{ctx.task_id}/{ctx.step} attempt {ctx.attempt} began as the {n}th "
                    f"holder of {key} (at most {allowed}): {sorted(held)}"
                )

    def leave(self, ctx: StepContext) -> None:
        for key, holder in self.keys(ctx):
            held = self.running[key]
            held[holder] -= 1
            if held[holder] <= 0:
                del held[holder]

    def count(self, key: Key) -> int:
        return len(self.running.get(key) or ())

    def undecided(self) -> list[_Code]:
        """The attempts running now that wait for a verdict, in a stable order."""
        return [
            c
            for _, c in sorted(self.code.items())
            if c.task is not None and not c.task.done() and not c.verdict.done()
        ]

    def lose(self, code: _Code) -> None:
        """Its worker died: the code stops, and whoever follows it hears it was lost."""
        code.lost = True
        assert code.task is not None
        code.task.cancel()


async def _execute(attempt: Attempt) -> Outcome:
    try:
        return Succeeded(await attempt.fn(attempt.ctx))
    except asyncio.CancelledError:
        raise
    except Exception as e:
        return failure(e)


WORKERS: list[Workers] = []


class WorkerExecutor:
    """The engine's Executor on `Workers`: attempts run there and are adopted after a
    failover, as `RemoteExecutor` does with real workers."""

    def __init__(self, workers: Workers) -> None:
        self.workers = workers
        self._abandoned: set[tuple[str, str]] = set()

    def place(self, task_id: str, step: str, workflow: str, version: int, labels: Any) -> str:
        return "w1"

    def unplaced(self, workflow: str, version: int, labels: Any) -> str | None:
        return None

    def release(self, task_id: str, step: str) -> None:
        code = self.workers.code.get((task_id, step))
        if code is not None and code.outcome is not None:
            del self.workers.code[(task_id, step)]

    def free_slots(self) -> int:
        return sys.maxsize

    def free_for(self, workflow: str, version: int, labels: Any) -> int:
        return sys.maxsize

    def watch_capacity(self, notify: Callable[[], None]) -> None:
        return None

    def run(self, attempt: Attempt) -> Awaitable[Outcome]:
        if not attempt.may_begin():
            return _now(NotBegun())
        return self.workers.begin(attempt).waiter()

    async def adopt(self, attempt: Attempt, where: str) -> Outcome:
        code = self.workers.code.get((attempt.ctx.task_id, attempt.ctx.step))
        if code is None or code.ctx.attempt != attempt.ctx.attempt:
            return Lost(f"worker {where} did not report it")  # it never began
        return await code.waiter()

    def abandon(self, task_id: str, step: str, reason: str) -> None:
        code = self.workers.code.get((task_id, step))
        if code is not None and code.task is not None:
            self._abandoned.add((task_id, step))
            code.task.cancel()

    def settle(self, task_id: str, step: str) -> Awaitable[None] | None:
        """Until an abandoned attempt's code has stopped (not one left running for the
        next primary to adopt)."""
        if (task_id, step) not in self._abandoned:
            return None
        self._abandoned.discard((task_id, step))
        code = self.workers.code.get((task_id, step))
        if code is None or code.task is None or code.task.done():
            return None
        return asyncio.wait({code.task})  # type: ignore[return-value]


def _now(outcome: Outcome) -> asyncio.Future[Outcome]:
    fut: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
    fut.set_result(outcome)
    return fut


# ------------------------------------------------------------------ the machine


def _holders(state: State) -> dict[str, dict[str, set[Holder]]]:
    return {
        lid: {v: set(h) for v, h in per.items() if h}
        for lid, per in state.occupancy.holders.items()
        if any(per.values())
    }


def _members(state: State) -> dict[str, dict[str, set[str]]]:
    return {
        lid: {v: set(m) for v, m in per.items() if m}
        for lid, per in state.occupancy.members.items()
        if any(per.values())
    }


class FlowMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.root = Path(tempfile.mkdtemp(prefix="apollo11-flow-"))
        self.clock = FakeClock(start=T0)
        self.workers = Workers()
        WORKERS.append(self.workers)
        self.concurrency = 64
        self.engine: Engine | None = None
        self.store: Store | None = None
        self.tasks: list[str] = []
        self.failovers = 0

    # -------------------------------------------------------------- plumbing

    def _run(self, coro: Coroutine[Any, Any, R]) -> R:
        return self.loop.run_until_complete(coro)

    async def _open(self) -> None:
        store = Store.open(self.root, config=CFG, instance_id="n1", clock=self.clock.now_ms)
        registry = Registry()
        for wf in FLOWS:
            registry.register(wf)
        store.log.term = store.log.last_term + 1
        await store.log.append(EventType.TERM_STARTED, "", payload={"node": "n1"})
        engine = Engine(
            store,
            registry,
            node_id="n1",
            clock=self.clock,
            executor=WorkerExecutor(self.workers),  # type: ignore[arg-type]
            concurrency=self.concurrency,
        )
        await engine.start()
        self.store, self.engine = store, engine

    async def _close(self) -> None:
        if self.engine is not None:
            await self.engine.stop()
        if self.store is not None:
            await self.store.close()
        self.engine = self.store = None

    async def _settle(self) -> None:
        """Let the engine and the log go on until nothing moves: nothing being written,
        and no new event for a few turns of the loop (at most a couple of seconds)."""
        assert self.store is not None
        log = self.store.log
        deadline = time.monotonic() + 2
        quiet, last = 0, -1
        while quiet < 8 and time.monotonic() < deadline:
            if log.next_id - 1 > log.durable_id:  # a batch on the I/O thread
                await asyncio.sleep(0.0002)
                quiet = 0
                continue
            await asyncio.sleep(0)
            quiet = quiet + 1 if log.durable_id == last else 0
            last = log.durable_id

    def _act(self, coro: Coroutine[Any, Any, Any]) -> Any:
        async def act() -> Any:
            out = await coro
            await self._settle()
            return out

        return self._run(act())

    @property
    def state(self) -> State:
        assert self.store is not None
        return self.store.state

    def _max(self, lid: str) -> int:
        """The effective max: the operator's, else the declaration."""
        override = self.state.occupancy.limits.get(lid) or {}
        return int(override.get("max", DECLARED[lid]))

    # ---------------------------------------------------------------- rules

    @initialize(concurrency=st.sampled_from([2, 3, 64]))
    def open(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self._run(self._open())

    @rule(
        batch=st.lists(
            st.tuples(
                st.sampled_from(sorted(LIMITS)),
                st.sampled_from(HOSTS),
                st.integers(1, 5),
                st.sampled_from(["red", "blue"]),
            ),
            min_size=1,
            max_size=5,
        )
    )
    def submit(self, batch: list[tuple[str, str, int, str]]) -> None:
        engine = self.engine
        assert engine is not None

        async def submit() -> None:
            for workflow, host, priority, team in batch:
                sub = await engine.submit(workflow, {"host": host, "team": team}, priority=priority)
                self.tasks.append(sub.task_id)

        self._act(submit())

    def _pick(self, i: int) -> _Code | None:
        codes = self.workers.undecided()
        return codes[i % len(codes)] if codes else None

    @rule(i=st.integers(0, 99), verdict=st.sampled_from(["ok", "ok", "fail", "final"]))
    def end_an_attempt(self, i: int, verdict: str) -> None:
        code = self._pick(i)
        if code is not None:
            code.verdict.set_result(verdict)
        self._act(asyncio.sleep(0))

    @rule(i=st.integers(0, 99))
    def lose_an_attempt(self, i: int) -> None:
        code = self._pick(i)
        if code is not None:
            self.workers.lose(code)
        self._act(asyncio.sleep(0))

    @rule(i=st.integers(0, 99))
    def cancel_a_task(self, i: int) -> None:
        assert self.engine is not None
        open_ = [t for t in self.tasks if (s := self.state.peek(t)) and not s.quiescent]
        if not open_:
            return
        task_id = open_[i % len(open_)]
        if self.state.tasks[task_id].cancelled is None:
            self._act(self.engine.cancel_task(task_id, operator="ana", reason="test"))

    @rule(lid=st.sampled_from(LIMIT_IDS), new_max=st.one_of(st.none(), st.integers(1, 3)))
    def set_a_limit(self, lid: str, new_max: int | None) -> None:
        assert self.engine is not None
        engine = self.engine
        new = DECLARED[lid] if new_max is None else new_max
        keys = [k for k in KEYS if k[0] == lid]
        allowance = self.workers.allowance
        for key in keys:  # a raised max may be used as soon as it is folded
            allowance[key] = max(allowance[key], new)
        if new_max is None:
            self._run(engine.limits.set(lid, reset=True, operator="ana"))
        else:
            self._run(engine.limits.set(lid, max=new_max, operator="ana"))
        assert self._max(lid) == new
        # A lowered max stops nothing: what held the key before it was folded may
        # stay until enough of it ends; nothing more may come in.
        for key in keys:
            allowance[key] = max(new, min(allowance[key], engine.flow.count(key)))
        self._act(asyncio.sleep(0))

    @rule(
        workers_survive=st.booleans(),
        ending=st.one_of(st.none(), st.integers(0, 99)),
        turns=st.integers(0, 6),
    )
    def fail_over(self, workers_survive: bool, ending: int | None, turns: int) -> None:
        """The primary dies; a new one leads on the same log. The workers' attempts run
        on (the new primary adopts them) or die with it (it records them lost). It may
        die in the middle of things: `turns` turns of the loop after an attempt ended
        (its outcome being written, the next start drafted or being committed)."""

        async def over() -> None:
            assert self.engine is not None
            code = None if ending is None else self._pick(ending)
            if code is not None:
                code.verdict.set_result("ok")
            for _ in range(turns):
                await asyncio.sleep(0)
            await self.engine.stop()
            if not workers_survive:
                for code in self.workers.undecided():
                    self.workers.lose(code)
                await asyncio.sleep(0)
            await self._close()
            await self._open()

        self.failovers += 1
        self._act(over())

    # ----------------------------------------------------------- invariants

    @invariant()
    def no_attempt_began_beside_too_many(self) -> None:
        assert not self.workers.violations, self.workers.violations

    @invariant()
    def no_key_is_held_past_its_max(self) -> None:
        if self.engine is None:
            return
        for key in KEYS:
            allowed = self.workers.allowance[key]
            counts = {
                "code": self.workers.count(key),
                "engine": self.engine.flow.count(key),
                "fold": self.state.occupancy.count(*key),
                "tasks": self._begun(key),
            }
            assert max(counts.values()) <= allowed, (key, counts, allowed)
            # a count above the max (it was lowered) only falls: the allowance with it
            self.workers.allowance[key] = max(self._max(key[0]), min(allowed, counts["engine"]))

    def _begun(self, key: Key) -> int:
        """A workflow limit's holders by the rule itself, not by the fold's index: its
        tasks of that value that have begun and not finished."""
        lid, value = key
        workflow = lid.split("/")[0]
        if (lid, "") not in LIMITS.get(workflow, ()):
            return 0
        n = 0
        for t in self.state.tasks.values():
            if t.workflow == workflow and t.touched and not t.quiescent:
                n += (t.input or {}).get("host") == value
        return n

    @invariant()
    def the_fold_is_what_a_replay_derives(self) -> None:
        if self.store is None:
            return
        fresh = replay(self.store.log.read())
        assert fresh.last_event_id == self.state.last_event_id
        assert _holders(self.state) == _holders(fresh)
        assert _members(self.state) == _members(fresh)
        assert self.state.occupancy.limits == fresh.occupancy.limits

    @invariant()
    def a_queue_keeps_no_free_slot(self) -> None:
        """A key value with tasks waiting has no room, or the engine no free slot (a
        moment's: until the pass that releases them)."""
        if self.engine is None:
            return
        engine = self.engine

        def stuck() -> list[tuple[Key, int, int]]:
            if engine.running() >= engine.concurrency:
                return []
            return [
                (key, engine.flow.count(key), self._max(key[0]))
                for key in sorted(engine.flow.waiting_keys())
                if engine.flow.queued(key) and engine.flow.count(key) < self._max(key[0])
            ]

        if stuck():
            self._run(self._until(lambda: not stuck(), 5))
        assert not stuck(), stuck()

    async def _until(self, check: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not check() and time.monotonic() < deadline:
            await asyncio.sleep(0.005)

    # ------------------------------------------------------------- the end

    def _drain(self) -> None:
        """Every attempt succeeds from here: every task must finish, and then nothing
        holds anything (a slot leaked shows as a task that never starts)."""

        def unfinished() -> list[str]:
            return [t for t in self.tasks if (s := self.state.peek(t)) and not s.quiescent]

        deadline = time.monotonic() + 20
        while unfinished() and time.monotonic() < deadline:
            for code in self.workers.undecided():
                code.verdict.set_result("ok")
            self._act(asyncio.sleep(0.002))
        left = unfinished()
        assert self.engine is not None
        why = {t: self.engine.flow.why(t, self.clock.now()) for t in left}
        assert not left, f"tasks that never finished: {why}, problems {self.engine.problems}"
        self.the_fold_is_what_a_replay_derives()
        assert _holders(self.state) == {}
        assert _members(self.state) == {}
        assert not any(self.workers.running.values()), dict(self.workers.running)
        for key in KEYS:
            assert self.engine.flow.count(key) == 0, key
            assert self.engine.flow.queued(key) == 0, key

    def teardown(self) -> None:
        try:
            if self.engine is not None:
                self._drain()
                self.no_attempt_began_beside_too_many()
        finally:
            with contextlib.suppress(Exception):
                self._run(self._close())
            for code in self.workers.code.values():
                if code.task is not None:
                    code.task.cancel()
            with contextlib.suppress(Exception):
                self._run(asyncio.sleep(0))
            self.loop.close()
            WORKERS.remove(self.workers)
            shutil.rmtree(self.root, ignore_errors=True)


def test_no_key_value_is_ever_held_past_its_max() -> None:
    """The fast tier's share: a few sequences, each long enough for failovers."""
    run_state_machine_as_test(
        FlowMachine,
        settings=settings(
            max_examples=12,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


@pytest.mark.slow
def test_no_key_value_is_ever_held_past_its_max_explored() -> None:
    """The same machine over many more sequences (`make test`)."""
    run_state_machine_as_test(
        FlowMachine,
        settings=settings(
            max_examples=100,
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
