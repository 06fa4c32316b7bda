"""The approval example with a step moved: what a careless deploy would ship
(tests/scheduler/durable/test_replay_check.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from apollo11.scheduler.durable import DedupeKey, DurableContext, DurableWorkflow
from apollo11.scheduler.examples import charge_card, ship

approval = DurableWorkflow("approval", version=1)


@approval.main
async def run(ctx: DurableContext, order: dict[str, Any]) -> dict[str, Any]:
    charge = await ctx.step("charge", charge_card, order, idempotency=DedupeKey())
    await ctx.sleep(timedelta(minutes=5))  # new, before the wait the log holds
    decision = await ctx.wait_for_event(f"approval:{order.get('id')}", timeout=3600)
    shipment = await ctx.step("ship", ship, order, idempotency=DedupeKey())
    return {"charge": charge, "decision": decision, **shipment}
