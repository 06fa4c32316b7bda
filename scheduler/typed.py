"""Typed workflows: pydantic models that a task's input and its result must fit.

`Workflow("billing", version=2, input=BillingInput)`: the input is checked at
submit (INVALID_ARGUMENT naming each field at fault, `input.customer.id: Field
required`), the log keeps the JSON as submitted, and each step is given the
model (`ctx.input` is a `BillingInput`), embedded, on a worker or in a step's
own process alike. The check happens where the step is called, so a step's
context stays plain JSON on its way to a worker; an input that no longer fits
(a model changed without a new version) fails the attempt, like any error of
the step's own. Untyped workflows are untouched.

`Workflow(..., input=BillingInput, result=BillingResult)`: the task's result
(the value of its one final step, or of a durable main) must fit `result`. The
step may return a model instance or plain JSON; it is checked where the step
runs, before its STEP_SUCCEEDED can be written, and what the log keeps is the
model's JSON (`model_dump(mode="json", by_alias=True)`: defaults filled in,
values coerced), so replay reads a fact and never checks again. A result that
does not fit fails the attempt (`result.total: Field required (the workflow's
result is BillingResult)`), retried by the step's `retry=` like any error of
its own: nothing that does not fit is ever recorded as the task's result.

pydantic is imported by the application that declares a model, not here.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from apollo11.scheduler.errors import InvalidArgumentError

_TYPED = "__apollo11_input_model__"  # set on a function typed_step made
_CHECKED = "__apollo11_result_checked__"  # set on a function result_checked made
ERRORS_SHOWN = 5  # a payload with more wrong fields: the first five, and how many more


def is_model(model: Any) -> bool:
    """A pydantic (v2) model class."""
    return isinstance(model, type) and callable(getattr(model, "model_validate", None))


def check_input(model: Any, raw: Any, *, what: str = "input") -> None:
    """Refuse `raw` unless it fits `model`: InvalidArgumentError naming each field."""
    _, wrong = fit(model, raw, what=what)
    if wrong is not None:
        raise InvalidArgumentError(wrong)


def fit(model: Any, raw: Any, *, what: str, declared: bool = True) -> tuple[Any, str | None]:
    """(`raw` as an instance of `model`, None), or (None, the sentence that names each
    field at fault: `result.total: Field required (the workflow's result is R)`;
    without the parenthesis when `model` is not the workflow's own but a caller's)."""
    from pydantic import ValidationError

    try:
        return model.model_validate(raw), None
    except ValidationError as e:
        errors = e.errors(include_url=False)
        shown = [f"{_path(what, err['loc'])}: {err['msg']}" for err in errors[:ERRORS_SHOWN]]
        more = len(errors) - len(shown)
        return None, (
            f"{'; '.join(shown)}"
            + (f" (and {more} more)" if more > 0 else "")
            + (f" (the workflow's {what} is {model.__name__})" if declared else "")
        )


def result_json(model: Any, out: Any) -> tuple[Any, str | None]:
    """(What a step returned as the log keeps it: `model`'s JSON, None), or (None, why
    it does not fit). `out` may be plain JSON or a model instance, which is dumped
    and checked again: an instance built with `model_construct`, or of another
    model, proves nothing by its class."""
    if hasattr(out, "model_dump") and not isinstance(out, type):
        out = out.model_dump(mode="json", by_alias=True)
    instance, wrong = fit(model, out, what="result")
    if wrong is not None:
        return None, wrong
    return instance.model_dump(mode="json", by_alias=True), None


def schema(model: Any) -> dict[str, Any]:
    """The model's JSON Schema (for `apollo11 workflows --json`, ListWorkflows and
    DescribeWorkflow)."""
    out: dict[str, Any] = model.model_json_schema()
    return out


def typed_step(fn: Any, model: Any) -> Any:
    """`fn`, given `ctx.input` as an instance of `model` (once: a function already
    typed is returned as it is)."""
    if getattr(fn, _TYPED, None) is not None:
        return fn
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def run_async(ctx: Any) -> Any:
            return await fn(dataclasses.replace(ctx, input=model.model_validate(ctx.input)))

        setattr(run_async, _TYPED, model)
        return run_async

    @functools.wraps(fn)
    def run(ctx: Any) -> Any:
        return fn(dataclasses.replace(ctx, input=model.model_validate(ctx.input)))

    setattr(run, _TYPED, model)
    return run


def result_checked(fn: Any, check: Callable[[Any], Any]) -> Any:
    """`fn`, its return value passed through `check` (once: a function already
    checked is returned as it is). The check runs where the step runs, embedded, on
    a worker or in its own process, so that what crosses to the primary is JSON."""
    if getattr(fn, _CHECKED, False):
        return fn
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def run_async(ctx: Any) -> Any:
            return check(await fn(ctx))

        setattr(run_async, _CHECKED, True)
        return run_async

    @functools.wraps(fn)
    def run(ctx: Any) -> Any:
        out = fn(ctx)
        if inspect.isawaitable(out):  # a plain function that returns a coroutine
            return _checked_later(out, check)
        return check(out)

    setattr(run, _CHECKED, True)
    return run


async def _checked_later(out: Awaitable[Any], check: Callable[[Any], Any]) -> Any:
    return check(await out)


def typed(step: Any, model: Any) -> Any:
    """`step` (a workflow.Step) with its function and its compensation typed."""
    changes: dict[str, Any] = {}
    if callable(step.fn):
        changes["fn"] = typed_step(step.fn, model)
    comp = getattr(step.idempotency, "compensate", None)
    if callable(comp):
        changes["idempotency"] = dataclasses.replace(
            step.idempotency, compensate=typed_step(comp, model)
        )
    return dataclasses.replace(step, **changes) if changes else step


def _path(what: str, loc: tuple[int | str, ...]) -> str:
    out = what
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out
