"""FairQueue: priority order, aging, weighted turns among fairness values, FIFO within
one, `ahead` as the pops go, `discard`, and 100,000 values."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apollo11.scheduler.flow import AGING_MS, FairQueue, effective_priority


def drain(q: FairQueue[Any], now_ms: int) -> list[Any]:
    out = []
    while (item := q.pop(now_ms)) is not None:
        out.append(item)
    return out


def jain(xs: list[float]) -> float:
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def test_an_empty_queue_pops_none() -> None:
    q: FairQueue[str] = FairQueue()
    assert q.pop(0) is None
    assert len(q) == 0


def test_lower_priority_numbers_go_first() -> None:
    q: FairQueue[str] = FairQueue()
    for p in (5, 3, 4, 1, 2):
        q.push(f"p{p}", priority=p, fair="", at_ms=0)
    assert drain(q, 0) == ["p1", "p2", "p3", "p4", "p5"]


def test_within_a_value_first_in_first_out_by_time_then_push() -> None:
    q: FairQueue[str] = FairQueue()
    q.push("late", at_ms=30)
    q.push("early", at_ms=10)
    q.push("b1", at_ms=20)
    q.push("b2", at_ms=20)
    assert drain(q, 40) == ["early", "b1", "b2", "late"]


def test_effective_priority_gains_one_per_aging_down_to_one() -> None:
    assert [effective_priority(5, 0, t * AGING_MS) for t in range(7)] == [5, 4, 3, 2, 1, 1, 1]
    assert effective_priority(5, 0, AGING_MS - 1) == 5
    assert effective_priority(3, 100, 0) == 3  # a time in the future ages nothing


def test_an_aged_item_ranks_with_better_priorities() -> None:
    q: FairQueue[str] = FairQueue(aging_ms=1_000)
    q.push("old5", priority=5, at_ms=0)
    q.push("new2", priority=2, at_ms=2_500)
    q.push("new3", priority=3, at_ms=2_500)
    # at 2.5 s the old one ranks 3 (5 - 2): behind 2, ahead of the later 3 (older)
    assert drain(q, 2_500) == ["new2", "old5", "new3"]


@pytest.mark.parametrize("same_value", [True, False])
def test_a_priority_5_item_is_not_starved_by_a_stream_of_priority_1(same_value: bool) -> None:
    """One priority-1 item arrives and one item is popped every second, for ever; the
    priority-5 item waits four agings, then goes within a round of its level."""
    q: FairQueue[str] = FairQueue()
    q.push("five", priority=5, fair="t0", at_ms=0)
    for i in range(3):
        q.push(f"one-{i}", priority=1, fair="t0" if same_value else f"t{i % 2 + 1}", at_ms=0)
    popped_at = None
    for second in range(1, 600):
        now = second * 1_000
        q.push(
            f"one-{second + 2}",
            priority=1,
            fair="t0" if same_value else f"t{second % 2 + 1}",
            at_ms=now,
        )
        if q.pop(now) == "five":
            popped_at = now
            break
    assert popped_at is not None
    assert 4 * AGING_MS <= popped_at <= 4 * AGING_MS + 3_000


def test_time_never_goes_back() -> None:
    q: FairQueue[str] = FairQueue(aging_ms=10)
    q.push("aged", priority=5, at_ms=0)
    q.push("fresh", priority=1, at_ms=100)
    q.ahead("aged", 100)  # seen at 100 ms: "aged" ranks 1 from now on
    assert q.pop(0) == "aged"


def test_weighted_turns_share_a_backlog_by_weight() -> None:
    weights = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 0.5, "e": 1.5}
    q: FairQueue[tuple[str, int]] = FairQueue()
    q.set_weights(weights)
    for i in range(5_000):
        for value in weights:
            q.push((value, i), fair=value, at_ms=0)
    pops = 8_000  # every value keeps a backlog throughout
    served = Counter(q.pop(0)[0] for _ in range(pops))  # type: ignore[index]
    total = sum(weights.values())
    for value, weight in weights.items():
        assert served[value] / pops == pytest.approx(weight / total, rel=0.05)
    assert jain([served[v] / w for v, w in weights.items()]) >= 0.95


def test_equal_weights_take_strict_turns() -> None:
    q: FairQueue[str] = FairQueue()
    for value in "abc":
        for i in range(3):
            q.push(f"{value}{i}", fair=value, at_ms=0)
    assert drain(q, 0) == ["a0", "b0", "c0", "a1", "b1", "c1", "a2", "b2", "c2"]


@pytest.mark.parametrize("popped_first", [0, 1, 5_000, 9_999])
def test_one_item_behind_another_values_10000_goes_within_one_round(popped_first: int) -> None:
    q: FairQueue[str] = FairQueue()
    for i in range(10_000):
        q.push(f"big{i}", fair="big", at_ms=0)
    for _ in range(popped_first):
        q.pop(0)
    q.push("small", fair="small", at_ms=0)
    assert q.ahead("small", 0) <= 1
    assert "small" in [q.pop(0), q.pop(0)]


def test_a_value_that_runs_dry_and_comes_back_does_not_jump_the_turns() -> None:
    """b has one item at a time, pushed again as soon as it is popped: it still gets
    one pop in two, not every pop."""
    q: FairQueue[str] = FairQueue()
    for i in range(100):
        q.push(f"a{i}", fair="a", at_ms=0)
    q.push("b0", fair="b", at_ms=0)
    popped = []
    for i in range(1, 41):
        item = q.pop(0)
        popped.append(item)
        if item is not None and item.startswith("b"):
            q.push(f"b{i}", fair="b", at_ms=0)
    assert sum(1 for p in popped if p is not None and p.startswith("b")) == 20


def test_discard_takes_an_item_out_wherever_it_is() -> None:
    q: FairQueue[str] = FairQueue()
    for item, fair in (("a1", "a"), ("a2", "a"), ("b1", "b"), ("c1", "c")):
        q.push(item, fair=fair, at_ms=0)
    assert q.discard("a1")
    assert not q.discard("a1")
    assert not q.discard("ghost")
    assert "a1" not in q and "a2" in q
    assert len(q) == 3
    assert q.discard("b1")  # its value's only item: b leaves the turns
    assert drain(q, 0) == ["a2", "c1"]
    q.push("a1", fair="a", at_ms=0)  # may come back after a discard
    assert drain(q, 0) == ["a1"]


def test_a_discarded_item_is_not_promoted_or_counted() -> None:
    q: FairQueue[str] = FairQueue(aging_ms=10)
    q.push("gone", priority=5, at_ms=0)
    q.push("stays", priority=3, at_ms=0)
    q.discard("gone")
    assert q.ahead("stays", 1_000) == 0
    assert drain(q, 1_000) == ["stays"]


def test_push_refuses_a_queued_item_and_a_bad_priority() -> None:
    q: FairQueue[str] = FairQueue()
    q.push("x", at_ms=0)
    with pytest.raises(ValueError, match="'x' is queued already"):
        q.push("x", at_ms=0)
    for bad in (0, 6, True):
        with pytest.raises(ValueError, match=r"priority must be 1 to 5 \(1 first\)"):
            q.push("y", priority=bad, at_ms=0)


@pytest.mark.parametrize("weight", [0, -1, float("inf"), float("nan"), 10_000])
def test_set_weights_refuses_a_weight_out_of_range(weight: float) -> None:
    with pytest.raises(ValueError, match="weight of 'acme' must be from"):
        FairQueue[str]().set_weights({"acme": weight})


def test_ahead_raises_for_an_item_not_queued() -> None:
    with pytest.raises(KeyError):
        FairQueue[str]().ahead("x", 0)


# A queue's life as data: pushes (priority, value, time), pops and discards, weights.
ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(1, 5), st.sampled_from("abcd"), st.integers(0, 50)),
        st.tuples(st.just("pop"), st.integers(0, 30)),
        st.tuples(st.just("discard"), st.integers(0, 80)),
        st.tuples(st.just("weights"), st.sampled_from([{}, {"a": 3.0}, {"b": 0.5, "c": 2.0}])),
    ),
    max_size=80,
)


def replay(q: FairQueue[int], script: list[Any]) -> tuple[int, list[int]]:
    """Run `script` on `q`; the clock and the items pushed."""
    now, pushed = 0, []
    for op in script:
        if op[0] == "push":
            _, priority, fair, back = op
            q.push(len(pushed), priority=priority, fair=fair, at_ms=max(0, now - back))
            pushed.append(len(pushed))
        elif op[0] == "pop":
            now += op[1]
            q.pop(now)
        elif op[0] == "discard" and pushed:
            q.discard(op[1] % len(pushed))
        elif op[0] == "weights":
            q.set_weights(op[1])
    return now, pushed


@settings(max_examples=300, deadline=None)
@given(ops, st.integers(0, 200))
def test_ahead_is_the_position_in_the_real_pop_order(script: list[Any], later: int) -> None:
    q: FairQueue[int] = FairQueue(aging_ms=20)
    now, _ = replay(q, script)
    now += later
    order = drain(copy.deepcopy(q), now)
    assert sorted(order) == sorted(i for i in range(1_000) if i in q)
    for position, item in enumerate(order):
        assert q.ahead(item, now) == position


@settings(max_examples=300, deadline=None)
@given(ops)
def test_every_pop_takes_the_best_effective_priority_and_the_oldest_of_its_value(
    script: list[Any],
) -> None:
    """The rules checked by brute force against what was pushed, pop by pop."""
    q: FairQueue[int] = FairQueue(aging_ms=20)
    now, pushed = 0, 0
    waiting: dict[int, tuple[int, str, int, int]] = {}  # item: (priority, fair, at, push order)
    for op in script:
        if op[0] == "push":
            _, priority, fair, back = op
            item, pushed = pushed, pushed + 1
            at = max(0, now - back)
            q.push(item, priority=priority, fair=fair, at_ms=at)
            waiting[item] = (priority, fair, at, item)
        elif op[0] == "pop":
            now += op[1]
            item = q.pop(now)
            if not waiting:
                assert item is None
                continue
            assert item is not None
            best = min(effective_priority(p, at, now, 20) for p, _, at, _ in waiting.values())
            p, fair, at, seq = waiting.pop(item)
            assert effective_priority(p, at, now, 20) == best
            mine = [
                (a, s)
                for pp, f, a, s in waiting.values()
                if f == fair and effective_priority(pp, a, now, 20) == best
            ]
            assert all((at, seq) < other for other in mine)
        elif op[0] == "discard" and waiting:
            victim = sorted(waiting)[op[1] % len(waiting)]
            assert q.discard(victim)
            del waiting[victim]
    assert len(q) == len(waiting)


def test_the_order_is_the_same_on_every_run() -> None:
    def run() -> list[int]:
        q: FairQueue[int] = FairQueue(aging_ms=7)
        for i in range(500):
            q.push(i, priority=1 + i * 7 % 5, fair=f"v{i * 13 % 11}", at_ms=i * 3 % 50)
        return drain(q, 60)

    assert run() == run()


def test_100000_values_of_one_item_each() -> None:
    """Each tenant with one task waiting: pushes, an `ahead`, and pops stay O(log n)
    (about 1 s for the lot on a laptop, most of it the pushes)."""
    n = 100_000
    q: FairQueue[int] = FairQueue()
    for i in range(n):
        q.push(i, priority=1 + i % 5, fair=f"tenant-{i}", at_ms=i // 10)
    assert q.ahead(0, 10_000) == 0
    order = [q.pop(10_000 + i) for i in range(n)]
    assert len(q) == 0
    assert order[:3] == [0, 5, 10]  # priority 1 first, in the values' turns
    assert sorted(order) == list(range(n))  # type: ignore[type-var]


@settings(max_examples=300, deadline=None)
@given(ops, st.integers(0, 200))
def test_oldest_is_the_earliest_time_of_the_items_still_queued(
    script: list[Any], later: int
) -> None:
    """What the flow metrics read (apollo11_flow_oldest_queued_seconds): exact across
    pops, discards and promotions by aging, and reading it changes no order."""
    q: FairQueue[int] = FairQueue(aging_ms=20)
    now, pushed = 0, []
    at: dict[int, int] = {}
    for op in script:
        if op[0] == "push":
            _, priority, fair, back = op
            item = len(pushed)
            at[item] = max(0, now - back)
            q.push(item, priority=priority, fair=fair, at_ms=at[item])
            pushed.append(item)
        elif op[0] == "pop":
            now += op[1]
            q.pop(now)
        elif op[0] == "discard" and pushed:
            q.discard(op[1] % len(pushed))
        elif op[0] == "weights":
            q.set_weights(op[1])
        queued = [at[i] for i in pushed if i in q]
        assert q.oldest_ms() == (min(queued) if queued else None)
    before = drain(copy.deepcopy(q), now + later)
    q.oldest_ms()
    assert drain(q, now + later) == before
