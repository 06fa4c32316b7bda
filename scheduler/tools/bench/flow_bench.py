"""`apollo11 bench flow`: flow control (docs/flow-control.md) on a real store and
engine, fsync on, in one process per section, each figure beside its baseline.

1. Dispatch at 1,000 submissions a second, each task its own value of a
   `Concurrency(key=..., max=1)` (100,000 values; --quick 10,000), so every start
   passes the limit's check and none waits: TASK_SUBMITTED to the first
   STEP_STARTED, from the log. Baseline: the same workflow without the limit, in
   blocks of ten seconds alternating with the limited one (the VM's speed drifts).
2. Throughput: five-step no-op tasks as fast as they go, the limited workflow's
   tasks/s against the unlimited one's, rounds alternating.
3. One value's single task behind another's backlog: with `fairness=` the engine's
   slots are full of value A's tasks (10,000 queued; --quick 2,000) when one task
   of B is submitted. How many of A's tasks started between B's submission and
   B's start, and how long B waited, against one turnover of the slots. Baseline:
   the same without fairness (first in, first out).
4. Weighted shares: four fairness values weighted 1 : 2 : 3 : 4 by an operator's
   LIMIT, a backlog of each; each value's share of the starts over a window in
   which all four wait, against its weight, and Jain's fairness index.
5. A rate: `Rate(key, limit=R, per="1s")` with a backlog; starts a second on the
   log's clock over a window (30 s; --quick 10 s). Baseline: the same backlog
   unlimited, to show the rate is what binds.

The pure parts (percentiles, shares, Jain's index, a rate over a window) are
functions here, tested in tests/scheduler/tools/test_flow_bench.py.
"""

from __future__ import annotations

import asyncio
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from apollo11.scheduler import gctune
from apollo11.scheduler.engine import Engine, SubmitItem
from apollo11.scheduler.log import EventType, LogConfig
from apollo11.scheduler.state import Store, StoreConfig
from apollo11.scheduler.tools.bench.log_bench import _in_child
from apollo11.scheduler.workflow import (
    Concurrency,
    Idempotent,
    Rate,
    Registry,
    Retry,
    StepContext,
    Workflow,
)

DISPATCH_RATE = 1_000  # submissions a second, section 1
DISPATCH_BLOCK_S = 10  # seconds a block, the limited and the unlimited in turn
DISPATCH_TARGET_MS = 5.0
THROUGHPUT_TARGET = 0.9
STEP_S = 0.02  # sections 3 and 4: a step that takes a while, so the slots stay full
SLOTS = 64  # the engine's slots in sections 3 and 4
WEIGHTS = {"w1": 1.0, "w2": 2.0, "w3": 3.0, "w4": 4.0}
SHARE_TOLERANCE = 0.05
JAIN_TARGET = 0.95
RATE_LIMIT = 200  # starts a second, section 5
RATE_TOLERANCE = 0.02
GIL_SWITCH_S = 0.001  # as a node sets it (scheduler/cli/_node.py): the log's thread

QUICK = {
    "dispatch_tasks": 10_000,
    "dispatch_block_s": 5,
    "throughput_tasks": 1_000,
    "throughput_rounds": 3,
    "backlog": 2_000,
    "weighted_per_weight": 200,
    "rate_window_s": 10,
}
FULL = {
    "dispatch_tasks": 100_000,
    "dispatch_block_s": DISPATCH_BLOCK_S,
    "throughput_tasks": 5_000,
    "throughput_rounds": 5,
    "backlog": 10_000,
    "weighted_per_weight": 1_000,
    "rate_window_s": 30,
}


# ---------------------------------------------------------------- workflows


async def _noop(ctx: StepContext) -> None:
    return None


async def _pause(ctx: StepContext) -> None:
    await asyncio.sleep(STEP_S)


def _one_step(wf: Workflow, fn: Callable[[StepContext], Any]) -> Workflow:
    wf.step(name="s1", idempotency=Idempotent(), retry=Retry(attempts=1))(fn)
    return wf


def _five_steps(wf: Workflow) -> Workflow:
    prev: list[str] = []
    for name in ("s1", "s2", "s3", "s4", "s5"):
        wf.step(name=name, after=prev, idempotency=Idempotent(), retry=Retry(attempts=1))(_noop)
        prev = [name]
    return wf


