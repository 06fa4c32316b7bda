"""Prometheus metrics of one node (exposed on --http /metrics).

Names follow Prometheus conventions: `apollo11_` prefix, units in the name,
`_total` for counters. Hot paths update them per batch, never per event.
"""

from __future__ import annotations

import gc
import os
import time
from bisect import bisect_left
from collections.abc import Sequence

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics

# No `_created` series beside every counter and histogram: one more series each,
# which nobody graphs (issue 19).
disable_created_metrics()  # type: ignore[no-untyped-call]

LOG_APPENDS = Counter("apollo11_log_appends_total", "Events made durable in the event log")
LOG_BATCH_EVENTS = Histogram(
    "apollo11_log_fsync_batch_events",
    "Events per group-commit batch (one write and one fsync each)",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384),
)
LOG_FSYNC_SECONDS = Histogram(
    "apollo11_log_fsync_seconds",
    "Time to write and fsync one group-commit batch",
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
)
LOG_TORN_TAILS = Counter(
    "apollo11_log_torn_tail_truncations_total",
    "Torn or corrupt tails cut off the last segment at open",
)
LOG_WRITE_ERRORS = Counter(
    "apollo11_log_write_errors_total",
    "Failed writes or fsyncs of the event log (each makes the log refuse appends: the "
    "node steps down and reopens it once writes work again)",
)
LOG_WRITABLE = Gauge(
    "apollo11_log_writable",
    "1 while this node's event log accepts appends, 0 while it refuses them after a failure",
)
DISK_FREE_BYTES = Gauge(
    "apollo11_disk_free_bytes",
    "Space left for the data directory's file system (for unprivileged writers)",
    ["path"],
)
DISK_FREE_RATIO = Gauge(
    "apollo11_disk_free_ratio",
    "apollo11_disk_free_bytes over the file system's size",
    ["path"],
)
LOG_MANIFEST_WRITES = Counter(
    "apollo11_log_manifest_writes_total",
    "Manifests written (the log's durable end, off the append path)",
)
LOG_MANIFEST_FAILURES = Counter(
    "apollo11_log_manifest_failures_total",
    "Manifest writes that failed (the log is unaffected; its end is checked less closely)",
)
LOG_DAMAGE_FOUND = Counter(
    "apollo11_log_damage_found_total",
    "Damage the background scrub found in a sealed log segment or an archive chunk, "
    "before anything read that range (kind: segment, chunk), or at start (kind: startup)",
    ["kind"],
)
LOG_SEGMENTS_MENDED = Counter(
    "apollo11_log_segments_mended_total",
    "Damaged sealed log segments replaced by another member's copy of their records",
)
RETENTION_PURGED = Counter(
    "apollo11_retention_purged_total",
    "Finished tasks purged by retention (counted by the primary that wrote the purge)",
)
ARCHIVE_CHUNKS_REBUILT = Counter(
    "apollo11_archive_chunks_rebuilt_total",
    "Damaged archive chunks rebuilt from the event log",
)
SCRUB_BYTES = Counter(
    "apollo11_scrub_bytes_total", "Bytes of segments and chunks the background scrub checked"
)
SNAPSHOTS = Counter("apollo11_snapshots_total", "Snapshots written")
SNAPSHOT_SECONDS = Histogram(
    "apollo11_snapshot_seconds", "Time to write one snapshot (off the event loop)"
)
SNAPSHOT_STALL_SECONDS = Histogram(
    "apollo11_snapshot_stall_seconds",
    "Event-loop time to capture a snapshot (the write is off the loop)",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)
SNAPSHOT_FALLBACKS = Counter(
    "apollo11_snapshot_fallbacks_total",
    "Snapshots found unreadable at recovery (an older one, or full replay, was used)",
)

