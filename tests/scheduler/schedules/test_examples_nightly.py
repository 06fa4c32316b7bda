"""The examples' nightly schedule: loaded only with its own module, 03:00 in Berlin
on both sides of a DST change."""

from __future__ import annotations

from datetime import UTC, datetime

from apollo11.scheduler.schedules import nominal_times
from apollo11.scheduler.workflow import Registry


def test_the_examples_alone_declare_no_schedule() -> None:
    r = Registry()
    r.load_module("apollo11.scheduler.examples")
    assert r.schedules == {}, "test clusters that load the examples fire nothing"


def test_the_nightly_module_runs_etl_at_three_in_berlin() -> None:
    r = Registry()
    r.load_module("apollo11.scheduler.examples")
    r.load_module("apollo11.scheduler.examples.nightly")
    s = r.schedules["nightly-etl"]
    assert s.workflow == "etl" and "etl" in {wf.name for wf in r.all()}
    # the last Sunday of March 2027 is the 28th: 02:00 UTC before, 01:00 UTC after
    after = datetime(2027, 3, 26, 12, tzinfo=UTC)
    assert [t.isoformat() for t in nominal_times(s.spec, after, count=3)] == [
        "2027-03-27T02:00:00+00:00",
        "2027-03-28T01:00:00+00:00",
        "2027-03-29T01:00:00+00:00",
    ]
