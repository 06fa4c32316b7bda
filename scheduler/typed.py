"""Typed workflow inputs: a pydantic model that a submission's input must fit.

`Workflow("billing", version=2, input=BillingInput)`: the input is checked at
submit (INVALID_ARGUMENT naming each field at fault, `input.customer.id: Field
required`), the log keeps the JSON as submitted, and each step is given the
model (`ctx.input` is a `BillingInput`), embedded, on a worker or in a step's
own process alike. The check happens where the step is called, so a step's
context stays plain JSON on its way to a worker; an input that no longer fits
(a model changed without a new version) fails the attempt, like any error of
the step's own. Untyped workflows are untouched.

pydantic is imported by the application that declares a model, not here.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any

from apollo11.scheduler.errors import InvalidArgumentError

_TYPED = "__apollo11_input_model__"  # set on a function typed_step made
ERRORS_SHOWN = 5  # a payload with more wrong fields: the first five, and how many more


def is_model(model: Any) -> bool:
    """A pydantic (v2) model class."""
    return isinstance(model, type) and callable(getattr(model, "model_validate", None))


def check_input(model: Any, raw: Any, *, what: str = "input") -> None:
    """Refuse `raw` unless it fits `model`: InvalidArgumentError naming each field."""
    from pydantic import ValidationError

    try:
        model.model_validate(raw)
    except ValidationError as e:
        errors = e.errors(include_url=False)
        shown = [f"{_path(what, err['loc'])}: {err['msg']}" for err in errors[:ERRORS_SHOWN]]
        more = len(errors) - len(shown)
        raise InvalidArgumentError(
            f"{'; '.join(shown)}"
            + (f" (and {more} more)" if more > 0 else "")
            + f" (the workflow's input is {model.__name__})"
        ) from None


def schema(model: Any) -> dict[str, Any]:
    """The model's JSON Schema (for `apollo11 workflows --json` and ListWorkflows)."""
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
