"""The primary's retry budget state (engine/retrypacer.py): its window of the log's
time, and the slots it gives."""

from __future__ import annotations

import pytest

from apollo11.scheduler.engine.retrypacer import RetryPacer
from apollo11.scheduler.retrypace import RetryBudget

K = ("wf", "s")
T0 = 1_700_000_000_000


def test_the_window_counts_the_last_ten_seconds_of_the_log() -> None:
    p = RetryPacer(RetryBudget())
    for i in range(20):  # one success a second for 20 s
        p.succeeded(K, T0 + 1_000 * i)
    p.failed(K, T0 + 19_000)
    w = p._keys[K]
    assert w.counts(T0 + 19_000) == (10, 1)
    assert w.counts(T0 + 25_000) == (4, 1)
    assert w.counts(T0 + 40_000) == (0, 0)


def test_successes_buy_retries_and_an_idle_key_starts_afresh() -> None:
    p = RetryPacer(RetryBudget())
    for i in range(10_000):  # 2,000 successes a second for 5 s: R = 400/s, burst 40
        p.succeeded(K, T0 + i // 2)
    now = T0 + 5_000
    slots = []
    for _ in range(60):
        p.failed(K, now)
        s = p.slot(K, now)
        assert s is not None
        slots.append(s.paced_s)
    assert slots[:40] == [0] * 40 and slots[40] == 0.003  # 400/s: one per 2.5 ms
    assert slots[-1] <= 0.06
    # idle past the window: the floor again (30/s, a burst of 10): the 11th is paced
    later = now + 60_000
    got = []
    for _ in range(11):
        p.failed(K, later)
        s = p.slot(K, later)
        assert s is not None
        got.append(s.paced_s)
    assert got[:10] == [0] * 10 and got[10] == pytest.approx(1 / 30, abs=0.001)


def test_keys_are_apart_and_no_budget_means_never_paced() -> None:
    p = RetryPacer(RetryBudget())
    for _ in range(20):
        p.failed(K, T0)
        p.slot(K, T0)
    other = ("wf", "t")
    p.failed(other, T0)
    assert p.slot(other, T0) == (0.0, 1)
    off = RetryPacer(None)
    off.failed(K, T0)
    off.succeeded(K, T0)
    assert off.slot(K, T0) is None and len(off) == 0
    p.forget()
    assert len(p) == 0


def test_successes_pay_back_a_backlog() -> None:
    """gRPC's throttle: each success gives back a share of a slot, so failures within
    that share of the successes stop being paced as soon as successes come."""
    p = RetryPacer(RetryBudget())
    for _ in range(20):  # 20 at once, no successes: 10 free, 10 paced at 30/s
        p.failed(K, T0)
        p.slot(K, T0)
    backlog = p._keys[K].tat_ms
    assert backlog is not None and backlog > T0
    for _ in range(100):  # 100 successes x 0.2 of a slot: 20 slots back
        p.succeeded(K, T0 + 1)
    p.failed(K, T0 + 1)
    s = p.slot(K, T0 + 1)
    assert s is not None and s.paced_s == 0


def test_idle_keys_are_dropped_and_a_dropped_key_decides_as_a_kept_one() -> None:
    """Many step names over a term (shell DAGs, one-off workflows) do not grow the
    state without end: a key idle past the window, with no backlog, is dropped, which
    changes no slot (its counts and its TAT were nothing any more)."""
    p = RetryPacer(RetryBudget())
    for i in range(5_000):  # a new step name every 100 ms, each failing once
        p.failed(("wf", f"s{i}"), T0 + 100 * i)
        p.slot(("wf", f"s{i}"), T0 + 100 * i)
    assert len(p) <= 1_000  # today's keys (the last 10 s: 100) and a sweep's slack
    # a key with a backlog is kept past the window: its retries are still queued
    for _ in range(40):
        p.failed(K, T0 + 600_000)
        p.slot(K, T0 + 600_000)
    kept = RetryPacer(RetryBudget())
    for _ in range(40):
        kept.failed(K, T0 + 600_000)
        kept.slot(K, T0 + 600_000)
    later = T0 + 611_000  # the window passed, the backlog (30 at 30/s: 1 s) too
    for i in range(3_000):
        p.failed(("wf", f"t{i}"), later + i)
    assert K not in p._keys  # dropped...
    for now in (later + 5_000, later + 5_000, later + 5_001):  # ...and decides the same
        p.failed(K, now)
        kept.failed(K, now)
        assert p.slot(K, now) == kept.slot(K, now)


def test_a_shell_dags_steps_are_paced_apart_from_another_dags() -> None:
    from apollo11.scheduler.engine.retrypacer import pacing_key
    from apollo11.scheduler.state import StepState, TaskState

    def task(workflow: str, doc: object) -> TaskState:
        return TaskState("t", workflow, 1, doc, {"build": []}, {"build": StepState("build")})

    a = pacing_key(task("shell", {"name": "nightly", "steps": []}), "build")
    b = pacing_key(task("shell", {"name": "deploy", "steps": []}), "build")
    assert a != b  # not one budget for every shell DAG's "build"
    assert a == pacing_key(task("shell", {"name": "nightly", "steps": []}), "build")
    assert pacing_key(task("billing", None), "build") == ("billing", "build")
    assert pacing_key(task("shell", "not a DAG"), "build") == ("shell", "build")
