"""The gauges /metrics reads at scrape time: cheaper to read from the node when
asked than to keep updated on every change."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from apollo11.scheduler import metrics
from apollo11.scheduler.flow import DEFAULT_PRIORITY, PRIORITIES
from apollo11.scheduler.state import TaskStatus
from apollo11.scheduler.web import flowscrape

if TYPE_CHECKING:
    from apollo11.scheduler.nodeview import NodeView
    from apollo11.scheduler.state import TaskState


def refresh(node: NodeView) -> None:
    """Gauges that are cheaper to read at scrape time than to keep updated."""
    metrics.refresh_disk(str(node.settings.data_dir))
    store = node.store
    if store is None:
        return
    metrics.LOG_WRITABLE.set(1 if node.log_trouble is None and store.log.failure is None else 0)
    primary = node.role == "primary"
    metrics.ROLE.set(1 if primary else 0)
    s = node.settings
    metrics.STANDBYS_CONNECTED.set(len(node.hub.connected()) if primary else 0)
    c = node.cluster_config
    strict = primary and not s.standalone and c.sync_mode == "strict"
    metrics.STANDBYS_REQUIRED.set(c.sync_replicas if strict else 0)
    metrics.TERM.set(max(node.known_term, store.state.term))
    metrics.DURABLE_EVENT_ID.set(store.log.durable_id)
    metrics.RECOVERY_SECONDS.set(store.recovery.seconds)
    tasks = store.state.tasks.values()
    active, waiting = unfinished(tasks)
    metrics.ACTIVE_TASKS.set(active)
    for priority, n in waiting.items():
        metrics.TASK_PRIORITY_WAITING.labels(str(priority)).set(n)
    paused(tasks)
    owed = sum(t.owed for t in tasks)
    workers = node.workers()
    metrics.WORKERS_CONNECTED.set(len(workers))
    busy = sum(w.slots_used for w in workers)
    metrics.WORKER_SLOTS.labels("busy").set(busy)
    metrics.WORKER_SLOTS.labels("free").set(max(0, sum(w.slots for w in workers) - busy))
    metrics.RUNNING_STEPS.set(node.engine.running() if node.engine else 0)
    backlog = node.engine.compensation_backlog() if node.engine else 0
    metrics.COMPENSATION_BACKLOG.set(max(owed, backlog))
    flowscrape.refresh(node.engine if primary else None)


def unfinished(tasks: Iterable[TaskState]) -> tuple[int, dict[int, int]]:
    """Tasks not finished; and those not started yet (PENDING), by priority."""
    active = 0
    waiting = dict.fromkeys(PRIORITIES, 0)
    pending = TaskStatus.PENDING
    for t in tasks:
        if t.quiescent:
            continue
        active += 1
        if t.status is pending:
            priority = t.flow.get("priority", DEFAULT_PRIORITY) if t.flow else DEFAULT_PRIORITY
            if priority in waiting:
                waiting[priority] += 1
    return active, waiting


_paused_shown: set[str] = set()  # workflows with a series: set to 0, not left at their last


def paused(tasks: Iterable[TaskState]) -> dict[str, int]:
    """Set `apollo11_paused_tasks` by workflow: the tasks PAUSED now (on every node:
    standbys fold the same log; the alert takes the max). Returns the counts."""
    counts: dict[str, int] = {}
    status = TaskStatus.PAUSED
    for t in tasks:
        if t.status is status:
            counts[t.workflow] = counts.get(t.workflow, 0) + 1
    for wf in _paused_shown - counts.keys():
        metrics.PAUSED_TASKS.labels(wf).set(0)
    for wf, n in counts.items():
        metrics.PAUSED_TASKS.labels(wf).set(n)
    _paused_shown.update(counts)
    return counts