SCHEDULER_LOOP_SECONDS = Histogram(
    "apollo11_scheduler_loop_seconds",
    "Time for one pass of the scheduling loop (deciding every task a batch touched)",
    buckets=(0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.1),
)
WORKERS_CONNECTED = Gauge(
    "apollo11_workers_connected", "Worker processes connected to this node (the primary)"
)
WORKER_SLOTS = Gauge(
    "apollo11_worker_slots", "Slots of the connected workers, busy or free", ["state"]
)
DISPATCH_SECONDS = Histogram(
    "apollo11_dispatch_seconds",
    "From an attempt's STARTED being committed to its assignment being sent to a worker",
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
)
WORKER_LOST_ATTEMPTS = Counter(
    "apollo11_worker_lost_attempts_total",
    "Attempts lost with their worker (its stream closed, it fell silent, or it did not "
    "come back after a failover)",
    ["how"],
)
REFUSED_RESULTS = Counter(
    "apollo11_refused_late_results_total",
    "Results a worker reported for an attempt that is not its step's current one "
    "(retried, cancelled, declared lost): refused, never applied",
)
STEP_OUTCOMES = Counter(
    "apollo11_step_outcomes_total",
    "Step attempts by outcome (succeeded, failed, lost)",
    ["workflow", "step", "outcome"],
)
STEP_SECONDS = Histogram(
    "apollo11_step_duration_seconds",
    "Step attempt duration",
    ["workflow", "step"],
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600),
)
STEP_FAILURE_CAUSES = Counter(
    "apollo11_step_failures_by_cause_total",
    "Step failures by the retry rule that judged them: the rule's class name (TimeoutError), "
    "default (no rule of the step names the cause), or lost (the node died mid-attempt); "
    "never the message",
    ["workflow", "step", "cause"],
)
STEP_RETRIES = Counter(
    "apollo11_step_retries_total", "Step failures that will be retried", ["workflow", "step"]
)
RETRIES_PACED = Counter(
    "apollo11_step_retries_paced_total",
    "Step retries the step's retry budget delayed past their backoff (failures came "
    "faster than the budget's rate; docs/tuning.md retry_budget)",
    ["workflow", "step"],
)
RETRY_PACED_SECONDS = Counter(
    "apollo11_step_retry_paced_seconds_total",
    "Seconds the retry budget added to step retries, summed",
    ["workflow", "step"],
)
TASKS_PAUSED = Counter(
    "apollo11_tasks_paused_total",
    "Tasks paused because a step's retries ran out (on_exhausted='pause'), by workflow",
    ["workflow"],
)
PAUSED_TASKS = Gauge(
    "apollo11_paused_tasks",
    "Tasks PAUSED now, waiting for an operator's `apollo11 retry TASK`, by workflow",
    ["workflow"],
)
COMPENSATIONS = Counter(
    "apollo11_compensations_started_total", "Compensations started", ["workflow", "step"]
)

GC_PAUSE_SECONDS = Histogram(
    "apollo11_gc_pause_seconds",
    "Cyclic garbage collections: how long each stopped the process, by generation",
    ["generation"],
    buckets=(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1),
)


def observe_all(h: Histogram, amounts: Sequence[float]) -> None:
    """`h.observe(a)` for each of `amounts` (a batch: the assignments of one message),
    with one lock per bucket touched rather than two per amount: an observe costs
    about a microsecond, once per remote step otherwise. An unlabelled histogram."""
    bounds = getattr(h, "_upper_bounds", None)
    buckets = getattr(h, "_buckets", None)
    total = getattr(h, "_sum", None)
    if bounds is None or buckets is None or total is None:  # another client's insides
        for a in amounts:
            h.observe(a)
        return
    counts = [0] * len(bounds)
    for a in amounts:
        counts[bisect_left(bounds, a)] += 1  # the first bound >= a, as observe finds it
    total.inc(sum(amounts))
    for i, n in enumerate(counts):
        if n:
            buckets[i].inc(n)


def watch_gc() -> None:
    """Time every cyclic collection (a pause of the whole process, event loop included)."""
    if any(getattr(cb, "apollo11", False) for cb in gc.callbacks):
        return
    children = [GC_PAUSE_SECONDS.labels(str(g)) for g in range(3)]
    started = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            children[info["generation"]].observe(time.perf_counter() - started[0])

    on_gc.apollo11 = True  # type: ignore[attr-defined]
    gc.callbacks.append(on_gc)


