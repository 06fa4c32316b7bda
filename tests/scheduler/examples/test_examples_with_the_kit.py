"""The bundled examples (scheduler/examples), each tested as a user tests theirs: with
`apollo11.testing` (docs/testing.md), the real engine in process on a virtual clock.
No node, no port, no real waiting: three days and a nightly 03:00 pass in
milliseconds. (tests/scheduler/test_examples.py covers the ledger's confinement;
tests/scheduler/testing/ the kit itself, with approval's failover.)"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from apollo11 import InvalidArgumentError, TaskFailed
from apollo11.scheduler import examples
from apollo11.scheduler.examples import (
    Customer,
    InvoiceInput,
    InvoiceResult,
    approval,
    etl,
    fulfil,
    invoice,
    nightly,
    pack,
    runbook,
)
from apollo11.testing import TaskHandle, WorkflowEnvironment
from tests.scheduler.examples import nightly_fast

FAST = {"step_seconds": 0}
BERLIN = ZoneInfo("Europe/Berlin")


def _ran(ledger: Path) -> list[str]:
    """What the durable examples did, in order (their ledger: `dedupe_key what try`)."""
    return [line.split()[1] for line in ledger.read_text().splitlines()]


# ---------------------------------------------------------------------- etl


async def test_etl_runs_its_five_stages_in_order() -> None:
    async with WorkflowEnvironment(workflows=[etl]) as env:
        h = await env.submit(etl, FAST)
        out = await h.result()
        steps = [s.name for s in (await h.task()).steps]
    assert steps == ["collect", "clean", "feature", "infer", "persist"]
    # each stage adds 100 rows to what came before
    assert [out[s]["rows"] for s in steps] == [100, 200, 300, 400, 500]


async def test_etl_retries_a_failing_stage_by_its_policy_and_then_gives_up() -> None:
    async with WorkflowEnvironment(workflows=[etl]) as env:
        healed = await env.submit(etl, {**FAST, "fail_step": "infer", "fail_times": 3})
        assert (await healed.result())["persist"]["rows"] == 500
        attempts = {s.name: s.attempt for s in (await healed.task()).steps}
        assert attempts["infer"] == 4 and attempts["persist"] == 1  # RETRY: 4 attempts
        broken = await env.submit(etl, {**FAST, "fail_step": "infer", "fail_times": 4})
        with pytest.raises(TaskFailed) as e:
            await broken.result()
    infer = next(s for s in e.value.task.steps if s.name == "infer")
    assert infer.state == "FAILED" and "injected failure of infer (attempt 4)" in infer.error


async def test_etl_resumes_after_a_failover_without_running_a_finished_stage(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger"
    examples.configure(tmp_path)
    try:
        async with WorkflowEnvironment(workflows=[etl]) as env:
            h = await env.submit(
                etl, {**FAST, "ledger": str(ledger), "fail_step": "feature", "fail_times": 1}
            )
            await env.advance(0)  # collect, clean done; feature failed once, its retry due
            await env.fail_over()
            assert (await h.result())["persist"]["rows"] == 500
    finally:
        examples.configure(None)
    ran = [line.split()[1] for line in ledger.read_text().splitlines()]
    assert ran == ["collect", "clean", "feature", "feature", "infer", "persist"]


# ------------------------------------------------------------------ approval


async def test_approval_ships_once_approved(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    async with WorkflowEnvironment(workflows=[approval]) as env:
        h = await env.submit(approval, {"id": "A7", "items": ["lamp"], "ledger": str(ledger)})
        await env.advance(timedelta(hours=5))
        await env.send_event("approval:A7", {"by": "ana"})
        out = await h.result()
    assert out["state"] == "shipped" and out["approved_by"] == {"by": "ana"}
    assert out["items"] == ["lamp"]
    assert _ran(ledger) == ["charge", "ship"]


async def test_approval_refunds_when_no_one_approves_in_three_days(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    async with WorkflowEnvironment(workflows=[approval]) as env:
        submitted = env.clock.now()
        h = await env.submit(approval, {"id": "A8", "ledger": str(ledger)})
        await env.advance(timedelta(days=3) - timedelta(seconds=1))
        assert (await h.task()).state == "WAITING"  # a second before the deadline
        out = await h.result()  # the clock skips to the deadline
        assert env.clock.now() - submitted >= timedelta(days=3).total_seconds()
    assert out == {"state": "refunded", "refunded": "ch-A8"}
    assert _ran(ledger) == ["charge", "refund"]


async def test_approval_waits_out_its_cooldown_before_shipping() -> None:
    async with WorkflowEnvironment(workflows=[approval]) as env:
        h = await env.submit(approval, {"id": "A9", "cooldown_s": 3600})
        await env.send_event("approval:A9", {"by": "bo"})
        start = env.clock.now()
        assert (await h.result())["state"] == "shipped"
        assert env.clock.now() - start >= 3600


# ------------------------------------------------------------------- fulfil


async def test_fulfil_packs_every_item_as_a_child_then_ships() -> None:
    async with WorkflowEnvironment(workflows=[fulfil, pack]) as env:
        h = await env.submit(fulfil, {"id": "F1", "items": ["a", "b", "c"], **FAST})
        out = await h.result()
    assert out["state"] == "shipped"
    assert sorted(p["packed"] for p in out["packed"]) == ["a", "b", "c"]


async def test_fulfil_refunds_the_order_when_an_item_is_out_of_stock(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    async with WorkflowEnvironment(workflows=[fulfil, pack]) as env:
        order = {"id": "F2", "items": ["a", "b"], "out_of_stock": ["b"], "ledger": str(ledger)}
        out = await (await env.submit(fulfil, {**order, **FAST})).result()
    assert out["state"] == "refunded" and "b is out of stock" in out["because"]
    assert "ship" not in _ran(ledger) and _ran(ledger)[-1] == "refund"


# ------------------------------------------------------------------ invoice


async def test_invoice_takes_and_gives_its_models() -> None:
    order = InvoiceInput(customer=Customer(id="c1"), amount_cents=1200, currency="USD")
    async with WorkflowEnvironment(workflows=[invoice]) as env:
        h: TaskHandle[InvoiceResult] = await env.submit(invoice, order)
        result = await h.result()
    assert result == InvoiceResult(invoice="inv-c1", total_cents=1200, currency="USD")


async def test_invoice_refuses_an_input_that_does_not_fit_naming_the_field() -> None:
    async with WorkflowEnvironment(workflows=[invoice]) as env:
        with pytest.raises(InvalidArgumentError, match=r"input\.amount_cents"):
            await env.submit("invoice", {"customer": {"id": "c1"}, "amount_cents": 0})


# ------------------------------------------------------------------ runbook


async def test_runbook_runs_at_most_two_per_host_at_once() -> None:
    async with WorkflowEnvironment(workflows=[runbook]) as env:
        runs = [
            await env.submit(runbook, {"host": "db1", "team": "ops", "step_seconds": 0.01})
            for _ in range(4)
        ]
        other = await env.submit(runbook, {"host": "db2", "team": "web", **FAST})
        for h in [*runs, other]:
            assert (await h.result())["verify"]["rows"] == 400
        ids = {h.task_id for h in runs}
        events = [e for e in env.store.log.read() if e.task_id in ids]
    running: set[str] = set()
    most = 0
    for e in events:  # in log order: how many db1 runs had started and not finished
        if e.event_type.name == "STEP_STARTED" and e.step_name == "drain":
            running.add(e.task_id)
        elif e.event_type.name == "STEP_SUCCEEDED" and e.step_name == "verify":
            running.discard(e.task_id)
        most = max(most, len(running))
    assert most == 2


# ------------------------------------------------------------------- nightly


async def test_the_nightly_schedule_runs_etl_at_three_in_berlin() -> None:
    assert nightly.nightly_etl.input == {"step_seconds": 1}  # what nightly_fast changes
    start = datetime(2030, 3, 30, 12, 0, tzinfo=BERLIN)  # the night clocks go forward
    async with WorkflowEnvironment(workflows=[nightly_fast], start=start) as env:
        await env.advance(timedelta(hours=13, minutes=59))  # 02:59 summer time, 00:59 UTC
        assert not env.store.state.schedules["nightly-etl"].occurrences
        await env.advance(timedelta(minutes=2))
        (fired,) = env.store.state.schedules["nightly-etl"].occurrences
        assert fired.task_id is not None
        assert datetime.fromtimestamp(fired.nominal_ms / 1000, BERLIN).hour == 3
        out = await TaskHandle[Any](env, fired.task_id, "etl").result()
    assert out["persist"]["rows"] == 500
