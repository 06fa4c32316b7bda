"""A key's value in a submission's input: what a limit, a rate, a debounce or the
fairness is counted by.

A key is a dotted path that walks the JSON input's objects (`"target.host"` is
`input["target"]["host"]`), or a function of the input. The value must be a string,
an integer or a boolean and becomes its `str()` (a boolean `"true"` / `"false"`, as
JSON spells it); an object, a list, a float or null is refused, because two inputs
that an operator would call "the same host" must give one value, and `1.0`, `1` and
`{"a": 1}` do not print alike everywhere. A function returning None counts as the
key being missing. At most 256 characters: the value names the limit's slot in the
log and in the operator's tables.

A missing key takes the declaration's `default`; without one the submit is refused
(FlowKeyError, INVALID_ARGUMENT) naming the path and the limit, never counted under
some catch-all value the operator did not ask for.
"""

from __future__ import annotations

from typing import Any

from apollo11.scheduler.errors import FlowKeyError
from apollo11.scheduler.flow.limits import MAX_VALUE_CHARS, Key, KeyDefault

_MISSING = object()


def _kind(value: Any) -> str:
    """A JSON value's type as the message says it."""
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, str):
        return "a string"
    return f"a {type(value).__name__}"


def _walk(path: str, input: Any) -> tuple[Any, str]:
    """The value at `path`, or _MISSING and why (empty when simply absent)."""
    here: Any = input
    walked: list[str] = []
    for part in path.split("."):
        if not isinstance(here, dict):
            where = f'"{".".join(walked)}"' if walked else "the input"
            return _MISSING, f": {where} is {_kind(here)}, not an object"
        if part not in here:
            return _MISSING, ""
        here = here[part]
        walked.append(part)
    return here, ""


def _text(value: Any) -> str | None:
    """`value` as a key value, or None when its type is refused."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        try:
            return str(value)
        except ValueError:  # past Python's digit limit: longer than any key value anyway
            return "9" * (MAX_VALUE_CHARS + 1)
    return None


def key_value(key: Key, input: Any, *, what: str, default: KeyDefault = None) -> str:
    """The value of `key` in `input` (the submission's raw JSON). `what` names the
    declaration in errors: "concurrency limit runbook/host", "fairness of runbook".
    Raises FlowKeyError saying what was wrong and what to do."""
    if isinstance(key, str):
        value, why = _walk(key, input)
        says = f'input "{key}" is'
        if value is _MISSING:
            if default is not None:
                return _checked(default, says, what)
            raise FlowKeyError(
                f'input has no "{key}"{why} (the key of {what}); declare default= to allow it'
            )
    else:
        says = "the key's function returned"
        try:
            value = key(input)
        except Exception as e:
            raise FlowKeyError(
                f"the key of {what} raised {type(e).__name__}: {e} (on this submission's input)"
            ) from e
        if value is None:
            if default is not None:
                return _checked(default, says, what)
            raise FlowKeyError(
                f"the key of {what} returned None for this input; declare default= to allow it"
            )
    return _checked(value, says, what)


def _checked(value: Any, says: str, what: str) -> str:
    # `says`: 'input "host" is' or "the key's function returned"
    text = _text(value)
    if text is None:
        raise FlowKeyError(
            f"{says} {_kind(value)} (the key of {what}): a key value must be a string, "
            f"an integer or a boolean"
        )
    if len(text) > MAX_VALUE_CHARS:
        raise FlowKeyError(
            f"{says} {len(text)} characters (the key of {what}): at most {MAX_VALUE_CHARS}"
        )
    return text
