"""`apollo11 bench durable`: what durable tasks cost while they wait, and how fast
they wake (issue 18).

* Sleeping tasks: a node holding N tasks that sleep (their log written as the
  engine writes it: submitted, main started, WAIT), snapshotted. A fresh process
  opens the store and starts the engine, which decides every task and arms its
  wake-up: the time that takes is the recovery time, and the resident memory
  it adds over an empty node, divided by N, the bytes per waiting task.
* Timers due together: 10,000 sleeping tasks whose wake-ups fall in the same
  millisecond. Timer lateness is when the engine's heap fired each one, minus
  its due time; resume lateness is when the woken main's sleep was recorded as
  over (its CHECKPOINT), minus the due time: that one includes running 10,000
  mains in the engine's slots.
* Replay: a main with 1,000 recorded `ctx.step`s replayed to its end against an
  in-memory journal (what a woken task pays before it runs anything new).
* Event to wake: tasks waiting for an event each; events sent one at a time;
  from the EVENT's time in the log to the CHECKPOINT that resolves the wait.
"""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from apollo11.scheduler.durable import DurableContext, DurableWorkflow, Idempotent, input_hash
from apollo11.scheduler.engine import Engine
from apollo11.scheduler.log import Draft, EventType, FsyncPolicy, LogConfig
from apollo11.scheduler.state import Store, StoreConfig
from apollo11.scheduler.tools.bench.log_bench import _in_child
from apollo11.scheduler.workflow import Registry, StepContext

NAP_S = 3600.0
REPLAY_CHECKPOINTS = 1000

nap = DurableWorkflow("bench-nap", version=1)


@nap.main
async def _nap(ctx: DurableContext, _: Any) -> str:
    await ctx.sleep(NAP_S)
    return "rested"


hark = DurableWorkflow("bench-hark", version=1)


@hark.main
async def _hark(ctx: DurableContext, key: str) -> Any:
    return await ctx.wait_for_event(key)


def _same(x: int) -> int:
    return x


long_flow = DurableWorkflow("bench-long", version=1)


@long_flow.main
async def _long(ctx: DurableContext, n: int) -> int:
    total = 0
    for i in range(n):
        total += await ctx.step(f"s{i % 10}", _same, i, idempotency=Idempotent())
    return total


def _registry() -> Registry:
    reg = Registry()
    for wf in (nap, hark, long_flow):
        reg.register(wf)
    return reg


