"""Where the worker connects next after a stream ends: decisions and their sentences."""

from __future__ import annotations

import grpc

from apollo11.scheduler.worker._reconnect import (
    MAX_DELAY_S,
    MAX_REDIRECTS,
    Ended,
    GiveUp,
    Next,
    Reconnect,
)

EPS = ["a:1", "b:1", "c:1"]


def policy() -> Reconnect:
    return Reconnect(EPS, name="w1", jitter=lambda: 0.5)  # 0.5: no jitter


def test_a_standby_redirect_is_followed_at_once() -> None:
    d = policy().after(Ended("a:1", grpc.StatusCode.FAILED_PRECONDITION, "standby", "z:9"))
    assert d == Next("z:9", 0.0, "a:1 is not the primary: following it to z:9")


def test_endpoints_are_tried_in_turn_then_a_capped_backoff() -> None:
    r = policy()
    unavailable = grpc.StatusCode.UNAVAILABLE
    seen = []
    ep = r.first()
    for _ in range(12):
        d = r.after(Ended(ep, unavailable, "no primary"))
        assert isinstance(d, Next)
        seen.append((d.endpoint, round(d.delay_s, 3)))
        ep = d.endpoint
    assert seen[:6] == [("b:1", 0), ("c:1", 0), ("a:1", 0.2), ("b:1", 0), ("c:1", 0), ("a:1", 0.4)]
    assert max(delay for _, delay in seen) == MAX_DELAY_S
    assert d.sentence == "cannot connect to c:1: UNAVAILABLE: no primary, reconnecting to a:1"


def test_a_lost_stream_says_so_and_starts_over() -> None:
    r = policy()
    d = r.after(Ended("b:1", grpc.StatusCode.UNAVAILABLE, "gone", registered=True))
    assert d == Next("c:1", 0.0, "stream lost: UNAVAILABLE: gone, reconnecting to c:1")


def test_standbys_naming_each_other_do_not_spin() -> None:
    r = policy()
    ends = [
        r.after(Ended("a:1", grpc.StatusCode.FAILED_PRECONDITION, "", "b:1"))
        for _ in range(MAX_REDIRECTS + 1)
    ]
    assert all(isinstance(d, Next) and d.endpoint == "b:1" for d in ends[:MAX_REDIRECTS])
    assert isinstance(ends[-1], Next) and ends[-1].endpoint == "b:1"
    assert ends[-1].sentence.startswith("cannot connect to a:1")


def test_a_duplicate_name_is_retried_slowly_on_the_same_primary() -> None:
    d = policy().after(Ended("a:1", grpc.StatusCode.ALREADY_EXISTS, "w1 is connected"))
    assert isinstance(d, Next)
    assert d.endpoint == "a:1" and d.delay_s >= 1.0
    assert "another worker instance with this name" in d.sentence


def test_configuration_errors_give_up() -> None:
    for code in (
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
    ):
        d = policy().after(Ended("a:1", code, "bad label"))
        assert isinstance(d, GiveUp)
        assert d.sentence == (
            f"a:1 refused this worker ({code.name}: bad label): a configuration error "
            f"(labels, name, token or certificate); not retrying"
        )


def test_a_silent_primary_is_passed_over_redirects_too_then_tried_again() -> None:
    from apollo11.scheduler.worker._reconnect import SUSPECT_TRIES

    r = policy()
    precondition = grpc.StatusCode.FAILED_PRECONDITION
    d = r.after(Ended("a:1", None, "the primary n1 said nothing", registered=True, silent=True))
    assert isinstance(d, Next) and d.endpoint == "b:1"
    # b is a standby that still names the frozen a as the leader: not followed there
    d = r.after(Ended("b:1", precondition, "standby", "a:1"))
    assert isinstance(d, Next) and d.endpoint == "c:1"
    d = r.after(Ended("c:1", precondition, "standby", "a:1"))
    assert isinstance(d, Next) and d.endpoint == "b:1", "a is skipped in the round"
    # a standby that names the new primary is followed
    d = r.after(Ended("b:1", precondition, "standby", "c:1"))
    assert d == Next("c:1", 0.0, "b:1 is not the primary: following it to c:1")
    # after SUSPECT_TRIES decisions the silent one may be tried again (it was slow)
    r = policy()
    r.after(Ended("a:1", None, "silent", registered=True, silent=True))
    ep, seen = "b:1", []
    for _ in range(SUSPECT_TRIES + 2):
        d = r.after(Ended(ep, grpc.StatusCode.UNAVAILABLE, "no primary"))
        assert isinstance(d, Next)
        seen.append(d.endpoint)
        ep = d.endpoint
    assert "a:1" not in seen[: SUSPECT_TRIES - 1] and "a:1" in seen
    # a registration anywhere clears it at once
    r = policy()
    r.after(Ended("a:1", None, "silent", registered=True, silent=True))
    r.after(Ended("b:1", grpc.StatusCode.UNAVAILABLE, "gone", registered=True))
    d = r.after(Ended("c:1", precondition, "standby", "a:1"))
    assert d == Next("a:1", 0.0, "c:1 is not the primary: following it to a:1")
