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