LOOP_LAG_SECONDS = Histogram(
    "apollo11_event_loop_lag_seconds",
    "How late the node's event loop ran a timer (sampled 20 times a second): "
    "every request, step and replication message waits this long too",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1),
)

# For what a write waits: fine below 10 ms, where the targets are.
LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.003,
    0.004,
    0.005,
    0.0075,
    0.01,
    0.015,
    0.02,
    0.03,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
)
REPLICATION_ACK_SECONDS = Histogram(
    "apollo11_replication_ack_seconds",
    "From a batch being durable on the primary to a standby acknowledging it durable "
    "(what a synchronous write adds to its latency)",
    ["standby"],
    buckets=LATENCY_BUCKETS,
)
SUBMIT_COMMIT_SECONDS = Histogram(
    "apollo11_submit_commit_seconds",
    "What a submission waits for on the primary: from its append to its commit "
    "(durable here and on --sync-replicas standbys), per call",
    buckets=LATENCY_BUCKETS,
)
REPLICATION_BATCH_EVENTS = Histogram(
    "apollo11_replication_batch_events",
    "Events per batch shipped to a standby (one batch in flight at a time: they grow "
    "when a standby is slow to acknowledge)",
    ["standby"],
    buckets=(1, 4, 16, 64, 256, 1024, 4096, 16384),
)
REPLICATION_LAG_EVENTS = Gauge(
    "apollo11_replication_lag_events",
    "Events the primary holds that a standby has not acked",
    ["standby"],
)
REPLICATION_LAG_SECONDS = Gauge(
    "apollo11_replication_lag_seconds",
    "How long ago a standby last held everything the primary had durable",
    ["standby"],
)
# What the sync gate counts, on the primary: the alert for "writes blocked" compares
# the two. A standby's own view (it says connected) is not enough: in issue 15 every
# standby said connected while the primary counted none, and the lag gauges read 0.
STANDBYS_CONNECTED = Gauge(
    "apollo11_replication_standbys_connected",
    "Standbys the primary counts for --sync-replicas: a live stream that acknowledges "
    "(0 on a standby)",
)
STANDBYS_REQUIRED = Gauge(
    "apollo11_replication_standbys_required",
    "Standbys every write waits for: --sync-replicas on a primary in strict mode (0 in "
    "relaxed mode, on a standby, standalone)",
)
ROLE = Gauge("apollo11_role_primary", "1 when this node is the primary, else 0")
TERM = Gauge("apollo11_term", "The term this node last saw")
LEADER_CHANGES = Counter("apollo11_leader_changes_total", "Times this node became primary")
LEASE_RENEWALS = Counter("apollo11_lease_renewals_total", "Lease renewals", ["outcome"])
PROMOTION_SECONDS = Histogram(
    "apollo11_promotion_seconds",
    "From winning the lease to scheduling (recovery of the lost steps included)",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)

COMPENSATION_BACKLOG = Gauge(
    "apollo11_compensation_backlog", "Compensations owed or running, on the primary"
)
HTTP_CONNECTIONS = Gauge(
    "apollo11_http_connections", "Connections open on the HTTP port (scheduler/web/listener.py)"
)
HTTP_CONNECTIONS_DROPPED = Counter(
    "apollo11_http_connections_dropped_total",
    "HTTP port connections refused or dropped: total or per_source (over the limit), "
    "rate (too many new ones from one source), busy (too many new ones from all sources), "
    "handshake (TLS failed or too slow), no_request (no request's headers in time)",
    ["reason"],
)
GRPC_SYN_DROP = Gauge(
    "apollo11_grpc_new_connections_dropped_ratio",
    "Fraction of new connections to the gRPC ports dropped in the kernel (their clients "
    "retry): gRPC core's threads over grpc_threads_cpu_budget (scheduler/api/connshed.py)",
)
GRPC_KNOWN_SOURCES = Gauge(
    "apollo11_grpc_known_sources",
    "Addresses that made an authenticated call within the last hour: never dropped when "
    "new connections are (scheduler/api/knownsources.py)",
)
HTTP_ACCEPT_PAUSED = Counter(
    "apollo11_http_accept_paused_seconds_total",
    "Seconds the HTTP port left new connections in the kernel's queue: accepts over "
    "their rate, or accept() out of descriptors (scheduler/web/acceptor.py)",
)
ACTIVE_TASKS = Gauge("apollo11_active_tasks", "Tasks not finished yet")
RUNNING_STEPS = Gauge("apollo11_running_steps", "Steps executing on this node")
RECOVERY_SECONDS = Gauge(
    "apollo11_recovery_seconds", "How long the last open of the store took (snapshot + tail)"
)
DURABLE_EVENT_ID = Gauge("apollo11_durable_event_id", "The last durable event id on this node")


