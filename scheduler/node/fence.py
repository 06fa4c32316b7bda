"""The fence: how long this node may act as the primary on its last renewal.

Losing the lease is an explicit branch, taken before the TTL can run out. etcd
counts a lease's TTL from after it handled our renewal, so the fence counts
from before we sent it (`renewed_at`, monotonic) and stops at `fence_after_s`,
a margin short of the TTL. The keepalive renews every TTL/3; the watchdog
looks every 50 ms; and `valid()` is what every acknowledgement and every
attempt's start checks, because a node resumed from a pause runs what was
ready (an ack, a step about to begin) before the watchdog's next look. The
fence only records why it was lost (`lost`) and wakes the role loop, which
decides the demotion with every other reason to stop leading
(scheduler/node/role.py); from that moment `valid()` is False, so nothing is
acknowledged or started while the loop gets there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from apollo11.lease import Lease, LeaseUnavailable
from apollo11.scheduler import metrics

log = logging.getLogger("apollo11.scheduler.node")

WATCHDOG_S = 0.05


def fence_after(ttl_s: float) -> float:
    """Fence well before etcd can expire the lease (it counts from after our renewal)."""
    return ttl_s - max(0.5, ttl_s * 0.25)


class Fence:
    def __init__(self, lease: Callable[[], Lease], ttl_s: float) -> None:
        self._lease = lease  # the node's lease, once it has one
        self.ttl_s = ttl_s
        self.fence_after_s = fence_after(ttl_s)
        self.renewed_at = 0.0  # monotonic time (taken before the request) of the last renewal
        self.holding = False  # armed at promotion, until the node stops being primary
        self.lost: str | None = None  # why the lease is no longer this node's (None: held)

    def set_ttl(self, ttl_s: float) -> None:
        """The TTL of the next lease (never while holding one: it keeps its own)."""
        if not self.holding:
            self.ttl_s = ttl_s
            self.fence_after_s = fence_after(ttl_s)

    def arm(self, renewed_at: float) -> None:
        self.renewed_at = renewed_at
        self.holding = True
        self.lost = None

    def disarm(self) -> None:
        self.holding = False

    def valid(self) -> bool:
        """Sure to hold the lease now?"""
        return (
            self.holding
            and self.lost is None
            and time.monotonic() - self.renewed_at <= self.fence_after_s
        )

    def lapsed(self) -> str | None:
        """Why this node, holding, may no longer act as the primary; None: it may."""
        if not self.holding:
            return None
        if self.lost is not None:
            return self.lost
        since = time.monotonic() - self.renewed_at
        if since > self.fence_after_s:
            return f"the lease was not renewed for {since:.1f}s (TTL {self.ttl_s:g}s)"
        return None

    def remaining_s(self) -> float:
        """Of the TTL, as etcd may count it at the latest; -1 when not holding."""
        if not self.holding:
            return -1.0
        return max(0.0, self.ttl_s - (time.monotonic() - self.renewed_at))

    def _lose(self, why: str, wake: Callable[[], None]) -> None:
        if self.lost is None:
            self.lost = why
        wake()

    async def keepalive(self, wake: Callable[[], None]) -> None:
        """Renew every TTL/3. A renewal that etcd refuses means the lease is gone."""
        lease = self._lease()
        period = lease.ttl_s / 3
        while self.holding and self.lost is None:
            t0 = time.monotonic()
            try:
                alive = await lease.renew()
            except LeaseUnavailable as e:
                metrics.LEASE_RENEWALS.labels("error").inc()
                log.warning("lease renewal failed (will retry until the fence): %s", e)
                await asyncio.sleep(min(0.2, period))
                continue
            if not alive:
                metrics.LEASE_RENEWALS.labels("lost").inc()
                self._lose("etcd says the lease is gone", wake)
                return
            metrics.LEASE_RENEWALS.labels("ok").inc()
            self.renewed_at = t0
            await asyncio.sleep(max(0.0, period - (time.monotonic() - t0)))

    async def watchdog(self, wake: Callable[[], None]) -> None:
        """Fence before the lease can expire: the explicit branch for losing it."""
        while self.holding:
            why = self.lapsed()
            if why is not None:
                self._lose(why, wake)
                return
            await asyncio.sleep(WATCHDOG_S)
