"""Is this node id free? What a node checks in etcd before it publishes anything.

A member record under the node's own id is one of two things: this node's own,
from before a crash (its lease outlives the process by up to a TTL), or the
record of another live process that was given the same --node-id. Only what the
store shows tells them apart, never how long the check has waited:

* the record lapses: it was this node's own, or its process died. The id is free;
* it is written again (a new mod revision): another process publishes it;
* its lease is refreshed: it has more time left than it could have without a
  refresh since the first look (`refreshed`). A live member that is idle writes
  no new revision, it only keeps its lease alive (lease/base.py, `keep`), so this
  is what shows a duplicate of a quiet node. Issue 28: the check used to wait for
  a new revision alone, and refused a duplicate as "already live" only while the
  live node happened to change its record (just after it started); a settled one
  was reported as a record that "did not lapse" instead.

The wait is bounded, but the bound is not an answer: a store too slow to expire a
lease or to show its refresh is reported as that.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass

from apollo11.lease import Lease, MemberInfo
from apollo11.scheduler.errors import ApolloError

log = logging.getLogger("apollo11.scheduler.node")

DUPLICATE_HINT = (
    "two processes must not share a node id: give this one its own --node-id, or stop "
    "the other one (is a second `apollo11 dev` or another deployment using this etcd "
    "and --cluster?)"
)


@dataclass(frozen=True, slots=True)
class Sighting:
    """One look at the record: its mod revision and its lease's whole seconds left,
    between `asked` and `answered` on this node's monotonic clock."""

    revision: int
    left: int
    asked: float
    answered: float


def refreshed(first: Sighting, now: Sighting) -> bool:
    """Was the lease refreshed between the two looks? At `first` it ended before
    `first.answered + first.left + 1` (the store rounds down, and read it before the
    answer came). Unrefreshed, it has less than that end minus `now.asked` left at
    `now`, which the store read after `now.asked`. More than that is a refresh. A
    lease past its end that the store has not removed yet shows 0, never proof."""
    ends_by = first.answered + first.left + 1
    return now.left >= 1 and now.asked + now.left >= ends_by


async def _look(lease: Lease, node_id: str) -> tuple[Sighting, MemberInfo] | None:
    asked = time.monotonic()
    world = await lease.world()
    record = world.members.get(node_id)
    if record is None:
        return None
    left = await lease.member_lease_left(node_id)
    if left is None:
        return None
    revision = world.member_revisions.get(node_id, 0)
    return Sighting(revision, left, asked, time.monotonic()), record


async def check(lease: Lease, node_id: str, cluster: str) -> str:
    """The sentence saying the id is free; ApolloError when another live process
    holds it (or when the store never showed which it is, within the bound)."""
    # only for a store that neither expires a lease nor shows its refresh: a dead
    # record lapses within a TTL and a live one is seen refreshed within about as long
    bound = 5 * math.ceil(lease.ttl_s) + 5
    t0 = time.monotonic()
    first: Sighting | None = None
    while True:
        looked = await _look(lease, node_id)
        if looked is None:
            if first is None:
                return f"node id {node_id!r} is free"
            return f"node id {node_id!r}: its old record lapsed after {time.monotonic() - t0:.1f}s"
        now, record = looked
        holder = f"{record.role} at {record.address}"
        if first is None:
            first = now
            log.info(
                "node id %r has a member record (%s): waiting for it to lapse (this node's "
                "own, from before a restart) or to be kept alive (another process's)",
                node_id,
                holder,
            )
        elif now.revision != first.revision or refreshed(first, now):
            how = "writes it again" if now.revision != first.revision else "keeps its lease alive"
            raise ApolloError(
                f"node id {node_id!r} is already live in cluster {cluster!r}: another process "
                f"({holder}) holds its member record and {how}; {DUPLICATE_HINT}"
            )
        if time.monotonic() - t0 > bound:
            raise ApolloError(
                f"node id {node_id!r} has a member record in etcd ({holder}) that neither "
                f"lapsed nor was seen kept alive within {bound}s (is etcd overloaded?): start "
                f"this node again; if it is then refused as already live, {DUPLICATE_HINT}"
            )
        await asyncio.sleep(min(0.2, lease.ttl_s / 10))
