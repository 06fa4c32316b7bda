"""What the schedules' failover bench reads in a log: which fires an outage delayed
and by how much, and the checks that every nominal time has one outcome."""

from __future__ import annotations

from typing import Any

from apollo11.scheduler.log import Event, EventType
from apollo11.scheduler.tools.bench import schedules_failover_bench as bench

KILL_MS = 10_500


class Log:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, kind: EventType, term: int, at_ms: int, payload: dict[str, Any]) -> None:
        n = len(self.events) + 1
        self.events.append(Event(n, term, "i", f"t{n}", "", kind, payload, at_ms, 0))

    def term(self, term: int, at_ms: int) -> None:
        self.add(EventType.TERM_STARTED, term, at_ms, {"node_id": f"n{term}"})

    def fire(self, term: int, sid: str, nominal_ms: int, at_ms: int, **more: Any) -> None:
        fired = {"id": sid, "nominal_ms": nominal_ms, **more}
        self.add(EventType.TASK_SUBMITTED, term, at_ms, {"workflow": "w", "schedule": fired})

    def other(self, term: int, sid: str, nominal_ms: int, outcome: str) -> None:
        body = {"schedule": sid, "nominal_ms": nominal_ms, "outcome": outcome, "reason": ""}
        self.add(EventType.OCCURRENCE, term, nominal_ms + 5, body)


def a_failover() -> Log:
    """Two every-second schedules; term 1 fires each time 10 ms late up to 10,000,
    but s1's 10,000 not before the kill at 10,500; term 2 starts at 15,400, catches
    up 10,000 (s1) and 11,000-15,000 at 15,450, then fires 16,000 on time."""
    log = Log()
    log.term(1, 0)
    for t in range(1_000, 11_000, 1_000):
        for sid in ("s0", "s1"):
            if (sid, t) != ("s1", 10_000):
                log.fire(1, sid, t, t + 10)
    log.add(EventType.TASK_SUBMITTED, 1, 10_200, {"workflow": "w"})  # not a schedule's
    log.term(2, 15_400)
    log.fire(2, "s1", 10_000, 15_450)
    for t in range(11_000, 16_000, 1_000):
        for sid in ("s0", "s1"):
            log.fire(2, sid, t, 15_450)
    for sid in ("s0", "s1"):
        log.fire(2, sid, 16_000, 16_020)
    return log


def test_an_outage_is_the_fires_of_the_next_term_before_its_first() -> None:
    h = bench.history(a_failover().events)
    (o,) = bench.outages(h, [KILL_MS])
    assert (o.term, o.term_started_ms, o.first_fire_ms) == (2, 15_400, 15_450)
    assert o.window() == (KILL_MS, 15_450)
    # s1's 10,000, which the dead primary had not fired, is the latest
    assert len(o.lateness_ms) == 11
    assert sorted(set(o.lateness_ms)) == [450, 1_450, 2_450, 3_450, 4_450, 5_450]
    assert o.before_kill == 1
    steady = bench.steady_lateness(h, [o])
    assert steady == [10] * 19 + [20, 20]


def test_a_kill_no_term_followed_has_no_window() -> None:
    h = bench.history(a_failover().events)
    (o,) = bench.outages(h, [20_000])
    assert (o.term, o.first_fire_ms, o.lateness_ms, o.window()) == (None, None, (), None)


def test_every_time_with_one_outcome_passes_the_checks() -> None:
    h = bench.history(a_failover().events)
    c = bench.outcomes(h, 1_000, [(KILL_MS, 15_450)])
    assert c["schedules"] == 2
    assert c["times"] == c["with_one_outcome"] == 2 * 16
    assert c["outage_times"] == c["outage_times_with_one_outcome"] == 2 * 5
    assert (c["without_outcome"], c["fired_twice"], c["more_than_one_outcome"]) == (0, 0, 0)
    assert c["outcomes"] == {"fired": 32}


def test_a_time_fired_twice_or_lost_fails_the_run() -> None:
    log = a_failover()
    log.fire(2, "s0", 10_000, 15_450)  # the dead primary had fired it: a second task
    # and s1's 13,000 has no outcome at all
    kept = [e for e in log.events if _fired(e) != ("s1", 13_000)]
    h = bench.history(kept)
    kill = bench.Kill("n1", "n2", KILL_MS, 4.9, 1.0)
    r = bench.figures(h, [kill])
    c = r["log"]
    assert (c["fired_twice"], c["more_than_one_outcome"], c["without_outcome"]) == (1, 1, 1)
    assert c["outage_times_with_one_outcome"] == c["outage_times"] - 1
    why = bench.failed(r)
    assert "1 nominal times fired twice" in why
    assert "1 nominal times without an outcome" in why
    assert "of 10 nominal times in the outages, 9 have one outcome" in why


