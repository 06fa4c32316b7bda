"""What a workflow declares about its flow: Concurrency, Rate, Debounce, and the ids
operators and the log call the limits by.

    Workflow("runbook", concurrency=[Concurrency(key="host", max=2)],
             rate=Rate(key="tenant", limit=10, per="1s", burst=20))

Each declaration checks itself as it is made (a bad `max` fails the module's import
on the line that wrote it, naming the field); what depends on where it is declared
(`reject_new` on a step, two limits with one id, a global name with two maxima) is
checked at registration (spec.py), where the workflow and the step are known.

A limit's id is what the log, the state and `apollo11 limits` name it by:

    workflow-level, scope "workflow":  "{workflow}/{name}"          runbook/host
    step-level, scope "workflow":      "{workflow}.{step}/{name}"   runbook.load/warehouse
    scope "global" (either level):     "{name}"                     warehouse

so a name may not contain "/": a global name could otherwise spell another limit's
id, and `limit_name` could not read a name back out of an id.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from datetime import timedelta
from typing import Any, Literal

from apollo11.scheduler.errors import WorkflowDefinitionError
from apollo11.scheduler.schedules import format_duration, parse_duration

# A key: a dotted path into the submission's JSON input ("target.host"), or a function
# of that input returning the value (keys.py reads either).
Key = str | Callable[[Any], Any]
KeyDefault = str | int | bool | None
OnFull = Literal["queue", "cancel_running", "reject_new"]
Scope = Literal["workflow", "global"]

ON_FULL: tuple[OnFull, ...] = ("queue", "cancel_running", "reject_new")
SCOPES: tuple[Scope, ...] = ("workflow", "global")
# What a key value may be at most, in characters: it names a limit's value in the log,
# the state's maps and the operator's tables.
MAX_VALUE_CHARS = 256
# Python's timedelta stops at 999,999,999 days; the schedules' bound (a century) keeps
# "per=1e20" an error with a reason, and no flow control needs more.
MAX_DURATION_MS = 36_525 * 86_400_000


def _whole(kind: str, name: str, value: object, least: int) -> None:
    # bool is an int to Python, never to a reader: Concurrency(max=True) is a mistake
    if isinstance(value, bool) or not isinstance(value, int):
        raise WorkflowDefinitionError(f"{kind} {name} must be a whole number, got {value!r}")
    if value < least:
        raise WorkflowDefinitionError(f"{kind} {name} must be at least {least}, got {value}")


def check_key(
    kind: str, key: object, name: str | None, default: object, *, named: bool = True
) -> str:
    """The declaration's label (its `name`, else the key path or the function's name);
    raise naming the field that is wrong. `named`: the label names a limit (a debounce
    is no limit, so its key may be a lambda)."""
    if isinstance(key, str):
        if not key or any(not part for part in key.split(".")):
            raise WorkflowDefinitionError(
                f"{kind} key must be a dotted path into the input like 'host' or "
                f"'target.host', got {key!r}"
            )
        label = key
    elif callable(key):
        fn_name = getattr(key, "__name__", None)
        if named and name is None and (not isinstance(fn_name, str) or fn_name == "<lambda>"):
            # the name is what the log and the operator call the limit: a lambda has none
            raise WorkflowDefinitionError(
                f"{kind} key is a function without a name: pass name= (how the log and "
                f"`apollo11 limits` call it)"
            )
        label = fn_name if isinstance(fn_name, str) else ""
    else:
        raise WorkflowDefinitionError(
            f"{kind} key must be a dotted path (str) or a function of the input, got {key!r}"
        )
    if name is not None:
        if not isinstance(name, str) or not name:
            raise WorkflowDefinitionError(f"{kind} name must be a non-empty string, got {name!r}")
        label = name
    if named and "/" in label:
        raise WorkflowDefinitionError(
            f"{kind} name {label!r} has a '/', which separates a limit's id from its name: "
            f"pass another name="
        )
    if default is not None and (
        isinstance(default, float) or not isinstance(default, str | int | bool)
    ):
        raise WorkflowDefinitionError(
            f"{kind} default must be a string, an integer or a boolean, got {default!r}"
        )
    if isinstance(default, str) and len(default) > MAX_VALUE_CHARS:
        raise WorkflowDefinitionError(
            f"{kind} default is {len(default)} characters, at most {MAX_VALUE_CHARS}"
        )
    return label


def _one_of(kind: str, name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise WorkflowDefinitionError(
            f"{kind} {name} must be one of {', '.join(map(repr, allowed))}, got {value!r}"
        )


def duration_ms(value: object, *, what: str) -> int:
    """A declared duration in milliseconds: "1s", "1h30m" (the schedules' grammar), a
    timedelta, or seconds as a number; `what` names the field in the error."""
    if isinstance(value, str):
        try:
            ms = int(parse_duration(value).total_seconds()) * 1000
        except ValueError as e:
            raise WorkflowDefinitionError(f"{what} {value!r} is {e}") from None
    elif isinstance(value, timedelta):
        ms = round(value / timedelta(milliseconds=1))
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise WorkflowDefinitionError(f"{what} must be a finite duration, got {value!r}")
        ms = round(value * 1000)
    else:
        raise WorkflowDefinitionError(
            f"{what} must be a duration like '1s' or '1m', a timedelta or seconds, got {value!r}"
        )
    if ms < 1:
        raise WorkflowDefinitionError(f"{what} must be at least 1ms, got {value!r}")
    if ms > MAX_DURATION_MS:
        raise WorkflowDefinitionError(f"{what} must be at most 36525d, got {value!r}")
    return ms


def format_ms(ms: int) -> str:
    """A duration as an operator reads it: "1s", "1h30m", "250ms", "1s500ms"."""
    seconds, rest = divmod(ms, 1000)
    if not rest:
        return format_duration(timedelta(seconds=seconds))
    return (format_duration(timedelta(seconds=seconds)) if seconds else "") + f"{rest}ms"


@dataclass(frozen=True, slots=True)
class Concurrency:
    """At most `max` holders per key value at once: on a workflow, its tasks (a task
    holds its slot from its first start until it ends, not while it WAITs); on a step,
    that step's running attempts.

    `on_full`: "queue" waits (the default); "reject_new" refuses the submit
    (RESOURCE_EXHAUSTED) when `max` tasks of the value are unfinished; "cancel_running"
    cancels the oldest of them to make room. The last two are workflow-level only.
    `scope`: "workflow" (this workflow's, or this step's) or "global" (one limit per
    `name` across every workflow that declares it). `default`: the value when the key is
    missing from an input; without one, such a submit is refused.
    """

    key: Key
    max: int
    _: KW_ONLY
    on_full: OnFull = "queue"
    scope: Scope = "workflow"
    name: str | None = None
    default: KeyDefault = None
    label: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _whole("Concurrency", "max", self.max, 1)
        _one_of("Concurrency", "on_full", self.on_full, ON_FULL)
        _one_of("Concurrency", "scope", self.scope, SCOPES)
        object.__setattr__(
            self, "label", check_key("Concurrency", self.key, self.name, self.default)
        )


@dataclass(frozen=True, slots=True)
class Rate:
    """Task starts (a task's first start) per key value: at most `limit` per `per`, in
    bursts of at most `burst` (GCRA, gcra.py). Excess starts wait; none is refused.

    `per`: "1s", "1m", a timedelta or seconds. Workflow-level only.
    """

    key: Key
    limit: int
    per: str | timedelta | float
    _: KW_ONLY
    burst: int = 1
    scope: Scope = "workflow"
    name: str | None = None
    default: KeyDefault = None
    label: str = field(init=False, repr=False, compare=False)
    per_ms: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _whole("Rate", "limit", self.limit, 1)
        _whole("Rate", "burst", self.burst, 1)
        _one_of("Rate", "scope", self.scope, SCOPES)
        object.__setattr__(self, "per_ms", duration_ms(self.per, what="Rate per"))
        object.__setattr__(self, "label", check_key("Rate", self.key, self.name, self.default))

    @property
    def interval_ms(self) -> float:
        """GCRA's emission interval T = per / limit (a fraction of a millisecond is kept:
        1 per 3 ms is not 1 per 2 or per 4)."""
        return self.per_ms / self.limit


@dataclass(frozen=True, slots=True)
class Debounce:
    """Submissions with one key value, while the first of them has not started, fold into
    one task: the last input wins and the task starts at `min(last submission + quiet,
    first submission + max_wait)` (debounce.py). Workflow-level only."""

    key: Key
    quiet: str | timedelta | float
    max_wait: str | timedelta | float
    _: KW_ONLY
    default: KeyDefault = None
    label: str = field(init=False, repr=False, compare=False)
    quiet_ms: int = field(init=False, repr=False, compare=False)
    max_wait_ms: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        quiet_ms = duration_ms(self.quiet, what="Debounce quiet")
        max_wait_ms = duration_ms(self.max_wait, what="Debounce max_wait")
        if max_wait_ms < quiet_ms:
            raise WorkflowDefinitionError(
                f"Debounce max_wait ({format_ms(max_wait_ms)}) must be at least quiet "
                f"({format_ms(quiet_ms)})"
            )
        object.__setattr__(self, "quiet_ms", quiet_ms)
        object.__setattr__(self, "max_wait_ms", max_wait_ms)
        object.__setattr__(
            self, "label", check_key("Debounce", self.key, None, self.default, named=False)
        )


def limit_id(workflow: str, step: str | None, decl: Concurrency | Rate) -> str:
    """The id the log, the state and the operator name a declared limit by (see the
    module's docstring); `step` None or "" for a workflow-level declaration."""
    if decl.scope == "global":
        return decl.label
    if step:
        return f"{workflow}.{step}/{decl.label}"
    return f"{workflow}/{decl.label}"


def limit_name(limit_id: str) -> str:
    """The declaration's name in a limit id: `host` in `runbook/host` (what the operator's
    sentences say, `host=db1 is full (2/2)`)."""
    return limit_id.rpartition("/")[2]
