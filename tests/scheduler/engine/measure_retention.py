"""Idempotency records and retention, measured (docs/retention.md, "Figures"):

    .venv/bin/python -m tests.scheduler.engine.measure_retention [--tasks 5000] [--events 5000]

The real engine and store in process on a fake clock: `--tasks` tasks submitted
with an idempotency key each and `--events` external events sent with one, then
snapshots taken. Printed before and after the TTL (24 h) and a retention of
`*=1d` have passed and one sweep ran: the idempotency keys the state holds (task
keys: memory and the archive's key index; event keys), the tasks, and what the
newest snapshot needs on disk (its file and the archive chunks it names).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from apollo11.scheduler import retention
from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.engine import RetentionOptions
from apollo11.scheduler.workflow import Idempotent, StepContext, Workflow
from tests.scheduler.test_engine import Rig, make_rig

DAY = 86_400


def _workflow() -> Workflow:
    wf = Workflow("etl")

    @wf.step(idempotency=Idempotent())
    def load(ctx: StepContext) -> dict[str, Any]:
        return {"rows": 1000, "input": ctx.input}

    return wf


def _snapshot_bytes(root: Path) -> int:
    snaps = root / "snapshots"
    newest = sorted(snaps.glob("snapshot-*.snap"))[-1]
    doc = newest.read_bytes()
    names = json.loads(doc[20 : doc.find(b"\n") if b"\n" in doc else len(doc)])["chunks"]
    return newest.stat().st_size + sum((snaps / n).stat().st_size for n in names)


async def _settle(rig: Rig, rounds: int = 3) -> None:
    """Snapshots at distinct watermarks, so the older ones (and their chunks) go."""
    for i in range(rounds):
        await rig.engine.send_event("tick", i)
        await rig.store.snapshot_now()
        await rig.store.wait_snapshot()


def _figures(rig: Rig) -> dict[str, int]:
    state = rig.store.state
    return {
        "tasks": state.count_tasks(),
        "task_keys": len(state.all_keys()),
        "task_keys_in_memory": len(state.idempotency),
        "event_keys": len(state.event_keys),
        "snapshot_bytes": _snapshot_bytes(rig.root),
    }


async def _run(root: Path, tasks: int, events: int) -> dict[str, Any]:
    rig = await make_rig(root, FakeClock(), _workflow())
    rig.engine.retention.options = RetentionOptions(rules=retention.parse("*=1d"))
    try:
        for i in range(tasks):
            sub = await rig.engine.submit("etl", {"n": i}, idempotency_key=f"order-{i}")
            await rig.engine.wait(sub.task_id)
        for i in range(events):
            await rig.engine.send_event(f"paid-{i}", {"n": i}, idempotency_key=f"pay-{i}")
        await _settle(rig)
        before = _figures(rig)
        rig.clock.advance(rig.engine.idempotency_ttl_s + DAY + 1)
        sentence = await rig.engine.retention.sweep()
        await _settle(rig)
        after = _figures(rig)
        return {"before": before, "after": after, "sweep": sentence}
    finally:
        await rig.engine.stop()
        await rig.store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=5000)
    ap.add_argument("--events", type=int, default=5000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        out = asyncio.run(_run(Path(d) / "n1", a.tasks, a.events))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
