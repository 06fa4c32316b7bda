"""The one mapping from a node's settings into its parts' options: the log's, the
store's, the engine's, its executors', its lease and its workflows. Anything a
setting changes in them changes here only."""

from __future__ import annotations

from typing import TypedDict

from apollo11.lease import Lease, MemoryLease
from apollo11.scheduler import retention
from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.dispatch import LocalFirstExecutor, RemoteExecutor
from apollo11.scheduler.engine import Executor, InProcessExecutor, RetentionOptions
from apollo11.scheduler.log import LogConfig
from apollo11.scheduler.retrypace import RetryBudget
from apollo11.scheduler.state import StoreConfig
from apollo11.scheduler.workflow import Registry


class EngineOptions(TypedDict):
    concurrency: int
    idempotency_ttl_s: float
    adopt_grace_s: float
    retry_budget: RetryBudget | None
    retention: RetentionOptions


def store_config(s: NodeSettings, *, segment_max_bytes: int) -> StoreConfig:
    """`segment_max_bytes`: the node's current size (a standby adopts its primary's)."""
    return StoreConfig(
        log=LogConfig(
            segment_max_bytes=segment_max_bytes,
            payload_max_bytes=s.payload_max_bytes,
            # a submission may always carry what any event may
            submit_max_bytes=max(s.submit_max_bytes, s.payload_max_bytes),
            json_max_depth=s.json_max_depth,
            fsync=s.fsync,
        ),
        snapshot_interval=s.snapshot_interval,
        snapshot_min_interval_s=s.snapshot_min_interval,
        keep_all_segments=s.log_retention == "all",
    )


# With remote execution the workers' slots are the limit; the engine's own is only a
# bound on what one primary follows at once.
REMOTE_CONCURRENCY = 100_000


def engine_options(s: NodeSettings) -> EngineOptions:
    concurrency = s.concurrency if s.execution == "embedded" else REMOTE_CONCURRENCY
    return {
        "concurrency": concurrency,
        "idempotency_ttl_s": s.idempotency_ttl,
        # an adopted attempt outlasts its workers' time to come back and report (the
        # heartbeat timeout, after which the executor reports it lost), by a second
        "adopt_grace_s": s.worker_heartbeat_timeout + 1.0,
        "retry_budget": (
            RetryBudget(min_per_s=s.retry_budget_min, share=s.retry_budget)
            if s.retry_budget_min > 0
            else None
        ),
        "retention": RetentionOptions(
            rules=retention.parse(s.retention),
            counted_from=s.retention_from,
            interval_s=s.retention_sweep_interval,
        ),
    }


def executors(s: NodeSettings, registry: Registry) -> tuple[RemoteExecutor | None, Executor | None]:
    """(the workers' side of the engine, the engine's executor): (None, None) when
    steps run in process only (the engine's own executor). With `both`, a step that
    declares limits goes to a worker, which enforces them."""
    if s.execution == "embedded":
        return None, None
    dispatch = RemoteExecutor(
        node_id=s.node_id,
        heartbeat_interval_s=s.worker_heartbeat_interval,
        heartbeat_timeout_s=s.worker_heartbeat_timeout,
    )
    if s.execution == "both":
        local = InProcessExecutor(threads=s.concurrency)
        return dispatch, LocalFirstExecutor(
            local, dispatch, s.concurrency, needs_worker=registry.needs_worker
        )
    return dispatch, dispatch


def load_workflows(registry: Registry, s: NodeSettings) -> None:
    for module in s.workflows:
        registry.load_module(module)
    if "apollo11.scheduler.examples" in s.workflows:
        from apollo11.scheduler import examples

        examples.configure(s.examples_dir)  # the one directory its `ledger` may write in


def limits_refusal(registry: Registry, s: NodeSettings) -> str | None:
    """Why this node must not start: it runs every step itself (`--execution
    embedded`), and steps declare limits, which only a worker enforces (a step's own
    child process, held by cgroup or rlimits: docs/workers.md). None: nothing wrong."""
    if s.execution != "embedded":
        return None
    limited = registry.limited_steps()
    if not limited:
        return None
    return (
        f"{'; '.join(limited)} {'declares' if len(limited) == 1 else 'declare'} limits=, "
        f"which are enforced on workers only (each attempt in a child process under its "
        f"limits), and this node runs every step itself: start it with --execution remote "
        f"(or both) and run `apollo11 worker`, or drop limits="
    )


def lease(s: NodeSettings) -> Lease:
    if s.standalone:
        # an in-memory lease (the role loop's min_term keeps its terms above the log's)
        return MemoryLease(ttl_s=s.lease_ttl)
    from apollo11.lease import EtcdLease

    return EtcdLease(s.etcd, cluster=s.cluster, ttl_s=s.lease_ttl, **s.etcd_security())
