"""Defaults that a node's settings (scheduler/config.py) and a part of the node both
have: one value, here, imported by both. Imports nothing, so that reading the
settings loads no engine or log."""

CONCURRENCY = 32  # steps running at once on the primary
IDEMPOTENCY_TTL_S = 24 * 3600.0  # how long a submission's idempotency key is remembered
SEGMENT_MAX_BYTES = 100 * 1024 * 1024  # a log segment rotates past this
PAYLOAD_MAX_BYTES = 4096  # an event's payload, but a submission's
# A submission carries the task's input and its DAG (a runbook of a hundred shell
# steps does not fit in 4 KiB); every other event keeps the small cap.
SUBMIT_MAX_BYTES = 64 * 1024
# How deeply JSON may nest, a client's and the cluster's own (scheduler/jsondepth.py);
# the setting is at most JSON_MAX_DEPTH_MAX, well below what the log can encode.
JSON_MAX_DEPTH = 64
JSON_MAX_DEPTH_MAX = 128
SNAPSHOT_INTERVAL = 1000  # events between two snapshots
# A step's retry budget (scheduler/retrypace.py, where the figures behind them are):
# retries a second always free, and the share of the step's successes a second
RETRY_BUDGET_MIN_PER_S = 30.0
RETRY_BUDGET_SHARE = 0.2