def test_missed_is_an_outcome_and_buffered_then_fired_is_one() -> None:
    log = a_failover()
    log.other(2, "s0", 17_000, "missed")
    log.other(2, "s1", 17_000, "buffered")
    log.fire(2, "s1", 17_000, 17_900)
    h = bench.history(log.events)
    c = bench.outcomes(h, 1_000, [])
    assert c["times"] == c["with_one_outcome"] == 2 * 17
    assert c["outcomes"] == {"fired": 33, "missed": 1}


def test_triggers_and_backfills_are_not_nominal_fires() -> None:
    log = a_failover()
    log.fire(2, "s0", 16_500, 16_500, triggered=True)
    log.fire(2, "s0", 500, 16_600, backfill=7)
    h = bench.history(log.events)
    assert len(h.fires) == len(bench.history(a_failover().events).fires)


def test_the_figures_compare_the_outage_with_the_same_runs_failover() -> None:
    h = bench.history(a_failover().events)
    r = bench.figures(h, [bench.Kill("n1", "n2", KILL_MS, 4.9, 1.0)])
    assert r["failover_ms"] == {"p50": 4_900, "p99": 4_900, "max": 4_900}
    assert r["outage_lateness_ms"]["max"] == 5_450
    assert r["target_ms"] == 5_900 and r["met"] is True
    assert r["per_kill"][0]["first_fire_after_ms"] == 4_950
    assert r["per_kill"][0]["after_a_nominal_time_ms"] == 500
    assert bench.failed(r) == ""
    assert any("met" in value for _, value in bench.summary_rows({**r, **_ran()}))


def test_the_catch_up_ends_at_the_last_late_fire() -> None:
    log = a_failover()
    log.fire(2, "s0", 15_000, 15_900)  # a late one written after the first batch
    h = bench.history(log.events)
    r = bench.figures(h, [bench.Kill("n1", "n2", KILL_MS, 4.9, 1.0)])
    k = r["per_kill"][0]
    assert (k["first_fire_after_ms"], k["last_late_fire_after_ms"]) == (4_950, 5_400)
    assert k["catchup_ms"] == 15_900 - 15_400
    # the stricter reading: 5,400 ms from the kill, within failover p99 + 1 s
    assert r["last_late_fire_after_ms"]["max"] == 5_400 and r["met_from_the_kill"] is True


def test_a_minute_schedule_is_killed_before_its_nominal_time() -> None:
    """At the issue's scale every kill comes LEAD_MS before a minute, so that the new
    primary fires all of it; a second's kills spread over the second."""
    assert bench.kill_phases(60_000, 3) == [57_000] * 3
    assert bench.kill_phases(1_000, 3) == [5, 338, 671]
    assert bench.kill_phases(1_000, 1) == [5]
    # the first wall time at or after a bound with that phase
    assert bench.next_at(120_000, 60_000, 57_000) == 177_000
    assert bench.next_at(177_000, 60_000, 57_000) == 177_000
    assert bench.next_at(177_001, 60_000, 57_000) == 237_000
    assert bench.next_at(10_400, 1_000, 338) == 11_338
    assert bench.next_at(10_300, 1_000, 338) == 10_338


def test_a_minute_of_ten_thousand_falls_to_the_next_primary() -> None:
    """Kill 3 s before 60,000: the new primary fires every schedule's 60,000 late, none
    of them due before the kill, and each minute's time has one outcome."""
    log = Log()
    log.term(1, 0)
    sids = [f"s{i}" for i in range(100)]
    for sid in sids:
        log.fire(1, sid, 0, 300)
    log.term(2, 61_500)
    for sid in sids:
        log.fire(2, sid, 60_000, 61_700 + int(sid[1:]))  # the catch-up takes 99 ms
    for sid in sids:
        log.fire(2, sid, 120_000, 120_400)
    h = bench.history(log.events)
    r = bench.figures(h, [bench.Kill("n1", "n2", 57_000, 4.6, 1.0)], 60_000)
    k = r["per_kill"][0]
    assert (k["after_a_nominal_time_ms"], k["outage_fires"], k["before_the_kill"]) == (
        57_000,
        100,
        0,
    )
    assert (k["first_fire_after_ms"], k["last_late_fire_after_ms"]) == (4_700, 4_799)
    assert r["outage_lateness_ms"] == {"p50": 1_750, "p99": 1_799, "max": 1_799}
    assert r["met"] is True and r["met_from_the_kill"] is True
    assert r["steady_lateness_ms"]["p99"] == 400
    c = r["log"]
    assert c["outage_times"] == c["outage_times_with_one_outcome"] == 100
    assert c["times"] == c["with_one_outcome"] == 300
    assert bench.failed(r) == ""


def _fired(e: Event) -> tuple[str, int] | None:
    s = e.payload.get("schedule")
    return (s["id"], s["nominal_ms"]) if s else None


def _ran() -> dict[str, Any]:
    return {
        "schedules": 2,
        "kills": 1,
        "lease_ttl_s": 5.0,
        "unexpected_exits": [],
        "load_average_1m": [0.5, 1.0],
    }
