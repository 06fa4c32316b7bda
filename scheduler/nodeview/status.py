"""What `apollo11 status`, GetStatus and the cluster page show: one typed shape.

It lives beside the port that returns it (ports.py): the node builds it, and the
servers see the node only through that port. The node fills it from what it knows
(`Node.status()`): its own log and role, the member records etcd holds, and, on
the primary, what each standby's stream acknowledged (replicator/hub.py). Lag is
counted against the furthest log anyone knows of: the primary's durable end, or,
on a standby, the primary's end as its last heartbeat said.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from dataclasses import dataclass

from apollo11.lease import LeaderInfo, MemberInfo
from apollo11.replicator import StandbyView


@dataclass(frozen=True, slots=True)
class MemberStatus:
    node_id: str
    role: str
    address: str
    last_event_id: int
    term: int
    lag_events: int = 0
    lag_ms: float = 0.0
    connected: bool = False
    synchronous: bool = False
    ack_p50_ms: float = 0.0
    ack_p99_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class LeaseStatus:
    ttl_s: float
    remaining_s: float  # -1: unknown on this node (it does not hold the lease)


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    name: str
    address: str
    slots: int
    slots_used: int
    workflows: tuple[str, ...]  # "name vN"
    labels: tuple[tuple[str, str], ...]
    last_heartbeat_s_ago: float
    attempts_running: int
    connected_s_ago: float
    version: str


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    node_id: str
    role: str
    term: int
    leader: LeaderInfo | None
    lease: LeaseStatus | None
    members: tuple[MemberStatus, ...]
    last_event_id: int
    applied_event_id: int
    recovery: str
    running_steps: int
    active_tasks: int
    security: str
    notice: str
    workers: tuple[WorkerStatus, ...] = ()
    execution: str = "embedded"
    terms_started: int = 0  # leaders that took over, as this node's log records them


@dataclass(frozen=True, slots=True)
class TermRecord:
    """One term of the history (`apollo11 history`): who led it, from which event."""

    term: int
    first_event_id: int
    node_id: str = ""  # "": the log no longer keeps its TERM_STARTED (retention)
    address: str = ""
    started_ms: int = 0
    began: str = ""  # bootstrap, failover, switchover, restart ("": not recorded)
    previous: str = ""  # the previous term's leader


DOWN = "down"  # a roster member with no record in etcd: not running, or cut off


def members(
    me: MemberStatus,
    records: Iterable[MemberInfo],
    *,
    roster: Iterable[str] = (),
    standbys: Iterable[StandbyView] = (),
    live: set[str] | frozenset[str] = frozenset(),
    synchronous: bool = False,
    head: int,
    durable: int,
) -> tuple[MemberStatus, ...]:
    """Every member, sorted by node id: etcd's records, this node as it knows itself,
    (on the primary) each standby stream's acknowledgements, and the roster's members
    none of those know of, as "down": a member's record goes with its etcd lease, but
    an election still counts it until `apollo11 roster remove`."""
    by_id = {
        r.node_id: MemberStatus(
            r.node_id,
            r.role,
            r.address,
            r.last_event_id,
            r.last_term,
            connected=r.role == "primary",
        )
        for r in records
    }
    by_id[me.node_id] = me
    for node_id in roster:
        by_id.setdefault(node_id, MemberStatus(node_id, DOWN, "", 0, 0))
    now = time.monotonic()
    for v in standbys:
        m = by_id.get(v.node_id) or MemberStatus(v.node_id, "standby", v.address, 0, 0)
        caught = v.caught_up_at or now
        by_id[v.node_id] = dataclasses.replace(
            m,
            last_event_id=max(m.last_event_id, v.acked_id),
            connected=v.node_id in live,
            synchronous=v.node_id in live and synchronous,
            ack_p50_ms=v.lag_ms(0.50),
            ack_p99_ms=v.lag_ms(0.99),
            lag_ms=0.0 if v.acked_id >= durable else round((now - caught) * 1000, 1),
        )
    return tuple(
        # a down member's position is unknown: no lag, rather than the whole log
        dataclasses.replace(m, lag_events=0 if m.role == DOWN else max(0, head - m.last_event_id))
        for _, m in sorted(by_id.items())
    )
