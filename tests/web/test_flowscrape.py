"""The flow-control metrics (docs/flow-control.md, "Metrics and alerts") on a real
store and engine with a fake clock: per limit, what holds and waits and since when;
per key value, the top ten and the rest under "other", gone once they stop waiting;
nothing from an engine that does not lead; the holds and refusals counted."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.errors import ResourceExhaustedError
from apollo11.scheduler.web import flowscrape, scrape
from apollo11.scheduler.workflow import (
    Concurrency,
    Debounce,
    Idempotent,
    Rate,
    StepContext,
    Workflow,
)
from tests.scheduler.test_engine import Rig, make_rig

T0 = 1_700_000_000.0
GATE: list[asyncio.Event] = []


async def _held(ctx: StepContext) -> None:
    await GATE[-1].wait()


def _quick(ctx: StepContext) -> None:
    return None


deploy = Workflow("deploy", version=1, concurrency=Concurrency(key="host", max=1))
deploy.step(idempotency=Idempotent(), name="roll")(_held)

strict = Workflow(
    "strict", version=1, concurrency=Concurrency(key="host", max=1, on_full="reject_new")
)
strict.step(idempotency=Idempotent(), name="once")(_held)

paced = Workflow("paced", version=1, rate=Rate(key="tenant", limit=1, per="1h"))
paced.step(idempotency=Idempotent(), name="go")(_quick)

folded = Workflow("folded", version=1, debounce=Debounce(key="doc", quiet="1h", max_wait="2h"))
folded.step(idempotency=Idempotent(), name="go")(_quick)


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    GATE.append(asyncio.Event())
    r = await make_rig(
        tmp_path / "d", FakeClock(start=T0), deploy, strict, paced, folded, concurrency=64
    )
    yield r
    GATE[-1].set()
    await r.engine.stop()
    await r.store.close()


def _value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def _series(name: str) -> dict[tuple[str, ...], float]:
    """Every sample of a gauge family, by its label values."""
    for family in REGISTRY.collect():
        if family.name == name:
            return {tuple(s.labels.values()): s.value for s in family.samples}
    raise AssertionError(f"no metric {name}")


async def _until(check: Callable[[], bool], what: str) -> None:
    async with asyncio.timeout(20):
        while not check():
            await asyncio.sleep(0.01)


def test_the_top_values_by_waiting_and_the_rest_as_other() -> None:
    waiting = {f"h{i:02}": 1 for i in range(12)} | {"big": 5, "mid": 3}
    top = flowscrape.top_keys(waiting, 10)
    assert list(top) == ["big", "mid", *(f"h{i:02}" for i in range(8)), "other"]
    assert top["other"] == 4 and sum(top.values()) == sum(waiting.values())
    assert flowscrape.top_keys({"a": 2, "b": 1}, 10) == {"a": 2, "b": 1}, "no rest, no other"
    # a value spelled "other" is counted with the rest, never a second series of that name
    assert flowscrape.top_keys({"other": 7, "a": 1, "b": 2}, 1) == {"b": 2, "other": 8}
    assert flowscrape.top_keys({"other": 7, "a": 1}, 10) == {"a": 1, "other": 7}


async def test_per_limit_and_the_busiest_keys_while_tasks_wait_then_none(rig: Rig) -> None:
    e = rig.engine
    for host, n in [("big", 6), *((f"h{i:02}", 2) for i in range(12))]:
        for _ in range(n):
            await e.submit("deploy", {"host": host})
    await _until(lambda: e.flow.count(("deploy/host", "h11")) == 1, "one runs per host")
    await _until(lambda: sum(e.flow.queued(k) for k in e.flow.waiting_keys()) == 17, "queued")
    rig.clock.advance(90)
    flowscrape.refresh(e)
    assert _value("apollo11_flow_running", limit="deploy/host") == 13
    assert _value("apollo11_flow_queued", limit="deploy/host") == 17
    assert _value("apollo11_flow_oldest_queued_seconds", limit="deploy/host") == pytest.approx(
        90, abs=1
    )
    keys = {k[1]: v for k, v in _series("apollo11_flow_key_queued").items()}
    assert keys == {"big": 5, **{f"h{i:02}": 1 for i in range(9)}, "other": 3}
    # declared, nothing held or waiting: a series at 0 (rates have no slots)
    assert _value("apollo11_flow_running", limit="strict/host") == 0
    assert _value("apollo11_flow_oldest_queued_seconds", limit="strict/host") == 0
    assert _value("apollo11_flow_running", limit="paced/tenant") is None
    # a reject_new limit's refusals are a series before the first (at 0 in a fresh node)
    assert _value("apollo11_flow_rejected_total", limit="strict/host") is not None

    GATE[-1].set()
    await _until(lambda: not any(e.flow.queued(k) for k in list(e.flow.waiting_keys())), "done")
    await _until(lambda: e.running() == 0, "all ran")
    flowscrape.refresh(e)
    assert _series("apollo11_flow_key_queued") == {}, "keys that stopped waiting are gone"
    assert _value("apollo11_flow_queued", limit="deploy/host") == 0
    assert _value("apollo11_flow_oldest_queued_seconds", limit="deploy/host") == 0


async def test_an_engine_that_does_not_lead_exports_none(rig: Rig) -> None:
    e = rig.engine
    for _ in range(2):
        await e.submit("deploy", {"host": "db1"})
    await _until(lambda: e.flow.queued(("deploy/host", "db1")) == 1, "one waits")
    flowscrape.refresh(e)
    assert _value("apollo11_flow_key_queued", limit="deploy/host", key="db1") == 1
    await e.stop()
    flowscrape.refresh(e)
    for name in (
        "apollo11_flow_running",
        "apollo11_flow_queued",
        "apollo11_flow_oldest_queued_seconds",
        "apollo11_flow_key_queued",
    ):
        assert _series(name) == {}, name
    flowscrape.refresh(None)
    assert _series("apollo11_flow_queued") == {}


async def test_holds_by_why_and_refusals_are_counted(rig: Rig) -> None:
    e = rig.engine

    def held(reason: str) -> float:
        return _value("apollo11_flow_held_total", reason=reason) or 0.0

    before = {r: held(r) for r in ("concurrency", "rate", "debounce")}
    rejected = _value("apollo11_flow_rejected_total", limit="strict/host") or 0.0
    for _ in range(3):
        await e.submit("deploy", {"host": "db9"})
    await _until(lambda: e.flow.queued(("deploy/host", "db9")) == 2, "two wait")
    await e.submit("strict", {"host": "x"})
    with pytest.raises(ResourceExhaustedError):
        await e.submit("strict", {"host": "x"})
    # held by a timer: the engine's moves the fake clock (the debounce's first, or the
    # rate's wait would carry it past the debounce's end before its first decision)
    doc = (await e.submit("folded", {"doc": "d"})).task_id
    await e.submit("paced", {"tenant": "t"})
    second = (await e.submit("paced", {"tenant": "t"})).task_id
    async with asyncio.timeout(20):
        await e.wait(second)
        await e.wait(doc)
    await asyncio.sleep(0.05)  # passes that decide the waiting ones again count nothing
    assert held("concurrency") - before["concurrency"] == 2, "each waiting start once"
    assert held("rate") - before["rate"] == 1
    assert held("debounce") - before["debounce"] == 1
    assert (_value("apollo11_flow_rejected_total", limit="strict/host") or 0) - rejected == 1


async def test_tasks_not_started_yet_by_priority(rig: Rig) -> None:
    e = rig.engine
    await e.submit("deploy", {"host": "p"})
    for priority in (1, 1, 5, None):
        await e.submit("deploy", {"host": "p"}, priority=priority)
    await _until(lambda: e.flow.queued(("deploy/host", "p")) == 4, "four wait")
    active, waiting = scrape.unfinished(rig.store.state.tasks.values())
    assert active == 5
    assert waiting == {1: 2, 2: 0, 3: 1, 4: 0, 5: 1}