def _config(fsync: FsyncPolicy = FsyncPolicy.ALWAYS) -> StoreConfig:
    return StoreConfig(log=LogConfig(fsync=fsync))


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _pct(values: Sequence[float], p: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


# ------------------------------------------------------------------ histories


async def _write_sleepers(root: str, n: int, until_ms: int) -> None:
    """n tasks of `nap`, each as the engine leaves it: submitted, main started, WAIT."""
    store = Store.open(root, config=_config(FsyncPolicy.UNSAFE_NEVER), instance_id="bench")
    store.log.term = store.log.last_term + 1
    await store.log.append(EventType.TERM_STARTED, "", payload={"node": "bench"})
    digest = input_hash({"seconds": NAP_S})
    wait = {"seq": 0, "kind": "sleep", "name": "sleep", "input_hash": digest, "until_ms": until_ms}
    submitted = {"workflow": nap.name, "version": 1, "input": None, "steps": {"main": []}}
    for start in range(0, n, 2000):
        drafts: list[Draft] = []
        for i in range(start, min(n, start + 2000)):
            task_id = f"{i:012x}-{0:010x}"
            drafts.append(Draft(EventType.TASK_SUBMITTED, task_id, payload=submitted))
            drafts.append(Draft(EventType.STEP_STARTED, task_id, "main", None, 1))
            drafts.append(Draft(EventType.WAIT, task_id, "main", wait, 1))
        await store.log.append_many(drafts)
        await store.wait_snapshot()
    store.snapshot_now()
    await store.wait_snapshot()
    await store.close()


async def _open_node(root: str, expect: int) -> tuple[Store, Engine, float]:
    """Open a node's store and start its engine: until every sleeper's wake-up is armed."""
    t0 = time.perf_counter()
    store = Store.open(root, config=_config(), instance_id="bench")
    store.log.term = store.log.last_term + 1
    await store.log.append(EventType.TERM_STARTED, "", payload={"node": "bench"})
    engine = Engine(store, _registry(), node_id="bench", concurrency=4096)
    await engine.start()
    while len(engine._timers) < expect:  # noqa: ASYNC110 - polling a count, in a bench
        await asyncio.sleep(0.001)
    return store, engine, time.perf_counter() - t0


# ------------------------------------------------------------------ sections


def _section_memory(root: str, n: int, from_log: bool = False) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        if n:
            far = int(time.time() * 1000) + 30 * 24 * 3600 * 1000
            await _write_sleepers(root, n, far)
        if from_log:  # no snapshot: the state is replayed from the log, event by event
            shutil.rmtree(os.path.join(root, "snapshots"), ignore_errors=True)
        gc.collect()
        before = _rss()
        store, engine, seconds = await _open_node(root, n)
        gc.collect()
        after = _rss()
        waiting = sum(1 for t in store.state.tasks.values() if t.status.value == "WAITING")
        await engine.stop()
        await store.close()
        return {"tasks": n, "waiting": waiting, "rss_delta": after - before, "recovery_s": seconds}

    return asyncio.run(go())


def _section_firing(root: str, n: int, lead_s: float) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        due = int((time.time() + lead_s) * 1000)  # written, then opened, well before it
        await _write_sleepers(root, n, due)
        store, engine, _ = await _open_node(root, n)
        if time.time() * 1000 >= due:
            raise RuntimeError(f"opening the node took longer than {lead_s} s: raise the lead")
        fired: list[float] = []
        fire = engine._timers._fire

        def timed(keys: list[Any]) -> None:
            now = time.time() * 1000
            fired.extend(now - due for _ in keys)
            fire(keys)

        engine._timers._fire = timed
        # the node is up with every timer armed: move the deadline near, as a clock would
        wait_s = max(0.0, (due - time.time() * 1000) / 1000)
        t0 = time.perf_counter()
        await asyncio.sleep(0)
        ids = list(store.state.tasks)
        async with asyncio.timeout(wait_s + 300):
            await asyncio.gather(*(engine.wait(t) for t in ids))
        total = time.perf_counter() - t0
        resumed = [
            float(e.timestamp - due)
            for e in store.log.read()
            if e.event_type is EventType.CHECKPOINT and e.payload.get("kind") == "sleep"
        ]
        await engine.stop()
        await store.close()
        return {
            "tasks": n,
            "timer_lateness_ms": {"p50": _pct(fired, 50), "p99": _pct(fired, 99)},
            "resume_lateness_ms": {"p50": _pct(resumed, 50), "p99": _pct(resumed, 99)},
            "all_done_after_due_s": round(total - wait_s, 3),
            "fired": len(fired),
        }

    return asyncio.run(go())


class _MemJournal:
    """A recorded history in memory: what a woken main replays against."""

    def __init__(self, checkpoints: list[dict[str, Any]]) -> None:
        self.checkpoints: list[dict[str, Any]] = checkpoints
        self.wait: Mapping[str, Any] | None = None
        self.first_event_id = 1
        self.recorded: list[Mapping[str, Any]] = []

    async def resolve(self, wait: Mapping[str, Any], now_ms: int) -> Mapping[str, Any] | None:
        return None

    def plan_child(self, *args: Any) -> str:
        raise AssertionError("no spawns here")

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def record(
        self, checkpoints: Sequence[Mapping[str, Any]], wait: Mapping[str, Any] | None = None
    ) -> None:
        self.recorded.extend(checkpoints)


def _section_replay(n: int, rounds: int) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        main = long_flow.steps["main"].fn
        first = _MemJournal([])
        ctx = _step_ctx(first, n)
        expected = await main(ctx)
        history = [dict(c) for c in first.recorded]
        times = []
        for _ in range(rounds):
            j = _MemJournal(history)
            t0 = time.perf_counter()
            got = await main(_step_ctx(j, n))
            times.append(time.perf_counter() - t0)
            assert got == expected and not j.recorded, "a replay ran something again"
        return {
            "checkpoints": len(history),
            "ms": {"median": statistics.median(times) * 1000, "max": max(times) * 1000},
        }

    return asyncio.run(go())


def _step_ctx(journal: _MemJournal, n: int) -> StepContext:
    return StepContext(
        task_id="bench",
        step="main",
        attempt=1,
        input=n,
        results={},
        node_id="bench",
        workflow=long_flow.name,
        version=1,
        journal=journal,
    )


def _section_events(root: str, n: int, spacing_s: float) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        store = Store.open(root, config=_config(), instance_id="bench")
        store.log.term = store.log.last_term + 1
        await store.log.append(EventType.TERM_STARTED, "", payload={"node": "bench"})
        engine = Engine(store, _registry(), node_id="bench", concurrency=4096)
        await engine.start()
        subs = [await engine.submit(hark.name, f"e:{i}") for i in range(n)]
        async with asyncio.timeout(120):
            while any(store.state.tasks[s.task_id].status.value != "WAITING" for s in subs):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        sent: dict[str, int] = {}
        for i in range(n):
            ev = await engine.send_event(f"e:{i}", {"i": i})
            sent[f"e:{i}"] = ev.event_id
            await asyncio.sleep(spacing_s)
        async with asyncio.timeout(120):
            await asyncio.gather(*(engine.wait(s.task_id) for s in subs))
        times = {
            e.event_id: e.timestamp for e in store.log.read() if e.event_type is EventType.EVENT
        }
        lat = [
            float(e.timestamp - times[int(e.payload["event_id"])])
            for e in store.log.read()
            if e.event_type is EventType.CHECKPOINT and e.payload.get("kind") == "event"
        ]
        await engine.stop()
        await store.close()
        return {"tasks": n, "ms": {"p50": _pct(lat, 50), "p99": _pct(lat, 99)}}

    return asyncio.run(go())


# ------------------------------------------------------------------ the run


def run(quick: bool, workdir: str | None, progress: Callable[[str], None]) -> dict[str, Any]:
    sleepers = 20_000 if quick else 100_000
    firing = 2_000 if quick else 10_000
    events = 200 if quick else 1_000
    base = tempfile.mkdtemp(prefix="apollo11-bench-", dir=workdir or os.getcwd())
    try:
        progress("an empty node: opened and started (the baseline)")
        empty = _in_child(_section_memory, os.path.join(base, "empty"), 0)
        progress(f"a node holding {sleepers:,} sleeping tasks: opened and started")
        full = _in_child(_section_memory, os.path.join(base, "sleepers"), sleepers)
        progress(f"the same {sleepers:,}, replayed from the log (no snapshot)")
        replayed = _in_child(_section_memory, os.path.join(base, "replayed"), sleepers, True)
        progress(f"{firing:,} timers due in the same millisecond")
        fire = _in_child(_section_firing, os.path.join(base, "firing"), firing, 15.0)
        progress(f"replay of a main with {REPLAY_CHECKPOINTS:,} checkpoints")
        replay = _in_child(_section_replay, REPLAY_CHECKPOINTS, 5 if quick else 20)
        progress(f"{events:,} events, each waking one waiting task")
        ev = _in_child(_section_events, os.path.join(base, "events"), events, 0.005)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    per_task = (full["rss_delta"] - empty["rss_delta"]) / max(1, sleepers)
    return {
        "quick": quick,
        "sleeping_tasks": sleepers,
        "bytes_per_waiting_task": round(per_task),
        "bytes_per_waiting_task_from_log": round(
            (replayed["rss_delta"] - empty["rss_delta"]) / max(1, sleepers)
        ),
        "recovery_s_from_log": round(replayed["recovery_s"], 3),
        "recovery_s": round(full["recovery_s"], 3),
        "recovery_s_empty": round(empty["recovery_s"], 3),
        "waiting_after_recovery": full["waiting"],
        "timers_due_together": firing,
        "timer_lateness_ms": fire["timer_lateness_ms"],
        "resume_lateness_ms": fire["resume_lateness_ms"],
        "all_resumed_after_due_s": fire["all_done_after_due_s"],
        "replay_checkpoints": replay["checkpoints"],
        "replay_ms": replay["ms"],
        "event_to_wake_ms": ev["ms"],
        "event_tasks": events,
    }


def summary_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    tl, rl = r["timer_lateness_ms"], r["resume_lateness_ms"]
    return [
        (
            f"node RSS per waiting task ({r['sleeping_tasks']:,} sleeping): from a snapshot "
            f"/ replayed from the log",
            f"{r['bytes_per_waiting_task']:,} / {r['bytes_per_waiting_task_from_log']:,} bytes",
        ),
        (
            f"recovery, open + start holding {r['sleeping_tasks']:,}: snapshot / log (empty)",
            f"{r['recovery_s']} / {r['recovery_s_from_log']} s ({r['recovery_s_empty']} s)",
        ),
        (
            f"{r['timers_due_together']:,} timers due together: timer lateness p50 / p99",
            f"{tl['p50']:.1f} / {tl['p99']:.1f} ms",
        ),
        ("  main resumed (sleep recorded over) p50 / p99", f"{rl['p50']:.0f} / {rl['p99']:.0f} ms"),
        (
            f"replay of {r['replay_checkpoints']:,} checkpoints: median / max",
            f"{r['replay_ms']['median']:.1f} / {r['replay_ms']['max']:.1f} ms",
        ),
        (
            f"event to wake ({r['event_tasks']:,} waits): p50 / p99",
            f"{r['event_to_wake_ms']['p50']:.0f} / {r['event_to_wake_ms']['p99']:.0f} ms",
        ),
    ]
