"""The environment's `replay_check()`: the log folded again from its first event must
give the state the engine holds (replay is a pure function of the events), and
every durable run must replay against the code loaded (`apollo11 replay-check`'s
check, scheduler/durable/_check.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from apollo11.scheduler.durable import check_all
from apollo11.scheduler.state import Store, replay
from apollo11.scheduler.workflow import Registry


async def replay_check(store: Store, registry: Registry) -> str:
    """What was checked, or AssertionError naming the first difference."""
    folded = replay(store.log.read())
    live, fresh = _normal(store.state.to_dict()), _normal(folded.to_dict())
    if live != fresh:
        raise AssertionError(f"the log replays to another state: {_first_difference(live, fresh)}")
    tasks = list(store.state.iter_tasks())
    # check_all runs each main on an event loop of its own: in a thread, off this one
    runs, _ = await asyncio.to_thread(
        check_all, tasks, registry, store.state.first_event, finished=True
    )
    broken = [r for r in runs if r.outcome != "ok"]
    if broken:
        raise AssertionError(
            "durable runs that do not replay: "
            + "; ".join(f"task {r.task_id} ({r.workflow} v{r.version}): {r.detail}" for r in broken)
        )
    return (
        f"replayed {store.log.next_id - 1} events to the same state; "
        f"{len(runs)} durable run(s) replay"
    )


def _normal(d: Any) -> Any:
    return json.loads(json.dumps(d, sort_keys=True, default=str))


def _first_difference(a: Any, b: Any, path: str = "state") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if a.get(k) != b.get(k):
                return _first_difference(a.get(k), b.get(k), f"{path}[{k!r}]")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return _first_difference(x, y, f"{path}[{i}]")
    return f"{path} is {a!r} live, {b!r} replayed"
