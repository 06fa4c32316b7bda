"""The export's calls in flight (scheduler/cli/_exportflight.py)."""

from __future__ import annotations

from apollo11.scheduler.cli._exportflight import MOST, ROOM, in_flight


def test_calls_as_fast_as_the_fastest_add_one_in_flight_up_to_the_most() -> None:
    n = 1
    for _ in range(2 * MOST):
        n = in_flight(n, 0.010, 0.010 * ROOM)  # a far node: the wire, not the node
    assert n == MOST


def test_a_call_slowed_by_another_on_the_node_takes_one_away_down_to_one() -> None:
    n = MOST
    for _ in range(2 * MOST):
        n = in_flight(n, 0.001, 0.002)  # a near node: the calls queue on its loop
    assert n == 1


def test_a_near_node_holds_about_one_call_in_flight() -> None:
    """One call: as fast as the fastest, so a second goes; two take twice as long on
    a node near by, so back to one."""
    n, seen = 1, []
    for _ in range(10):
        took = 0.001 * n  # the node serves the calls one after the other
        n = in_flight(n, 0.001, took)
        seen.append(n)
    assert max(seen) == 2 and min(seen) == 1
