"""Ship what is left, as the archive benches do once their history is written."""

from __future__ import annotations

import asyncio

from apollo11.scheduler.bucket import Shipper
from apollo11.scheduler.errors import BucketError


async def ship_until_idle(ship: Shipper) -> None:
    """Cycle until the shipper is idle: every sealed segment in the bucket (the open
    one stays on disk, as on a node), and the newest snapshot if it is restorable.

    The catalog is read afresh first: the last call of a cancelled `run()` may still
    finish on its thread, and a write it overtook is refused and the catalog read
    again, as in Shipper.run."""
    ship.catalog = None
    for _ in range(100_000):
        try:
            step = await ship.cycle()
        except BucketError:
            ship.catalog = None
            await asyncio.sleep(0.2)
            continue
        if step.kind in ("idle", "blocked"):
            return
    raise RuntimeError(f"still shipping: {ship.sentence}")