def _workflows() -> list[Workflow]:
    keyed = Concurrency(key="k", max=1)
    return [
        _one_step(Workflow("plain1", version=1), _noop),
        _one_step(Workflow("keyed1", version=1, concurrency=keyed), _noop),
        _five_steps(Workflow("plain5", version=1)),
        _five_steps(Workflow("keyed5", version=1, concurrency=keyed)),
        _one_step(Workflow("fifo", version=1), _pause),
        _one_step(Workflow("fair", version=1, fairness="tenant"), _pause),
        _one_step(
            Workflow("paced", version=1, rate=Rate(key="tenant", limit=RATE_LIMIT, per="1s")),
            _noop,
        ),
    ]


# ---------------------------------------------------------------- pure figures


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) of sorted values, nearest rank; None when empty."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def latency_summary(latencies_ms: Sequence[float]) -> dict[str, Any]:
    lat = sorted(latencies_ms)
    return {
        "tasks": len(lat),
        "p50_ms": percentile(lat, 50),
        "p99_ms": percentile(lat, 99),
        "max_ms": lat[-1] if lat else None,
    }


def shares(counts: Mapping[str, int]) -> dict[str, float]:
    """Each value's share of the total."""
    total = sum(counts.values())
    return {v: (n / total if total else 0.0) for v, n in counts.items()}


def share_errors(counts: Mapping[str, int], weights: Mapping[str, float]) -> dict[str, float]:
    """Each value's share over the share its weight promises, minus 1 (0: exact)."""
    got = shares({v: counts.get(v, 0) for v in weights})
    total = sum(weights.values())
    return {v: got[v] / (w / total) - 1 for v, w in weights.items()}


def jain(xs: Sequence[float]) -> float:
    """Jain's fairness index: (Σx)² / (n Σx²), 1 when all equal, 1/n when one has all."""
    squares = sum(x * x for x in xs)
    return sum(xs) ** 2 / (len(xs) * squares) if squares else 1.0


def rate_over(timestamps_ms: Sequence[int], skip_s: float, window_s: float) -> dict[str, Any]:
    """Starts a second over a window of the log's clock: the starts from `skip_s` after
    the first to `window_s` later, as intervals between the first and the last of them
    (n starts span n - 1 intervals)."""
    ts = sorted(timestamps_ms)
    if not ts:
        return {"starts": 0, "span_s": 0.0, "per_s": None}
    lo = ts[0] + skip_s * 1000
    hi = lo + window_s * 1000
    inside = [t for t in ts if lo <= t < hi]
    span = (inside[-1] - inside[0]) / 1000 if len(inside) > 1 else 0.0
    return {
        "starts": len(inside),
        "span_s": span,
        "per_s": (len(inside) - 1) / span if span else None,
    }


# ---------------------------------------------------------------- the rig