def refresh_disk(path: str) -> None:
    """Headroom of the data directory's file system: one statvfs, at scrape time."""
    try:
        st = os.statvfs(path)
    except OSError:
        return  # not there (yet): no reading is better than a false one
    free = st.f_bavail * st.f_frsize
    DISK_FREE_BYTES.labels(path).set(free)
    DISK_FREE_RATIO.labels(path).set(free / (st.f_blocks * st.f_frsize) if st.f_blocks else 0.0)


# Schedules (scheduler/engine/schedules.py): every nominal time's outcome, and how late
# a fired one started (its start minus its nominal time and jitter).
SCHEDULE_OCCURRENCES = Counter(
    "apollo11_schedule_occurrences_total",
    "Schedule occurrences decided on this primary, by outcome (fired, missed, skipped, buffered)",
    ["outcome"],
)
# Each outcome's series from the start, at 0 (schedules.Outcome's values; not imported:
# this module loads no pydantic). A primary records the times missed while no one led
# at its promotion: a new series already at 3 is no rise to increase(), a 0 that
# becomes 3 is (the Apollo11ScheduleMissed alert).
for _outcome in ("fired", "missed", "skipped", "buffered"):
    SCHEDULE_OCCURRENCES.labels(_outcome)
SCHEDULE_FIRE_LATENESS = Histogram(
    "apollo11_schedule_fire_lateness_seconds",
    "How late a schedule's occurrence was written, after its nominal time plus jitter",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 3600),
)


# Flow control (docs/flow-control.md, "Metrics and alerts"). By limit id: ids are
# declared in code, so their number is bounded; key values are not, so at most the
# top FLOW_TOP_KEYS of each limit are series of their own. Read at scrape time on the
# primary (scheduler/web/flowscrape.py); the counters are counted where it happens.
FLOW_TOP_KEYS = 10
FLOW_OTHER_KEYS = "other"  # the key label of the values beyond the top ones, summed
FLOW_RUNNING = Gauge(
    "apollo11_flow_running",
    "Holders of a concurrency limit's slots (tasks, or attempts of a step-level limit), "
    "summed over its key values, on the primary",
    ["limit"],
)
FLOW_QUEUED = Gauge(
    "apollo11_flow_queued",
    "Tasks waiting in a concurrency limit's queues for a slot, summed over its key "
    "values, on the primary",
    ["limit"],
)
FLOW_OLDEST_QUEUED = Gauge(
    "apollo11_flow_oldest_queued_seconds",
    "How long the longest-waiting task in a concurrency limit's queues has waited "
    "(0 when none waits), on the primary",
    ["limit"],
)
FLOW_KEY_QUEUED = Gauge(
    "apollo11_flow_key_queued",
    "Tasks waiting for a slot per key value: a limit's 10 values with the most, and "
    'the rest summed under key="other", on the primary',
    ["limit", "key"],
)
FLOW_REJECTED = Counter(
    "apollo11_flow_rejected_total",
    "Submissions refused by a full on_full='reject_new' limit (RESOURCE_EXHAUSTED)",
    ["limit"],
)
FLOW_HELD = Counter(
    "apollo11_flow_held_total",
    "Starts flow control held back, by why: concurrency (a full key), rate, debounce; "
    "once each time a start begins to wait for another of these",
    ["reason"],
)
FLOW_HOLD_REASONS = ("concurrency", "rate", "debounce")
for _reason in FLOW_HOLD_REASONS:
    FLOW_HELD.labels(_reason)
