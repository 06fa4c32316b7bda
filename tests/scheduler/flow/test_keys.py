"""A key's value in an input: a dotted path or a function, the default, the type rules,
and errors that name the path, the limit and what to do."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apollo11.scheduler.errors import FlowKeyError, InvalidArgumentError
from apollo11.scheduler.flow import key_value

WHAT = "concurrency limit runbook/host"


@pytest.mark.parametrize(
    ("key", "raw", "value"),
    [
        ("host", {"host": "db1"}, "db1"),
        ("target.host", {"target": {"host": "db2"}}, "db2"),
        ("a.b.c", {"a": {"b": {"c": 7}}}, "7"),
        ("n", {"n": -12}, "-12"),
        ("on", {"on": True}, "true"),
        ("on", {"on": False}, "false"),
        ("empty", {"empty": ""}, ""),
        ("host", {"host": "x" * 256}, "x" * 256),
    ],
)
def test_a_path_walks_objects_and_the_value_becomes_text(key: str, raw: Any, value: str) -> None:
    assert key_value(key, raw, what=WHAT) == value


def test_a_function_gets_the_raw_input() -> None:
    assert key_value(lambda raw: raw["t"]["id"], {"t": {"id": 4}}, what=WHAT) == "4"
    assert key_value(lambda raw: f"{raw['a']}-{raw['b']}", {"a": 1, "b": 2}, what=WHAT) == "1-2"


def test_a_missing_key_names_the_path_and_the_limit_and_says_what_to_do() -> None:
    with pytest.raises(FlowKeyError) as e:
        key_value("host", {"tenant": "acme"}, what=WHAT)
    assert str(e.value) == (
        'input has no "host" (the key of concurrency limit runbook/host); '
        "declare default= to allow it"
    )
    # INVALID_ARGUMENT at the API: the error is one of its tree
    assert isinstance(e.value, InvalidArgumentError)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ({"target": {}}, 'input has no "target.host" (the key'),
        ({}, 'input has no "target.host" (the key'),
        ({"target": ["db1"]}, 'input has no "target.host": "target" is a list, not an object'),
        ({"target": "db1"}, 'input has no "target.host": "target" is a string, not an object'),
        (["db1"], 'input has no "target.host": the input is a list, not an object'),
        (None, 'input has no "target.host": the input is null, not an object'),
    ],
)
def test_a_nested_path_says_where_it_stopped(raw: Any, why: str) -> None:
    with pytest.raises(FlowKeyError, match="declare default= to allow it") as e:
        key_value("target.host", raw, what=WHAT)
    assert str(e.value).startswith(why)


@pytest.mark.parametrize(
    ("value", "kind"),
    [({"a": 1}, "an object"), ([1], "a list"), (1.5, "a float"), (1.0, "a float"), (None, "null")],
)
def test_a_value_of_another_type_is_refused_naming_path_and_type(value: Any, kind: str) -> None:
    with pytest.raises(FlowKeyError) as e:
        key_value("host", {"host": value}, what=WHAT)
    assert str(e.value) == (
        f'input "host" is {kind} (the key of concurrency limit runbook/host): a key value '
        f"must be a string, an integer or a boolean"
    )


def test_a_value_over_256_characters_is_refused() -> None:
    with pytest.raises(
        FlowKeyError, match=r'input "host" is 257 characters \(the key of .*at most 256'
    ):
        key_value("host", {"host": "x" * 257}, what=WHAT)
    with pytest.raises(FlowKeyError, match="at most 256"):
        key_value("n", {"n": 10**300}, what=WHAT)


def test_the_default_stands_in_for_a_missing_key_only() -> None:
    assert key_value("host", {}, what=WHAT, default="any") == "any"
    assert key_value("host", {}, what=WHAT, default=0) == "0"
    assert key_value("host", {}, what=WHAT, default=False) == "false"
    assert key_value("a.host", {"a": 3}, what=WHAT, default="any") == "any"
    assert key_value("host", {"host": "db1"}, what=WHAT, default="any") == "db1"
    # present but of the wrong type: refused even with a default (the input is wrong)
    with pytest.raises(FlowKeyError, match="is null"):
        key_value("host", {"host": None}, what=WHAT, default="any")


def test_a_function_that_raises_or_returns_a_bad_value_is_refused_naming_the_limit() -> None:
    def boom(raw: Any) -> str:
        raise KeyError("tenant")

    with pytest.raises(FlowKeyError) as e:
        key_value(boom, {}, what=WHAT)
    assert str(e.value) == (
        "the key of concurrency limit runbook/host raised KeyError: 'tenant' "
        "(on this submission's input)"
    )
    with pytest.raises(FlowKeyError, match="the key's function returned a float"):
        key_value(lambda raw: 1.5, {}, what=WHAT)
    with pytest.raises(FlowKeyError, match="the key's function returned 300 characters"):
        key_value(lambda raw: "y" * 300, {}, what=WHAT)
    with pytest.raises(FlowKeyError, match="returned None for this input; declare default="):
        key_value(lambda raw: None, {}, what=WHAT)
    assert key_value(lambda raw: None, {}, what=WHAT, default="d") == "d"


json_scalars = st.one_of(st.text(max_size=256), st.integers(-(2**63), 2**63), st.booleans())


@given(json_scalars)
def test_any_accepted_scalar_reads_back_the_same_by_path_and_by_function(value: Any) -> None:
    by_path = key_value("k", {"k": value}, what=WHAT)
    assert by_path == key_value(lambda raw: raw["k"], {"k": value}, what=WHAT)
    assert by_path == (("true" if value else "false") if isinstance(value, bool) else str(value))
