"""The flow-control gauges (docs/flow-control.md, "Metrics and alerts"), read from the
primary's engine when /metrics is scraped: nothing on the engine's path keeps them.

Per concurrency limit id (declared in code, so bounded): the holders of its slots
(`apollo11_flow_running`), the tasks in its queues (`apollo11_flow_queued`) and how
long the longest of them has waited (`apollo11_flow_oldest_queued_seconds`). Per key
value (not bounded: a tenant, a host): each limit's `FLOW_TOP_KEYS` values with the
most waiting, and the rest summed under key="other" (`apollo11_flow_key_queued`).

Each scrape exports exactly the series of that moment: a value that left the top set
or whose queue emptied, a limit no longer declared and no longer held, is removed,
never left at its last reading. A node whose engine does not lead exports none of
these: the queues are the primary's, and its numbers are the cluster's.

Cost: one pass over the key values with holders and the keys with a queue (a queue's
oldest is O(the fairness values in it)), once a scrape, on the event loop, as the
other scrape-time gauges (scrape.py).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from apollo11.scheduler import metrics
from apollo11.scheduler.flow import Concurrency

if TYPE_CHECKING:
    from apollo11.scheduler.engine import Engine


@dataclass(frozen=True, slots=True)
class FlowLoad:
    """What the gauges say, by limit id; `keys`: (limit id, key label) -> waiting."""

    running: dict[str, int] = field(default_factory=dict)
    queued: dict[str, int] = field(default_factory=dict)
    oldest_s: dict[str, float] = field(default_factory=dict)
    keys: dict[tuple[str, str], int] = field(default_factory=dict)
    rejecting: frozenset[str] = frozenset()  # declared with on_full="reject_new"


def top_keys(
    waiting: Mapping[str, int],
    n: int = metrics.FLOW_TOP_KEYS,
    other: str = metrics.FLOW_OTHER_KEYS,
) -> dict[str, int]:
    """The `n` values with the most waiting (ties by value, so a scrape is the same
    on every run) and the rest summed under `other`, present only when there is a rest.
    A value spelled like `other` counts with the rest: one label, one meaning."""
    ranked = heapq.nsmallest(
        n, ((-count, value) for value, count in waiting.items() if value != other)
    )
    top = {value: -negative for negative, value in ranked}
    rest = sum(waiting.values()) - sum(top.values())
    if rest:
        top[other] = rest
    return top


def load(engine: Engine) -> FlowLoad:
    """The flow gauges of a leading engine, now."""
    gate = engine.flow
    declared: set[str] = set()
    rejecting: set[str] = set()
    for wf in engine.registry.all():
        for limit in wf.flow.limits:
            if isinstance(limit.decl, Concurrency):
                declared.add(limit.id)
                if limit.decl.on_full == "reject_new":
                    rejecting.add(limit.id)
    # the fold's holders and this engine's starts not folded yet: count() unites them
    held = {
        (lid, v) for lid, by_value in engine.store.state.occupancy.holders.items() for v in by_value
    }
    held.update(gate.own_keys())
    running = dict.fromkeys(declared, 0)
    for key in held:
        running[key[0]] = running.get(key[0], 0) + gate.count(key)
    queued = dict.fromkeys(running, 0)
    oldest_ms: dict[str, int] = {}
    per_value: dict[str, dict[str, int]] = {}
    for key in gate.waiting_keys():
        n = gate.queued(key)
        if not n:
            continue
        lid, value = key
        queued[lid] = queued.get(lid, 0) + n
        per_value.setdefault(lid, {})[value] = n
        since = gate.waited_since(key)
        if since is not None and (lid not in oldest_ms or since < oldest_ms[lid]):
            oldest_ms[lid] = since
    now_ms = engine.clock.now() * 1000
    return FlowLoad(
        running=running,
        queued=queued,
        oldest_s={
            lid: max(0.0, (now_ms - oldest_ms[lid]) / 1000) if lid in oldest_ms else 0.0
            for lid in queued
        },
        keys={
            (lid, label): n
            for lid, values in per_value.items()
            for label, n in top_keys(values).items()
        },
        rejecting=frozenset(rejecting),
    )


def export(flow: FlowLoad | None) -> None:
    """Set the gauges to exactly `flow` (None: none of these series)."""
    flow = flow or FlowLoad()
    for gauge, values in (
        (metrics.FLOW_RUNNING, flow.running),
        (metrics.FLOW_QUEUED, flow.queued),
        (metrics.FLOW_OLDEST_QUEUED, flow.oldest_s),
    ):
        gauge.clear()
        for lid, value in values.items():
            gauge.labels(lid).set(value)
    metrics.FLOW_KEY_QUEUED.clear()
    for (lid, label), n in flow.keys.items():
        metrics.FLOW_KEY_QUEUED.labels(lid, label).set(n)
    for lid in flow.rejecting:
        # at 0 from the start: increase() sees the first refusal as a rise
        metrics.FLOW_REJECTED.labels(lid)


def refresh(engine: Engine | None) -> None:
    """The flow gauges at scrape time: the leading engine's, else none."""
    export(load(engine) if engine is not None and engine.leading else None)