TASK_PRIORITY_WAITING = Gauge(
    "apollo11_task_priority_waiting",
    "Tasks submitted and not started yet, by priority (1 first)",
    ["priority"],
)

# The archive (scheduler/bucket/, docs/archive.md): set by the primary's shipper.
ARCHIVE_LAG_EVENTS = Gauge(
    "apollo11_archive_lag_events",
    "Durable events not yet in the archive's bucket (the open segment's count: they go up "
    "when it is sealed), on the primary",
)
ARCHIVE_PENDING_SEGMENTS = Gauge(
    "apollo11_archive_pending_segments",
    "Sealed log segments not yet in the archive's bucket, on the primary",
)
ARCHIVE_THROUGH = Gauge(
    "apollo11_archive_through_event_id", "The last event id the archive's bucket holds"
)
ARCHIVE_BLOCKED = Gauge(
    "apollo11_archive_blocked",
    "1 while the primary's shipper refuses to upload (a catalog of another cluster or a "
    "newer term, a hole, damage): its log says why",
)
ARCHIVE_UPLOADS = Counter(
    "apollo11_archive_uploads_total",
    "Objects put in the archive's bucket, by kind: segment, snapshot, chunk, catalog",
    ["kind"],
)
ARCHIVE_BYTES = Counter(
    "apollo11_archive_bytes_total",
    "Bytes of segments, snapshots and chunks uploaded: raw (as on disk) and stored "
    "(compressed, as in the bucket)",
    ["form"],
)
ARCHIVE_FAILURES = Counter(
    "apollo11_archive_failures_total",
    "Shipper cycles that failed (an unreachable or read-only bucket, a file gone): it "
    "waits and tries again",
)
ARCHIVE_CORRUPT = Counter(
    "apollo11_archive_corrupt_objects_total",
    "Objects in the bucket found not to match their checksum (verify, restore, the shipper)",
)
ARCHIVE_REPAIRED = Counter(
    "apollo11_archive_repaired_objects_total",
    "Damaged objects in the bucket (a checksum that fails, an object missing while the "
    "catalog names it) the shipper put back from this node's own copy",
)
ARCHIVE_REDACTIONS_PENDING = Gauge(
    "apollo11_archive_redactions_pending",
    "Redactions the primary's shipper could not carry to the bucket: an object holding "
    "the task's records is damaged and this node holds no copy of it (retried; its log "
    "names the key)",
)
ARCHIVE_HISTORY_READS = Counter(
    "apollo11_archive_history_reads_total",
    "Segments read for old history (events this node's disk no longer holds), by "
    "where from: bucket (fetched and checked, a round trip) or cache (in memory)",
    ["source"],
)
for _source in ("bucket", "cache"):
    ARCHIVE_HISTORY_READS.labels(_source)
ARCHIVE_LAST_UPLOAD = Gauge(
    "apollo11_archive_last_upload_timestamp_seconds",
    "When the shipper last put the catalog (wall clock, seconds)",
)
ARCHIVE_DELETED = Counter(
    "apollo11_archive_deleted_objects_total",
    "Objects deleted from the archive's bucket, by why: expired (segments every task of "
    "which retention purged, docs/archive.md), superseded (snapshots and chunks no "
    "catalog entry names any more), redacted (snapshots and chunks replaced by their "
    "copies without a redacted task's data), garbage (left by a cut-off deletion)",
    ["why"],
)
ARCHIVE_DELETED_BYTES = Counter(
    "apollo11_archive_deleted_bytes_total",
    "Stored (compressed) bytes of the objects deleted from the archive's bucket that the "
    "catalog named (expired, superseded and redacted)",
)
for _kind in ("segment", "snapshot", "chunk", "catalog"):
    ARCHIVE_UPLOADS.labels(_kind)
for _why in ("expired", "superseded", "redacted", "garbage"):
    ARCHIVE_DELETED.labels(_why)
for _form in ("raw", "stored"):
    ARCHIVE_BYTES.labels(_form)