class _Rig:
    def __init__(self, root: Path, concurrency: int) -> None:
        self.root = root
        self.concurrency = concurrency

    async def __aenter__(self) -> _Rig:
        registry = Registry()
        for wf in _workflows():
            registry.register(wf)
        self.store = Store.open(self.root, config=StoreConfig(log=LogConfig()), instance_id="b1")
        self.store.log.term = self.store.log.last_term + 1
        await self.store.log.append(EventType.TERM_STARTED, "", payload={"node": "b1"})
        self.engine = Engine(self.store, registry, node_id="b1", concurrency=self.concurrency)
        await self.engine.start()
        gctune.settle()  # as a node does once it is up
        sys.setswitchinterval(GIL_SWITCH_S)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.engine.stop()
        await self.store.close()

    def firsts(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """From the log: each task's TASK_SUBMITTED and its first STEP_STARTED events."""
        submitted: dict[str, Any] = {}
        started: dict[str, Any] = {}
        for e in self.store.log.read():
            if e.event_type is EventType.TASK_SUBMITTED:
                submitted[e.task_id] = e
            elif e.event_type is EventType.STEP_STARTED and e.task_id not in started:
                started[e.task_id] = e
        return submitted, started


async def _submit_many(engine: Engine, items: list[SubmitItem], batch: int = 500) -> list[str]:
    ids: list[str] = []
    for i in range(0, len(items), batch):
        ids += [s.task_id for s in await engine.submit_many(items[i : i + batch])]
    return ids


# ---------------------------------------------------------------- 1. dispatch


def _section_dispatch(root: str, n: int, block_s: int) -> dict[str, Any]:
    return asyncio.run(_dispatch(Path(root), n, block_s))


async def _dispatch(root: Path, n: int, block_s: int) -> dict[str, Any]:
    per_block = DISPATCH_RATE * block_s
    blocks = max(1, n // per_block)
    ids: dict[str, list[list[str]]] = {"keyed1": [], "plain1": []}  # by block
    achieved: dict[str, list[float]] = {"keyed1": [], "plain1": []}
    async with _Rig(root, 256) as rig:
        decisions = {"keyed1": 0, "plain1": 0}
        value = 0
        for b in range(blocks):
            for wf in ("plain1", "keyed1") if b % 2 else ("keyed1", "plain1"):
                inputs = [{"k": f"v{value + i}"} for i in range(per_block)]
                value += per_block
                d0 = rig.engine.decisions
                t0 = time.perf_counter()
                ids[wf].append(await _paced(rig.engine, wf, inputs))
                achieved[wf].append(per_block / (time.perf_counter() - t0))
                await asyncio.sleep(0.5)  # the block's last ones dispatched
                decisions[wf] += rig.engine.decisions - d0
        submitted, started = rig.firsts()
        values = len(rig.store.state.occupancy.holders.get("keyed1/k", {}))
    out: dict[str, Any] = {"rate": DISPATCH_RATE, "blocks": blocks, "block_s": block_s}
    for wf, name in (("keyed1", "limited"), ("plain1", "baseline")):
        by_block = [
            [started[t].timestamp - submitted[t].timestamp for t in block if t in started]
            for block in ids[wf]
        ]
        lat = [x for block in by_block for x in block]
        # a block's p99 each: a burst of the machine's noise lands in one block, not all
        block_p99 = [percentile(sorted(block), 99) for block in by_block]
        out[name] = {
            **latency_summary(lat),
            "block_p99_ms": block_p99,
            "median_block_p99_ms": statistics.median(x for x in block_p99 if x is not None),
            "submitted": sum(len(block) for block in ids[wf]),
            "submits_per_s": round(statistics.median(achieved[wf])),
            "decisions_per_task": round(decisions[wf] / max(1, len(lat)), 2),
        }
    out["values"] = out["limited"]["submitted"]
    out["values_still_held"] = values
    return out


async def _paced(engine: Engine, workflow: str, inputs: list[Any]) -> list[str]:
    """DISPATCH_RATE submissions a second, each on its own, paced on the wall clock
    (those due in each millisecond's turn together)."""
    ids: list[str] = []
    pending: set[asyncio.Task[Any]] = set()
    t0 = time.perf_counter()
    i = 0
    while i < len(inputs):
        due = min(len(inputs), int((time.perf_counter() - t0) * DISPATCH_RATE) + 1)
        while i < due:
            t = asyncio.create_task(engine.submit(workflow, inputs[i]))
            pending.add(t)
            t.add_done_callback(pending.discard)
            t.add_done_callback(lambda done: ids.append(done.result().task_id))
            i += 1
        await asyncio.sleep(0.001)
    await asyncio.gather(*pending)
    return ids


# ---------------------------------------------------------------- 2. throughput


def _section_throughput(root: str, n: int, rounds: int) -> dict[str, Any]:
    return asyncio.run(_throughput(Path(root), n, rounds))


async def _throughput(root: Path, n: int, rounds: int) -> dict[str, Any]:
    runs: dict[str, list[float]] = {"plain5": [], "keyed5": []}
    cpu: dict[str, list[float]] = {"plain5": [], "keyed5": []}
    for r in range(rounds):
        for wf in ("keyed5", "plain5") if r % 2 else ("plain5", "keyed5"):
            async with _Rig(root / f"{wf}-{r}", 256) as rig:
                rate, us = await _closed_loop(rig.engine, wf, n, f"r{r}-")
                runs[wf].append(rate)
                cpu[wf].append(us)
    ratios = [k / p for k, p in zip(runs["keyed5"], runs["plain5"], strict=True)]
    cpu_ratios = [k / p for k, p in zip(cpu["keyed5"], cpu["plain5"], strict=True)]
    return {
        "tasks": n,
        "rounds": rounds,
        "baseline_tasks_per_s": [round(x) for x in runs["plain5"]],
        "limited_tasks_per_s": [round(x) for x in runs["keyed5"]],
        "ratios": [round(x, 3) for x in ratios],
        "ratio": round(statistics.median(ratios), 3),
        "baseline_cpu_us_per_task": [round(x) for x in cpu["plain5"]],
        "limited_cpu_us_per_task": [round(x) for x in cpu["keyed5"]],
        "cpu_ratio": round(statistics.median(cpu_ratios), 3),
    }


async def _closed_loop(engine: Engine, wf: str, n: int, prefix: str) -> tuple[float, float]:
    """n five-step tasks from 64 submitters, as fast as they go: tasks a second, and
    the process's CPU a task (µs; steadier than the rate on a shared machine)."""
    ids: list[str] = []

    async def submitter(k: int) -> None:
        for i in range(n // 64):
            ids.append((await engine.submit(wf, {"k": f"{prefix}{k}-{i}"})).task_id)

    t0, c0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(submitter(k) for k in range(64)))
    await asyncio.gather(*(engine.wait(t) for t in ids))
    cpu = time.process_time() - c0
    return len(ids) / (time.perf_counter() - t0), cpu / len(ids) * 1e6


# ---------------------------------------------------------------- 3. one behind many


def _section_behind(root: str, backlog: int) -> dict[str, Any]:
    return asyncio.run(_behind(Path(root), backlog))


async def _behind(root: Path, backlog: int) -> dict[str, Any]:
    out: dict[str, Any] = {"backlog": backlog, "slots": SLOTS, "step_ms": STEP_S * 1000}
    for wf, name in (("fair", "fair"), ("fifo", "baseline")):
        async with _Rig(root / wf, SLOTS) as rig:
            engine = rig.engine
            items = [SubmitItem(wf, {"tenant": "A", "n": i}) for i in range(backlog)]
            await _submit_many(engine, items)
            await asyncio.sleep(0.3)  # steady: every slot taken, turning over
            busy = engine.running()
            b = (await engine.submit(wf, {"tenant": "B"})).task_id
            async with asyncio.timeout(600):
                await engine.wait(b)
            out[name] = {**_behind_figures(rig, b), "slots_taken_at_submit": busy}
    return out


def _behind_figures(rig: _Rig, b: str) -> dict[str, Any]:
    """From the log: A's starts between B's submission and B's start, B's wait, and the
    time one turnover of the slots took then (SLOTS starts of A, up to B's start)."""
    sub_b = started_b = None
    a_starts: list[Any] = []  # (event id, ms) of every first start but B's
    for e in rig.store.log.read():
        if e.task_id == b:
            if e.event_type is EventType.TASK_SUBMITTED:
                sub_b = e
            elif e.event_type is EventType.STEP_STARTED and started_b is None:
                started_b = e
        elif e.event_type is EventType.STEP_STARTED:
            a_starts.append((e.event_id, e.timestamp))
    assert sub_b is not None and started_b is not None
    between = [ms for eid, ms in a_starts if sub_b.event_id < eid < started_b.event_id]
    # the pace of A's starts over the ten turnovers before B's submission
    before = [ms for eid, ms in a_starts if eid < sub_b.event_id][-10 * SLOTS :]
    turnover = (
        round((before[-1] - before[0]) / (len(before) - 1) * SLOTS) if len(before) > SLOTS else None
    )
    return {
        "a_starts_between": len(between),
        "b_wait_ms": started_b.timestamp - sub_b.timestamp,
        "turnover_ms": turnover,
        "within_one_turnover": len(between) <= SLOTS,
    }


# ---------------------------------------------------------------- 4. weighted shares


def _section_weighted(root: str, per_weight: int) -> dict[str, Any]:
    return asyncio.run(_weighted(Path(root), per_weight))


async def _weighted(root: Path, per_weight: int) -> dict[str, Any]:
    async with _Rig(root, SLOTS) as rig:
        engine = rig.engine
        await engine.limits.set(None, weights=WEIGHTS, operator="bench")
        # a backlog of each in proportion to its weight, interleaved: all run dry together
        counts = {v: int(w * per_weight) for v, w in WEIGHTS.items()}
        items: list[SubmitItem] = []
        left = dict(counts)
        while any(left.values()):
            for v in WEIGHTS:
                if left[v]:
                    items.append(SubmitItem("fair", {"tenant": v}))
                    left[v] -= 1
        ids = await _submit_many(engine, items)
        last_submitted = rig.store.log.durable_id
        async with asyncio.timeout(600):
            await asyncio.gather(*(engine.wait(t) for t in ids))
        tenant: dict[str, str] = {}
        starts: list[str] = []  # values, in the order of their first starts after the backlog
        seen: set[str] = set()
        for e in rig.store.log.read():
            if e.event_type is EventType.TASK_SUBMITTED:
                tenant[e.task_id] = str((e.payload.get("input") or {}).get("tenant"))
            elif e.event_type is EventType.STEP_STARTED and e.task_id not in seen:
                seen.add(e.task_id)
                if e.event_id > last_submitted:
                    starts.append(tenant[e.task_id])
    # the window: while every value still waits (up to 80 % of what started after the
    # backlog), past the first round of slots (decided as they arrived, not queued)
    window = starts[SLOTS : int(len(starts) * 0.8)]
    got = {v: window.count(v) for v in WEIGHTS}
    errors = share_errors(got, WEIGHTS)
    index = jain([1 + x for x in errors.values()])
    return {
        "weights": WEIGHTS,
        "backlog": counts,
        "window_starts": len(window),
        "starts": got,
        "shares": {v: round(s, 4) for v, s in shares(got).items()},
        "errors": {v: round(x, 4) for v, x in errors.items()},
        "worst_error": round(max(abs(x) for x in errors.values()), 4),
        "jain": round(index, 5),
    }


# ---------------------------------------------------------------- 5. a rate


def _section_rate(root: str, window_s: int) -> dict[str, Any]:
    return asyncio.run(_rate(Path(root), window_s))


async def _rate(root: Path, window_s: int) -> dict[str, Any]:
    skip_s = 1.0
    backlog = int(RATE_LIMIT * (window_s + skip_s + 2))
    out: dict[str, Any] = {"limit_per_s": RATE_LIMIT, "window_s": window_s, "backlog": backlog}
    for wf, name in (("paced", "limited"), ("plain1", "baseline")):
        async with _Rig(root / wf, 256) as rig:
            engine = rig.engine
            items = [SubmitItem(wf, {"tenant": "t", "k": str(i)}) for i in range(backlog)]
            d0 = engine.decisions
            ids = await _submit_many(engine, items)
            c0, t0 = time.process_time(), time.perf_counter()
            async with asyncio.timeout(window_s * 3 + 60):
                await asyncio.gather(*(engine.wait(t) for t in ids))
            cpu = (time.process_time() - c0) / (time.perf_counter() - t0)
            decisions = engine.decisions - d0
            _, started = rig.firsts()
        ts = [started[t].timestamp for t in ids]
        if name == "limited":
            figures = rate_over(ts, skip_s, window_s)
        else:
            figures = rate_over(ts, 0, math.inf)
        figures["decisions_per_start"] = round(decisions / backlog, 2)
        figures["cpu_share"] = round(cpu, 3)  # the process's CPU while the backlog drained
        out[name] = figures
    per_s = out["limited"]["per_s"]
    out["error"] = round(per_s / RATE_LIMIT - 1, 4) if per_s else None
    return out


# ---------------------------------------------------------------- the command


def run(quick: bool, workdir: str | None, progress: Callable[[str], None]) -> dict[str, Any]:
    plan = QUICK if quick else FULL
    base = tempfile.mkdtemp(prefix="apollo11-bench-", dir=workdir or os.getcwd())
    result: dict[str, Any] = {"quick": quick, "load": os.getloadavg()[0]}
    try:
        progress(
            f"dispatch: {plan['dispatch_tasks']:,} tasks each of {plan['dispatch_tasks']:,} "
            f"key values and none, {DISPATCH_RATE:,}/s in blocks of {plan['dispatch_block_s']} s"
        )
        result["dispatch"] = _in_child(
            _section_dispatch,
            os.path.join(base, "dispatch"),
            plan["dispatch_tasks"],
            plan["dispatch_block_s"],
        )
        progress(f"throughput: {plan['throughput_tasks']:,} five-step tasks, limited and not")
        result["throughput"] = _in_child(
            _section_throughput,
            os.path.join(base, "throughput"),
            plan["throughput_tasks"],
            plan["throughput_rounds"],
        )
        progress(f"one task of B behind {plan['backlog']:,} of A, fair and first-come")
        result["behind"] = _in_child(_section_behind, os.path.join(base, "behind"), plan["backlog"])
        progress(f"weighted shares {WEIGHTS}")
        result["weighted"] = _in_child(
            _section_weighted, os.path.join(base, "weighted"), plan["weighted_per_weight"]
        )
        progress(f"a rate of {RATE_LIMIT}/s over {plan['rate_window_s']} s, and none")
        result["rate"] = _in_child(_section_rate, os.path.join(base, "rate"), plan["rate_window_s"])
    finally:
        shutil.rmtree(base, ignore_errors=True)
    result["load_after"] = os.getloadavg()[0]
    result["targets"] = targets(result)
    return result


def targets(r: Mapping[str, Any]) -> dict[str, bool]:
    """Each target, met or not."""
    d, w = r["dispatch"], r["weighted"]
    return {
        "dispatch_p99": (d["limited"]["p99_ms"] or math.inf) <= DISPATCH_TARGET_MS,
        "throughput": r["throughput"]["ratio"] >= THROUGHPUT_TARGET,
        "one_behind_many": r["behind"]["fair"]["within_one_turnover"],
        "weighted_shares": w["worst_error"] <= SHARE_TOLERANCE and w["jain"] >= JAIN_TARGET,
        "rate": r["rate"]["error"] is not None and abs(r["rate"]["error"]) <= RATE_TOLERANCE,
    }


def _met(ok: bool) -> str:
    return "met" if ok else "missed"


def summary_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    d, t, b, w, rt = r["dispatch"], r["throughput"], r["behind"], r["weighted"], r["rate"]
    ok = r["targets"]

    def lat(x: dict[str, Any]) -> str:
        return (
            f"{x['p50_ms']} / {x['p99_ms']} / {x['max_ms']} ms ({x['tasks']:,} tasks); "
            f"the blocks' median p99 {x['median_block_p99_ms']} ms"
        )

    def behind(x: dict[str, Any]) -> str:
        return (
            f"{x['a_starts_between']:,} of A started first, B waited {x['b_wait_ms']:,} ms "
            f"(a turnover: {x['turnover_ms']} ms)"
        )

    errors = ", ".join(f"{v} {x:+.1%}" for v, x in w["errors"].items())
    return [
        (
            f"dispatch p50 / p99 / max, {d['values']:,} key values at {d['rate']:,}/s "
            f"(p99 ≤ {DISPATCH_TARGET_MS:g} ms)",
            f"{lat(d['limited'])}: {_met(ok['dispatch_p99'])}",
        ),
        ("  the same without the limit", lat(d["baseline"])),
        (
            "  submits/s achieved; decisions a task, limited / not",
            f"{d['limited']['submits_per_s']:,} / {d['baseline']['submits_per_s']:,}; "
            f"{d['limited']['decisions_per_task']} / {d['baseline']['decisions_per_task']}",
        ),
        (
            f"five-step tasks/s, limited ÷ unlimited (≥ {THROUGHPUT_TARGET})",
            f"×{t['ratio']}: {_met(ok['throughput'])} "
            f"({t['limited_tasks_per_s']} vs {t['baseline_tasks_per_s']})",
        ),
        (
            "  CPU a task, limited ÷ unlimited",
            f"×{t['cpu_ratio']} ({t['limited_cpu_us_per_task']} vs "
            f"{t['baseline_cpu_us_per_task']} µs)",
        ),
        (
            f"one task of B behind {b['backlog']:,} of A, fair, {b['slots']} slots of "
            f"{b['step_ms']:g} ms steps (within one turnover)",
            f"{behind(b['fair'])}: {_met(ok['one_behind_many'])}",
        ),
        ("  the same, first come first served", behind(b["baseline"])),
        (
            f"weighted shares 1:2:3:4 over {w['window_starts']:,} starts "
            f"(±{SHARE_TOLERANCE:.0%}; Jain ≥ {JAIN_TARGET})",
            f"{errors}; Jain {w['jain']}: {_met(ok['weighted_shares'])}",
        ),
        (
            f"starts/s under a rate of {rt['limit_per_s']}/s, over {rt['window_s']} s "
            f"(±{RATE_TOLERANCE:.0%})",
            f"{rt['limited']['per_s']:.1f} ({rt['error']:+.2%}): {_met(ok['rate'])}"
            if rt["limited"]["per_s"]
            else "n/a: missed",
        ),
        (
            "  the same backlog unlimited; decisions a start and CPU, limited / not",
            f"{(rt['baseline']['per_s'] or 0):.0f}/s; "
            f"{rt['limited']['decisions_per_start']} / {rt['baseline']['decisions_per_start']}, "
            f"{rt['limited']['cpu_share']:.0%} / {rt['baseline']['cpu_share']:.0%} of a core",
        ),
        ("load average, before / after", f"{r['load']:.2f} / {r['load_after']:.2f}"),
    ]
