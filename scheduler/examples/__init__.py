"""Bundled workflows. `etl` is a five-stage pipeline; `approval` is a
durable task (docs/durable.md): charge, wait for an approval event, refund if none
comes in time; `fulfil` is a durable task with children: one `pack` task per item,
spawned and gathered, the first failure refunding the order; `invoice` has a typed
input (a pydantic model, checked at submit) and a typed result; `runbook` is an ops
runbook under flow control (docs/flow-control.md): at most two runs per host at once,
teams taking turns for slots.

Its input controls what it does, so tests and demos can script failures:

* `step_seconds` (default 0.05): how long each step works;
* `fail_step` and `fail_times`: that step raises on its first `fail_times` attempts;
* `ledger`: a file path; every step execution appends one line
  `task_id step attempt node_id term:attempt worker` before it works, so anyone
  can count what ran how often, and where (a step killed mid-run still has its
  line). The fifth field is the attempt's fencing token: a reader that refuses a
  line whose token is below the highest it has seen for the step is the fenced
  external system of docs/workflows.md (a deposed primary's late line is refused). The
  last is where it ran: a worker's name, or the node's id when embedded.

Whoever may submit a task chooses `ledger`, so it is confined to one
directory: the node setting `examples_dir` (default: the system temporary
directory). A relative path is taken inside it; a path that resolves
(symlinks followed) outside it fails the step for good, before anything is
written.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from apollo11 import (
    Checkpoint,
    ChildFailed,
    Concurrency,
    DedupeKey,
    DurableContext,
    DurableWorkflow,
    Idempotent,
    Retry,
    StepContext,
    StepError,
    Workflow,
    current_step,
)

etl = Workflow("etl", version=1, description="collect → clean → feature → infer → persist")


_examples_dir: Path | None = None


def configure(examples_dir: Path | None) -> None:
    """Set the directory `ledger` files must be in (None: the system temporary one).

    The node calls this at start with its `examples_dir` setting when it loads
    this module; a plain argument rather than an environment variable, so that
    the flag and the config file reach it too and shell steps' processes do not
    inherit it.
    """
    global _examples_dir
    _examples_dir = examples_dir


def allowed_dir() -> str:
    """The ledger directory, resolved (symlinks followed), as paths are compared to it."""
    return os.path.realpath(_examples_dir or tempfile.gettempdir())


def ledger_path(given: Any) -> str:
    """Where `given` resolves to, if that is inside allowed_dir(); else StepError (final:
    the same input fails the same way on every attempt)."""
    base = allowed_dir()
    if not isinstance(given, str):
        raise StepError(f"ledger must be a path string (got {type(given).__name__})", final=True)
    # join keeps an absolute path as it is and puts a relative one inside base
    path = os.path.realpath(os.path.join(base, given))
    if path == base or os.path.commonpath([base, path]) != base:
        raise StepError(
            f"ledger {given!r} resolves to {path}, outside the allowed directory {base} "
            f"(node setting examples_dir): give a file name or a path inside it",
            final=True,
        )
    data = _inside_a_data_dir(base, path)
    if data is not None:
        # The default directory is the system's temporary one, where test and dev
        # nodes keep their data: appending to a segment would corrupt a log.
        raise StepError(
            f"ledger {given!r} resolves to {path}, inside the Apollo-11 data directory "
            f"{data}: give a file name of its own",
            final=True,
        )
    return path


def _inside_a_data_dir(base: str, path: str) -> str | None:
    """The data directory (a folder with log/ or snapshots/ in it) on the way from
    `base` down to `path`, if any: no ledger may write into one."""
    d = os.path.dirname(path)
    while True:
        if any(os.path.isdir(os.path.join(d, sub)) for sub in ("log", "snapshots")):
            return d
        if d == base or len(d) <= len(base):
            return None
        d = os.path.dirname(d)


def _ledger(ctx: StepContext) -> None:
    given = (ctx.input or {}).get("ledger")
    if given:
        path = ledger_path(given)
        token = ctx.fencing_token
        where = ctx.worker or ctx.node_id
        line = f"{ctx.task_id} {ctx.step} {ctx.attempt} {ctx.node_id} {token} {where}\n".encode()
        _append(path, line)


def _append(path: str, line: bytes) -> None:
    # O_NOFOLLOW: a symlink put in place of the file since the check is refused
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, line)  # one write(2): lines never interleave, and survive a SIGKILL
    finally:
        os.close(fd)


async def _work(ctx: StepContext) -> dict[str, Any]:
    params = ctx.input or {}
    _ledger(ctx)
    await asyncio.sleep(float(params.get("step_seconds", 0.05)))
    if params.get("fail_step") == ctx.step and ctx.attempt <= int(params.get("fail_times", 0)):
        raise RuntimeError(f"injected failure of {ctx.step} (attempt {ctx.attempt})")
    upstream = sum(r.get("rows", 0) for r in ctx.results.values() if isinstance(r, dict))
    return {"rows": upstream + 100, "uri": f"file:///tmp/apollo11/{ctx.task_id}/{ctx.step}"}


RETRY = Retry(attempts=4, backoff_s=0.05, max_backoff_s=1.0)


@etl.step(idempotency=Idempotent(), retry=RETRY)
async def collect(ctx: StepContext) -> dict[str, Any]:
    """Pull raw records (a re-pull gives the same snapshot: idempotent)."""
    return await _work(ctx)


@etl.step(after=["collect"], idempotency=Idempotent(), retry=RETRY)
async def clean(ctx: StepContext) -> dict[str, Any]:
    """Write cleaned data to a temp file and rename it into place."""
    return await _work(ctx)


@etl.step(after=["clean"], idempotency=Checkpoint(), retry=RETRY)
async def feature(ctx: StepContext) -> dict[str, Any]:
    """Compute features in chunks, resuming from its own progress marker."""
    return await _work(ctx)


@etl.step(after=["feature"], idempotency=DedupeKey(), retry=RETRY)
async def infer(ctx: StepContext) -> dict[str, Any]:
    """Call the model service with ctx.dedupe_key as the request id."""
    return await _work(ctx)


@etl.step(after=["infer"], idempotency=DedupeKey(), retry=RETRY)
async def persist(ctx: StepContext) -> dict[str, Any]:
    """Upsert results keyed by ctx.dedupe_key."""
    return await _work(ctx)


# ------------------------------------------------------------------ approval

approval = DurableWorkflow(
    "approval", version=1, description="charge → wait for approval (or time out) → refund"
)


def _book(order: dict[str, Any], what: str) -> None:
    """One ledger line per execution of a side effect: `dedupe_key what try`."""
    given = order.get("ledger")
    info = current_step()
    if given and info is not None:
        _append(ledger_path(given), f"{info.dedupe_key} {what} {info.attempt}\n".encode())


def charge_card(order: dict[str, Any]) -> dict[str, Any]:
    """Charge the order (the payment service dedupes on current_step().dedupe_key)."""
    _book(order, "charge")
    return {"charge_id": f"ch-{order.get('id')}", "amount": order.get("amount", 0)}


def refund(order: dict[str, Any], charge: dict[str, Any]) -> dict[str, Any]:
    """Refund a charge (refunding one twice is refused by the service: idempotent)."""
    _book(order, "refund")
    return {"refunded": charge["charge_id"]}


def ship(order: dict[str, Any]) -> dict[str, Any]:
    """Ship the order (`ship_seconds`: how long it takes; the shipper dedupes)."""
    _book(order, "ship")
    time.sleep(float(order.get("ship_seconds", 0)))
    return {"shipment": f"sh-{order.get('id')}", "items": list(order.get("items", []))}


@approval.main
async def run_approval(ctx: DurableContext, order: dict[str, Any]) -> dict[str, Any]:
    """Input: {"id", "amount", "items", "timeout_s" (default 3 days), "ledger",
    "cooldown_s", "ship_seconds"}. Send
    the event `approval:<id>` with a payload such as {"by": "alice"} to approve."""
    order = dict(order or {})
    charge = await ctx.step("charge", charge_card, order, idempotency=DedupeKey())
    timeout = timedelta(seconds=float(order.get("timeout_s", 3 * 24 * 3600)))
    decision = await ctx.wait_for_event(f"approval:{order.get('id')}", timeout=timeout)
    if decision is None:
        refunded = await ctx.step("refund", refund, order, charge, idempotency=Idempotent())
        return {"state": "refunded", **refunded}
    if float(order.get("cooldown_s", 0)) > 0:
        await ctx.sleep(float(order["cooldown_s"]))
    shipment = await ctx.step("ship", ship, order, idempotency=DedupeKey())
    return {"state": "shipped", "approved_by": decision, **shipment}


# ------------------------------------------------------------------- fulfil

pack = Workflow("pack", version=1, description="pack one item (a child of fulfil)")


@pack.step(idempotency=DedupeKey())
async def pack_item(ctx: StepContext) -> dict[str, Any]:
    """Input: {"item", "order", "ledger", "step_seconds", "out_of_stock"}."""
    given = dict(ctx.input or {})
    if given.get("ledger"):
        line = f"{ctx.dedupe_key} pack {ctx.attempt} {ctx.worker}\n".encode()
        _append(ledger_path(given["ledger"]), line)
    await asyncio.sleep(float(given.get("step_seconds", 0.05)))
    if given.get("item") in (given.get("out_of_stock") or ()):
        raise StepError(f"{given.get('item')} is out of stock", final=True)
    return {"packed": given.get("item"), "order": given.get("order")}


fulfil = DurableWorkflow(
    "fulfil", version=1, description="charge → pack every item (children) → ship, or refund"
)


@fulfil.main
async def run_fulfil(ctx: DurableContext, order: dict[str, Any]) -> dict[str, Any]:
    """Input: {"id", "items", "ledger", "step_seconds", "out_of_stock": [items]}: one
    `pack` child per item, all at once; a child that fails refunds the order."""
    order = dict(order or {})
    charge = await ctx.step("charge", charge_card, order, idempotency=DedupeKey())
    children = [
        ctx.spawn(
            pack,
            {
                "item": item,
                "order": order.get("id"),
                "ledger": order.get("ledger"),
                "step_seconds": order.get("step_seconds", 0.05),
                "out_of_stock": order.get("out_of_stock", []),
            },
        )
        for item in order.get("items", [])
    ]
    try:
        packed = await ctx.gather(*children)
    except ChildFailed as e:
        refunded = await ctx.step("refund", refund, order, charge, idempotency=Idempotent())
        return {"state": "refunded", "because": e.message, **refunded}
    shipment = await ctx.step("ship", ship, order, idempotency=DedupeKey())
    return {"state": "shipped", "packed": [p["pack_item"] for p in packed], **shipment}


# ------------------------------------------------------------------- invoice


class Customer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1)
    email: str = ""


class InvoiceInput(BaseModel):
    """What `invoice` takes; anything else is refused at submit, naming the field."""

    model_config = ConfigDict(extra="forbid")
    customer: Customer
    amount_cents: int = Field(gt=0)
    currency: Literal["EUR", "USD"] = "EUR"


class InvoiceResult(BaseModel):
    """What an `invoice` task ends with: its final step's result must fit it."""

    invoice: str = Field(min_length=1)
    total_cents: int = Field(gt=0)
    currency: Literal["EUR", "USD"]


