"""Concurrency, Rate and Debounce check themselves as declared, naming the field; and
the ids the log and the operator call limits by."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from apollo11.scheduler.errors import WorkflowDefinitionError
from apollo11.scheduler.flow import (
    Concurrency,
    Debounce,
    Rate,
    duration_ms,
    format_ms,
    limit_id,
    limit_name,
)


def by_tenant(raw: Any) -> str:
    return str(raw["tenant"])


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Concurrency(key="host", max=0), "Concurrency max must be at least 1, got 0"),
        (lambda: Concurrency(key="host", max=-3), "Concurrency max must be at least 1, got -3"),
        (
            lambda: Concurrency(key="host", max=2.5),
            "Concurrency max must be a whole number, got 2.5",
        ),
        (
            lambda: Concurrency(key="host", max=True),
            "Concurrency max must be a whole number, got True",
        ),
        (
            lambda: Concurrency(key="host", max=2, on_full="drop"),
            "Concurrency on_full must be one of 'queue', 'cancel_running', 'reject_new', "
            "got 'drop'",
        ),
        (
            lambda: Concurrency(key="host", max=2, scope="cluster"),
            "Concurrency scope must be one of 'workflow', 'global', got 'cluster'",
        ),
        (
            lambda: Concurrency(key=5, max=2),
            "Concurrency key must be a dotted path (str) or a function of the input, got 5",
        ),
        (lambda: Concurrency(key="", max=2), "Concurrency key must be a dotted path"),
        (lambda: Concurrency(key="target..host", max=2), "got 'target..host'"),
        (
            lambda: Concurrency(key=lambda raw: raw["h"], max=2),
            "function without a name: pass name=",
        ),
        (lambda: Concurrency(key="host", max=2, name=""), "Concurrency name must be a non-empty"),
        (lambda: Concurrency(key="host", max=2, name="a/b"), "name 'a/b' has a '/'"),
        (lambda: Concurrency(key="a/b", max=2), "name 'a/b' has a '/'"),
        (
            lambda: Concurrency(key="host", max=2, default=1.5),
            "Concurrency default must be a string, an integer or a boolean, got 1.5",
        ),
        (lambda: Concurrency(key="host", max=2, default="x" * 257), "257 characters, at most 256"),
        (lambda: Rate(key="t", limit=0, per="1s"), "Rate limit must be at least 1, got 0"),
        (
            lambda: Rate(key="t", limit=10, per="1s", burst=0),
            "Rate burst must be at least 1, got 0",
        ),
        (lambda: Rate(key="t", limit=1, per="1x"), "Rate per '1x' is not a duration (like 90s"),
        (lambda: Rate(key="t", limit=1, per=0), "Rate per must be at least 1ms, got 0"),
        (lambda: Rate(key="t", limit=1, per=-1.0), "Rate per must be at least 1ms, got -1.0"),
        (lambda: Rate(key="t", limit=1, per=float("nan")), "Rate per must be a finite duration"),
        (lambda: Rate(key="t", limit=1, per=[1]), "Rate per must be a duration like '1s'"),
        (lambda: Rate(key="t", limit=1, per=1e12), "Rate per must be at most 36525d"),
        (lambda: Rate(key="t", limit=1, per="1s", scope="x"), "Rate scope must be one of"),
        (
            lambda: Rate(key=lambda raw: 1, limit=1, per="1s"),
            "Rate key is a function without a name",
        ),
        (
            lambda: Debounce(key="k", quiet="0s", max_wait="1m"),
            "Debounce quiet must be at least 1ms",
        ),
        (
            lambda: Debounce(key="k", quiet="1m", max_wait="0s"),
            "Debounce max_wait must be at least 1ms",
        ),
        (
            lambda: Debounce(key="k", quiet="1m", max_wait="30s"),
            "Debounce max_wait (30s) must be at least quiet (1m)",
        ),
        (lambda: Debounce(key=3, quiet="1s", max_wait="1m"), "Debounce key must be a dotted path"),
    ],
)
def test_a_bad_declaration_is_refused_naming_its_field(make: Any, message: str) -> None:
    with pytest.raises(WorkflowDefinitionError) as e:
        make()
    assert message in str(e.value)


def test_a_declaration_is_named_by_its_name_its_path_or_its_function() -> None:
    assert Concurrency(key="target.host", max=1).label == "target.host"
    assert Concurrency(key="host", max=1, name="hosts").label == "hosts"
    assert Concurrency(key=by_tenant, max=1).label == "by_tenant"
    assert Concurrency(key=lambda raw: raw["h"], max=1, name="h").label == "h"
    # a debounce is no limit: its key may be a lambda without a name
    assert Debounce(key=lambda raw: raw["k"], quiet=1, max_wait=2).quiet_ms == 1000


@pytest.mark.parametrize(
    ("per", "ms"),
    [
        ("1s", 1000),
        ("1m", 60_000),
        ("1h30m", 5_400_000),
        (timedelta(milliseconds=250), 250),
        (2, 2000),
        (0.5, 500),
        (0.0015, 2),  # to the nearest millisecond
    ],
)
def test_per_takes_a_duration_a_timedelta_or_seconds(per: Any, ms: int) -> None:
    assert Rate(key="t", limit=1, per=per).per_ms == ms
    assert duration_ms(per, what="x") == ms


def test_a_rates_interval_keeps_its_fraction() -> None:
    assert Rate(key="t", limit=3, per="1s").interval_ms == pytest.approx(1000 / 3)
    assert Rate(key="t", limit=10, per="1s", burst=20).interval_ms == 100


@pytest.mark.parametrize(
    ("ms", "text"), [(1000, "1s"), (60_000, "1m"), (250, "250ms"), (1500, "1s500ms"), (0, "0s")]
)
def test_format_ms(ms: int, text: str) -> None:
    assert format_ms(ms) == text


def test_limit_ids_follow_level_and_scope() -> None:
    host = Concurrency(key="host", max=2)
    warehouse = Concurrency(key="warehouse", max=4, scope="global")
    tenant = Rate(key="tenant", limit=10, per="1s")
    assert limit_id("runbook", None, host) == "runbook/host"
    assert limit_id("runbook", "", host) == "runbook/host"
    assert limit_id("runbook", "load", host) == "runbook.load/host"
    assert limit_id("runbook", "load", warehouse) == "warehouse"
    assert limit_id("runbook", None, warehouse) == "warehouse"
    assert limit_id("runbook", None, tenant) == "runbook/tenant"
    assert (
        limit_id("runbook", None, Rate(key="t", limit=1, per=1, scope="global", name="api"))
        == "api"
    )
    assert [limit_name(i) for i in ("runbook/host", "runbook.load/host", "warehouse")] == [
        "host",
        "host",
        "warehouse",
    ]


def test_declarations_are_frozen_and_compare_by_what_was_declared() -> None:
    a = Concurrency(key="host", max=2)
    with pytest.raises(AttributeError):
        a.max = 3  # type: ignore[misc]
    assert a == Concurrency(key="host", max=2)
    assert a != Concurrency(key="host", max=3)
