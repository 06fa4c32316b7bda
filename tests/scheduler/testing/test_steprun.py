"""`run_step`: one step with a real StepContext, no engine."""

from __future__ import annotations

import pytest

from apollo11.scheduler.errors import InvalidArgumentError
from apollo11.scheduler.examples import InvoiceInput, approval, etl, invoice
from apollo11.scheduler.workflow import StepContext, StepError
from apollo11.testing import run_step


async def test_a_step_gets_its_input_and_its_parents_results() -> None:
    out = await run_step(
        etl.steps["clean"], input={"step_seconds": 0}, results={"collect": {"rows": 100}}
    )
    assert out == {"rows": 200, "uri": "file:///tmp/apollo11/test-task/clean"}


async def test_a_typed_step_gets_its_model_and_a_plain_step_runs_in_a_thread() -> None:
    order = {"customer": {"id": "c1"}, "amount_cents": 1200}
    assert await run_step("price", workflow=invoice, input=order) == {
        "total_cents": 1200,
        "currency": "EUR",
    }
    issued = await run_step(
        "issue", workflow=invoice, input=order, results={"price": {"total_cents": 1200,
                                                                  "currency": "EUR"}}
    )  # fmt: skip
    assert issued == {"invoice": "inv-c1", "total_cents": 1200, "currency": "EUR"}
    assert isinstance(InvoiceInput.model_validate(order), InvoiceInput)


async def test_a_bare_function_gets_a_real_context() -> None:
    seen: list[StepContext] = []
    beats: list[object] = []

    def probe(ctx: StepContext) -> str:
        seen.append(ctx)
        ctx.heartbeat({"done": 1})
        return ctx.dedupe_key

    assert await run_step(probe, input=1, attempt=2, heartbeats=beats) == "test-task:probe"
    assert seen[0].attempt == 2 and seen[0].fencing_token == (1, 2) and beats == [{"done": 1}]


async def test_a_step_error_propagates() -> None:
    with pytest.raises(StepError, match="outside the allowed directory"):
        await run_step(etl.steps["collect"], input={"ledger": "/etc/x", "step_seconds": 0})


async def test_bad_use_is_named() -> None:
    with pytest.raises(InvalidArgumentError, match=r"results= must hold .*not in its after=: "
                       r"collect; missing: feature"):  # fmt: skip
        await run_step(etl.steps["infer"], results={"collect": {}})
    with pytest.raises(InvalidArgumentError, match=r"workflow 'etl' has no step 'cleen' \(its "):
        await run_step("cleen", workflow=etl)
    with pytest.raises(InvalidArgumentError, match=r"run_step\('clean', workflow=wf\)"):
        await run_step("clean")
    with pytest.raises(InvalidArgumentError, match=r"'order' fails|customer"):
        await run_step("price", workflow=invoice, input={"amount_cents": 1})
    with pytest.raises(InvalidArgumentError, match=r"step 'main' is a durable main"):
        await run_step(approval.steps["main"])
