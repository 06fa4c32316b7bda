"""How late the event loop wakes a timer: a busy or blocked loop delays everything
a node does (its lease renewals, its acks, its answers), and this is the one number
that shows it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from apollo11.scheduler import metrics


async def watch_loop_lag(
    on_tick: Callable[[float], None] | None = None, period_s: float = 0.05
) -> None:
    loop = asyncio.get_running_loop()
    while True:
        t0 = loop.time()
        await asyncio.sleep(period_s)
        lag = max(0.0, loop.time() - t0 - period_s)
        metrics.LOOP_LAG_SECONDS.observe(lag)
        if on_tick is not None:
            on_tick(lag)
