"""The exposition carries no `_created` series beside the counters and histograms."""

from __future__ import annotations

from prometheus_client import generate_latest

from apollo11.scheduler import metrics


def test_no_created_series() -> None:
    metrics.LOG_APPENDS.inc()
    metrics.STEP_OUTCOMES.labels("w", "s", "succeeded").inc()
    text = generate_latest().decode()
    assert "apollo11_log_appends_total" in text
    assert "_created" not in text