invoice = Workflow(
    "invoice",
    version=1,
    description="a typed input and result: price → issue",
    input=InvoiceInput,
    result=InvoiceResult,
)


@invoice.step(idempotency=Idempotent())
def price(ctx: StepContext) -> dict[str, Any]:
    order: InvoiceInput = ctx.input  # the model, not a dict
    return {"total_cents": order.amount_cents, "currency": order.currency}


@invoice.step(after=["price"], idempotency=Idempotent())
def issue(ctx: StepContext) -> InvoiceResult:
    order: InvoiceInput = ctx.input
    # the task's result: recorded as the model's JSON (a dict that fits would do too)
    return InvoiceResult(invoice=f"inv-{order.customer.id}", **ctx.results["price"])


# An ops runbook, one run per host it patches: at most two run against one host at
# once (the rest queue, first come first served, and say why), and teams take turns
# for the node's slots so one team's hundred hosts do not starve another's one. Its
# input is the etl's (`step_seconds`, `fail_step`, `ledger`) plus `host` and `team`.
runbook = Workflow(
    "runbook",
    version=1,
    description="drain → patch → restart → verify, at most two per host",
    concurrency=Concurrency(key="host", max=2),
    fairness="team",
)


@runbook.step(idempotency=Idempotent(), retry=RETRY)
async def drain(ctx: StepContext) -> dict[str, Any]:
    return await _work(ctx)


@runbook.step(after=["drain"], idempotency=DedupeKey(), retry=RETRY)
async def patch(ctx: StepContext) -> dict[str, Any]:
    return await _work(ctx)


@runbook.step(after=["patch"], idempotency=Idempotent(), retry=RETRY)
async def restart(ctx: StepContext) -> dict[str, Any]:
    return await _work(ctx)


@runbook.step(after=["restart"], idempotency=Idempotent(), retry=RETRY)
async def verify(ctx: StepContext) -> dict[str, Any]:
    return await _work(ctx)
