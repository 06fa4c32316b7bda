"""A step reads `ctx.results` of the steps in its `after=` only (issue 33, part 4a).

Reading any other step's result was a bare `KeyError`, retried by the step's policy
as if the next attempt could see more: it fails once, for good, and says which step
read what and what its `after=` is.
"""

from __future__ import annotations

import pickle
from typing import Any

import orjson
import pytest

from apollo11 import ResultNotVisible, StepContext
from apollo11.scheduler.state import StepStatus, TaskStatus
from apollo11.scheduler.workflow import Idempotent, Retry, Workflow
from tests.scheduler.test_engine import rig_factory  # noqa: F401  (a fixture)


def _ctx(results: dict[str, Any]) -> StepContext:
    return StepContext(
        task_id="t1",
        step="ship",
        attempt=1,
        input=None,
        results=results,
        node_id="n1",
        workflow="orders",
        version=1,
    )


def test_reading_outside_after_names_the_step_what_it_read_and_its_after() -> None:
    ctx = _ctx({"pack": {"box": 1}})
    assert ctx.results["pack"] == {"box": 1}
    with pytest.raises(ResultNotVisible) as caught:
        ctx.results["charge"]
    said = str(caught.value)
    assert "'ship'" in said and "ctx.results['charge']" in said and "after=['pack']" in said
    assert caught.value.details["final"] is True
    assert isinstance(caught.value, KeyError)  # code that caught KeyError still does


def test_the_results_stay_a_plain_mapping() -> None:
    ctx = _ctx({"pack": {"box": 1}})
    assert dict(ctx.results) == {"pack": {"box": 1}}
    assert ctx.results.get("charge") is None
    assert "charge" not in ctx.results
    assert orjson.loads(orjson.dumps(ctx.results)) == {"pack": {"box": 1}}
    again = pickle.loads(pickle.dumps(ctx.results))
    with pytest.raises(ResultNotVisible):
        again["charge"]


async def test_a_step_reading_outside_its_after_fails_once_for_good(rig_factory: Any) -> None:  # noqa: F811
    wf = Workflow("orders")
    calls: list[int] = []

    @wf.step(idempotency=Idempotent())
    def charge(ctx: StepContext) -> dict[str, Any]:
        return {"charge_id": "ch-1"}

    @wf.step(after=["charge"], idempotency=Idempotent())
    def pack(ctx: StepContext) -> dict[str, Any]:
        return {"box": 1}

    @wf.step(after=["pack"], idempotency=Idempotent(), retry=Retry(attempts=3, backoff_s=0))
    def ship(ctx: StepContext) -> dict[str, Any]:
        calls.append(ctx.attempt)
        return {"charge": ctx.results["charge"]}  # a grandparent: not in after=

    rig = await rig_factory(wf)
    task_id = await rig.run("orders")
    task = rig.store.state.peek(task_id)
    assert task is not None and task.status is TaskStatus.FAILED
    step = task.steps["ship"]
    assert (step.status, step.attempt, step.final) == (StepStatus.FAILED, 1, True)
    assert calls == [1]
    assert step.error is not None
    assert "'ship'" in step.error and "ctx.results['charge']" in step.error
    assert "after=['pack']" in step.error
