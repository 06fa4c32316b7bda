"""The exposition carries no `_created` series beside the counters and histograms; a
batch observed at once reads as each observed alone."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from apollo11.scheduler import metrics


def test_no_created_series() -> None:
    metrics.LOG_APPENDS.inc()
    metrics.STEP_OUTCOMES.labels("w", "s", "succeeded").inc()
    text = generate_latest().decode()
    assert "apollo11_log_appends_total" in text
    assert "_created" not in text


def test_observe_all_is_observe_for_each() -> None:
    """A batch observed at once reads exactly as the same amounts observed one by one:
    each bucket (a bound's own amount included), the count, the sum."""
    buckets = (0.001, 0.01, 0.1)
    one = Histogram("one_by_one_seconds", "x", buckets=buckets, registry=CollectorRegistry())
    batch = Histogram("at_once_seconds", "x", buckets=buckets, registry=CollectorRegistry())
    amounts = [0.0, 0.0005, 0.001, 0.002, 0.01, 0.05, 0.1, 0.5, 7.0, 0.001]
    for a in amounts:
        one.observe(a)
    metrics.observe_all(batch, amounts)
    metrics.observe_all(batch, [])

    def samples(h: Histogram) -> list[tuple[str, dict[str, str], float]]:
        (family,) = h.collect()
        return [(s.name.split("_seconds")[1], s.labels, s.value) for s in family.samples]

    assert samples(batch) == samples(one)
    # the batch path, not its fallback: the client's insides it counts on are there
    assert all(hasattr(batch, a) for a in ("_upper_bounds", "_buckets", "_sum"))
    assert samples(one)[0] == ("_bucket", {"le": "0.001"}, 4.0)  # 0, 0.0005, 0.001 twice


def test_every_schedule_outcome_is_a_series_at_zero_from_the_start() -> None:
    """A primary records the times missed while no one led as it is promoted: the
    alert on them (increase over 10 minutes) sees a rise only from a series that was
    there, at 0, before. In a fresh interpreter: this one has counted some already."""
    import subprocess
    import sys

    from apollo11.scheduler.schedules import Outcome

    probe = (
        "from prometheus_client import generate_latest\n"
        "import apollo11.scheduler.metrics\n"
        "print(generate_latest().decode())"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    for o in Outcome:
        assert f'apollo11_schedule_occurrences_total{{outcome="{o.value}"}} 0.0' in out, o
