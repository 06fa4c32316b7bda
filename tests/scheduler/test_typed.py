"""Typed workflow inputs (scheduler/typed.py): checked at submit, each field at fault
named; steps given the model; untyped workflows untouched."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from apollo11.scheduler.errors import InvalidArgumentError, WorkflowDefinitionError
from apollo11.scheduler.examples import InvoiceInput, invoice
from apollo11.scheduler.workflow import FencingToken, Idempotent, StepContext, Workflow


def _ctx(input: Any) -> StepContext:
    return StepContext(
        task_id="t",
        step="s",
        attempt=1,
        input=input,
        results={"price": {"total_cents": 5, "currency": "EUR"}},
        node_id="n1",
        workflow="invoice",
        version=1,
        fencing_token=FencingToken(1, 1),
    )


@pytest.mark.parametrize(
    ("given", "refused"),
    [
        ({"amount_cents": 5}, "input.customer: Field required"),
        ({"customer": {}, "amount_cents": 5}, "input.customer.id: Field required"),
        (
            {"customer": {"id": "c"}, "amount_cents": "five"},
            "input.amount_cents: Input should be a valid integer",
        ),
        (
            {"customer": {"id": "c"}, "amount_cents": 0},
            "input.amount_cents: Input should be greater than 0",
        ),
        (
            {"customer": {"id": "c"}, "amount_cents": 5, "coupon": "x"},
            "input.coupon: Extra inputs are not permitted",
        ),
        ([1, 2], "input: Input should be a valid dictionary or instance of InvoiceInput"),
        (None, "input: Input should be a valid dictionary or instance of InvoiceInput"),
    ],
)
def test_an_input_that_does_not_fit_is_refused_naming_the_field(given: Any, refused: str) -> None:
    with pytest.raises(InvalidArgumentError) as e:
        invoice.check_input(given)
    assert refused in str(e.value)
    assert "(the workflow's input is InvoiceInput)" in str(e.value)


def test_many_wrong_fields_are_named_up_to_five() -> None:
    class Wide(BaseModel):
        a: int
        b: int
        c: int
        d: int
        e: int
        f: int
        g: int

    with pytest.raises(InvalidArgumentError, match=r"input\.e: Field required \(and 2 more\)"):
        Workflow("w", input=Wide).check_input({})


def test_steps_are_given_the_model() -> None:
    ctx = _ctx({"customer": {"id": "c1"}, "amount_cents": 5})
    # the registry's step function: what an embedded node and a worker both call
    assert invoice.steps["price"].fn(ctx) == {"total_cents": 5, "currency": "EUR"}
    assert invoice.steps["issue"].fn(ctx)["invoice"] == "inv-c1"

    wf = Workflow("a", input=InvoiceInput)
    seen: list[Any] = []

    @wf.step(idempotency=Idempotent())
    async def only(ctx: StepContext) -> None:
        seen.append(ctx.input)

    assert asyncio.iscoroutinefunction(wf.steps["only"].fn), "still awaited as a coroutine"
    asyncio.run(wf.steps["only"].fn(ctx))
    assert isinstance(seen[0], InvoiceInput) and seen[0].customer.id == "c1"


def test_untyped_workflows_take_any_json_and_steps_see_it_as_is() -> None:
    wf = Workflow("plain")

    @wf.step(idempotency=Idempotent())
    def only(ctx: StepContext) -> Any:
        return ctx.input

    wf.check_input([1, "x"])
    assert wf.input_schema() is None
    assert wf.steps["only"].fn(_ctx({"a": 1})) == {"a": 1}


def test_the_schema_is_the_models() -> None:
    schema = invoice.input_schema()
    assert schema is not None and schema["required"] == ["customer", "amount_cents"]
    assert schema["additionalProperties"] is False


def test_input_must_be_a_model_class() -> None:
    class NotAModel:
        pass

    wf = Workflow("w", input=NotAModel)

    @wf.step(idempotency=Idempotent())
    def only(ctx: StepContext) -> None:
        return None

    with pytest.raises(WorkflowDefinitionError, match="input= must be a pydantic model class"):
        wf.validate()
    with pytest.raises(WorkflowDefinitionError):
        Workflow("x", input=ConfigDict(extra="forbid")).validate()


def test_compensations_get_the_model_too_and_a_model_set_late_still_applies() -> None:
    # review finding: only the step's function was wrapped; its compensation got the
    # dict, raised AttributeError, and was retried forever
    from apollo11.scheduler.workflow import NotIdempotent

    def undo(ctx: StepContext) -> str:
        return str(ctx.input.customer.id)

    wf = Workflow("c", input=InvoiceInput)

    @wf.step(idempotency=NotIdempotent(compensate=undo))
    def charge(ctx: StepContext) -> str:
        return str(ctx.input.customer.id)

    ctx = _ctx({"customer": {"id": "c1"}, "amount_cents": 5})
    compensate = wf.steps["charge"].compensate
    assert compensate is not None and compensate(ctx) == "c1"

    late = Workflow("late")

    @late.step(idempotency=Idempotent())
    def only(ctx: StepContext) -> str:
        return str(ctx.input.customer.id)

    late.input = InvoiceInput  # after its steps: registration (validate) still wraps them
    late.validate()
    late.validate()  # once only
    assert late.steps["only"].fn(ctx) == "c1"


def test_a_durable_workflow_takes_an_input_model() -> None:
    from apollo11.scheduler.durable import DurableContext, DurableWorkflow

    wf = DurableWorkflow("d", input=InvoiceInput)

    @wf.main
    async def main(ctx: DurableContext, order: InvoiceInput) -> str:
        return order.customer.id

    wf.validate()
    with pytest.raises(InvalidArgumentError, match=r"input\.customer: Field required"):
        wf.check_input({"amount_cents": 1})
