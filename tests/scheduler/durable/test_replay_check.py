"""`apollo11 replay-check`: the recorded durable runs of a log replayed against the
code about to be deployed (scheduler/durable/_check.py), on the golden history."""

from __future__ import annotations

import json
from pathlib import Path

from apollo11.scheduler.durable import check_all
from apollo11.scheduler.state.store import state_at
from apollo11.scheduler.workflow import Registry
from tests.nodes import cli

GOLDEN = Path(__file__).parent.parent.parent / "golden" / "durable"
CHANGED = "tests.scheduler.durable.changed_flows"


def _runs(module: str, *, finished: bool = True) -> dict[str, object]:
    registry = Registry()
    registry.load_module(module)
    state = state_at(GOLDEN)
    runs, skipped = check_all(state.iter_tasks(), registry, state.first_event, finished=finished)
    assert not skipped
    return {r.task_id: r for r in runs}


def test_by_default_only_runs_that_will_replay_are_checked() -> None:
    # p1 and p2 SUCCEEDED: they never replay again; p3 (NONDETERMINISTIC) and p4
    # (WAITING) will, once the code is deployed
    assert set(_runs("apollo11.scheduler.examples", finished=False)) == {"p3", "p4"}


def test_a_run_that_failed_the_same_way_is_no_break_and_a_bad_input_no_crash() -> None:
    # review findings: a FAILED run whose main raises again (same code) failed the
    # gate for ever; a recorded input that no longer fits the model crashed the command
    from typing import Any

    from pydantic import BaseModel

    from apollo11.scheduler.durable import (
        DurableContext,
        DurableWorkflow,
        Idempotent,
        check_run,
        input_hash,
    )

    flow = DurableWorkflow("flow", version=1)

    def charge(x: int) -> dict[str, int]:
        return {"ok": x}

    @flow.main
    async def main(ctx: DurableContext, order: Any) -> Any:
        r = await ctx.step("charge", charge, 1, idempotency=Idempotent())
        raise ValueError(f"card declined: {r}")

    checkpoint = {"seq": 0, "kind": "step", "name": "charge", "input_hash": input_hash([1]),
                  "output": {"ok": 1}, "attempts": 1}  # fmt: skip
    common: dict[str, Any] = {"task_id": "t1", "input": {}, "checkpoints": [checkpoint],
                              "wait": None, "first_event_id": 1,
                              "first_event": lambda k, s: None}  # fmt: skip
    assert check_run(flow, failed=True, **common).outcome == "ok"
    assert check_run(flow, failed=False, **common).outcome == "error"

    class Model(BaseModel):
        customer: str

    typed = DurableWorkflow("typed", version=1, input=Model)

    @typed.main
    async def typed_main(ctx: DurableContext, order: Model) -> str:
        return order.customer

    bad = check_run(typed, task_id="t2", input={"cust": 1}, checkpoints=[], wait=None,
                    first_event_id=1, first_event=lambda k, s: None)  # fmt: skip
    assert bad.outcome == "error" and "its input no longer fits Model" in bad.detail


def test_a_history_of_the_same_code_replays() -> None:
    # p1 was recorded by the approval example; the golden p2-p4 are hand-made
    # histories of other shapes (tests/golden/make_golden.py)
    runs = _runs("apollo11.scheduler.examples")
    assert runs["p1"].outcome == "ok"  # type: ignore[attr-defined]
    assert {t for t, r in runs.items() if r.outcome != "ok"} == {"p2", "p3", "p4"}  # type: ignore[attr-defined]


def test_a_moved_step_is_named_with_its_position() -> None:
    p1 = _runs(CHANGED)["p1"]
    assert p1.outcome == "breaks"  # type: ignore[attr-defined]
    report = p1.report  # type: ignore[attr-defined]
    assert report["seq"] == 1
    assert (report["expected"]["kind"], report["expected"]["name"]) == ("event", "approval:p1")
    assert report["got"]["kind"] == "sleep"


def test_the_command_is_a_deploy_gate() -> None:
    res = cli(
        "replay-check", "--data-dir", str(GOLDEN), "--workflows", CHANGED, "--finished", "--json"
    )
    assert res.returncode == 1, res.stdout + res.stderr
    got = json.loads(res.stdout)
    assert got["runs"] == 4
    p1 = next(b for b in got["breaking"] if b["task_id"] == "p1")
    assert p1["detail"].startswith("non-determinism at checkpoint 1: the log holds event")
    plain = cli("replay-check", "--data-dir", str(GOLDEN), "--workflows", CHANGED, "--finished")
    assert ["approval", "1", "4", "4"] in [line.split() for line in plain.stdout.splitlines()]
    assert any(line.startswith("p1 (approval v1): non-determinism at checkpoint 1")
               for line in plain.stdout.splitlines()), plain.stdout  # fmt: skip
    missing = cli("replay-check", "--data-dir", str(GOLDEN), "--workflows", "nope.flows")
    assert (
        missing.returncode == 2 and "cannot import workflow module 'nope.flows'" in missing.stderr
    )
