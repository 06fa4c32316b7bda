"""A workflow's flow control as registered: its declarations checked where they stand,
each limit with its id, and the `"flow"` a submission of it records.

`declare` is what `Workflow.validate` calls: it turns what the user wrote (one
declaration or a list, on the workflow and on its steps) into a FlowSpec and lists
what is wrong, each problem naming the step and the field (the caller names the
workflow). `RegisteredLimits` is the registry's side: one global name, one kind, one
max; any other id, one workflow.

`FlowSpec.record` is the submit's side: the key values of the input, the priority and
the debounce window, as TASK_SUBMITTED's `"flow"` (issue 31's design, "What is
recorded"). Everything the engine later counts or orders by is in that record, so the
fold and the engine never call a user's key function again: the values are facts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from apollo11.scheduler.errors import InvalidArgumentError, WorkflowDefinitionError
from apollo11.scheduler.flow import debounce as window
from apollo11.scheduler.flow.fairq import DEFAULT_PRIORITY, PRIORITIES
from apollo11.scheduler.flow.keys import key_value
from apollo11.scheduler.flow.limits import (
    Concurrency,
    Debounce,
    Key,
    Rate,
    check_key,
    format_ms,
    limit_id,
)


@dataclass(frozen=True, slots=True)
class Limit:
    """A declared limit and its id. `step`: "" for a workflow-level one."""

    id: str
    workflow: str
    step: str
    decl: Concurrency | Rate

    @property
    def kind(self) -> Literal["concurrency", "rate"]:
        return "concurrency" if isinstance(self.decl, Concurrency) else "rate"

    @property
    def what(self) -> str:
        """The limit as an error about its key names it: "concurrency limit runbook/host"."""
        return f"{self.kind} limit {self.id}"


@dataclass(frozen=True, slots=True)
class FlowSpec:
    """One workflow's flow control: `concurrency` and `rates` at the workflow level,
    `steps` (step -> its concurrency limits) for the steps that declare any."""

    workflow: str
    concurrency: tuple[Limit, ...] = ()
    rates: tuple[Limit, ...] = ()
    steps: Mapping[str, tuple[Limit, ...]] = field(default_factory=dict)
    debounce: Debounce | None = None
    fairness: Key | None = None

    @property
    def declares(self) -> bool:
        """Whether the workflow declares any flow control."""
        return bool(
            self.concurrency
            or self.rates
            or self.steps
            or self.debounce is not None
            or self.fairness is not None
        )

    @property
    def limits(self) -> tuple[Limit, ...]:
        """Every limit declared: the workflow's concurrency, its rates, then its steps'."""
        return (
            *self.concurrency,
            *self.rates,
            *(limit for limits in self.steps.values() for limit in limits),
        )

    def record(self, input: Any, *, priority: int, now_ms: int) -> dict[str, Any] | None:
        """TASK_SUBMITTED's `"flow"` for a submission of `input` (its raw JSON) at log
        time `now_ms`; None when the workflow declares nothing and the priority is the
        default. Raises InvalidArgumentError for a priority outside 1 to 5, FlowKeyError
        (one) for a key the input gives no usable value for."""
        if isinstance(priority, bool) or priority not in PRIORITIES:
            raise InvalidArgumentError(f"priority must be 1 to 5 (1 first), got {priority!r}")
        flow: dict[str, Any] = {}
        if priority != DEFAULT_PRIORITY:
            flow["priority"] = priority
        if self.fairness is not None:
            # no default to declare: a task without the key shares the "" value's turns
            flow["fair"] = key_value(
                self.fairness, input, what=f"fairness of {self.workflow}", default=""
            )
        if self.concurrency:
            flow["hold"] = _values(self.concurrency, input)
        if self.rates:
            flow["rate"] = _values(self.rates, input)
        if self.steps:
            flow["steps"] = {step: _values(limits, input) for step, limits in self.steps.items()}
        if self.debounce is not None:
            flow["debounce"] = key_value(
                self.debounce.key,
                input,
                what=f"debounce of {self.workflow}",
                default=self.debounce.default,
            )
            # the first submission opens the window; a later one joining it moves
            # not_before_ms (DEBOUNCED), never the deadline
            flow["not_before_ms"] = window.not_before(
                now_ms,
                now_ms,
                quiet_ms=self.debounce.quiet_ms,
                max_wait_ms=self.debounce.max_wait_ms,
            )
            flow["deadline_ms"] = window.deadline(now_ms, max_wait_ms=self.debounce.max_wait_ms)
        return flow or None


def _values(limits: Sequence[Limit], input: Any) -> dict[str, str]:
    return {
        limit.id: key_value(limit.decl.key, input, what=limit.what, default=limit.decl.default)
        for limit in limits
    }


def _many(given: object, kind: type[Concurrency] | type[Rate]) -> tuple[list[Any], list[str]]:
    """One declaration or a list of them: the declarations, and what is not one."""
    if given is None:
        return [], []
    items = list(given) if isinstance(given, list | tuple) else [given]
    good = [item for item in items if isinstance(item, kind)]
    bad = [
        f"takes {kind.__name__}(...) or a list of them, got {item!r}"
        for item in items
        if not isinstance(item, kind)
    ]
    return good, bad


def declare(
    workflow: str,
    *,
    concurrency: object = None,
    rate: object = None,
    debounce: object = None,
    fairness: object = None,
    steps: Mapping[str, object] | None = None,
) -> tuple[FlowSpec, list[str]]:
    """The FlowSpec of what `workflow` declares, and the problems with it (empty when
    it can be registered), each naming the step and the field."""
    problems: list[str] = []
    wf_concurrency, bad = _many(concurrency, Concurrency)
    problems += [f"concurrency= {why}" for why in bad]
    wf_rates, bad = _many(rate, Rate)
    problems += [f"rate= {why}" for why in bad]
    if debounce is not None and not isinstance(debounce, Debounce):
        problems.append(f"debounce= takes one Debounce(...), got {debounce!r}")
        debounce = None
    if fairness is not None:
        try:
            # the rules of a limit's key, but no limit: a lambda needs no name
            check_key("fairness", fairness, None, None, named=False)
        except WorkflowDefinitionError as e:
            problems.append(str(e))
            fairness = None
    step_limits: dict[str, tuple[Limit, ...]] = {}
    for step, given in (steps or {}).items():
        declared, bad = _many(given, Concurrency)
        problems += [f"step {step!r} concurrency= {why}" for why in bad]
        for decl in declared:
            if decl.on_full != "queue":
                problems.append(
                    f"step {step!r} concurrency {decl.label!r}: on_full={decl.on_full!r} is for "
                    f"a workflow's concurrency only (an attempt of an accepted task cannot be "
                    f"refused without failing the task): use on_full='queue' on a step"
                )
        if declared:
            step_limits[step] = tuple(
                Limit(limit_id(workflow, step, decl), workflow, step, decl) for decl in declared
            )
    spec = FlowSpec(
        workflow=workflow,
        concurrency=tuple(
            Limit(limit_id(workflow, "", d), workflow, "", d) for d in wf_concurrency
        ),
        rates=tuple(Limit(limit_id(workflow, "", d), workflow, "", d) for d in wf_rates),
        steps=step_limits,
        debounce=debounce,
        fairness=fairness,  # type: ignore[arg-type]
    )
    problems += _clashes(spec.limits)
    return spec, problems


def _where(limit: Limit) -> str:
    return f"step {limit.step!r}" if limit.step else "the workflow"


def _sameness(decl: Concurrency | Rate) -> tuple[object, ...]:
    """What two declarations of one global name must agree on."""
    if isinstance(decl, Concurrency):
        return ("concurrency", decl.max)
    return ("rate", decl.limit, decl.per_ms, decl.burst)


def _says(decl: Concurrency | Rate) -> str:
    if isinstance(decl, Concurrency):
        return f"concurrency max {decl.max}"
    return f"rate {decl.limit} per {format_ms(decl.per_ms)}, burst {decl.burst}"


def _clashes(limits: Sequence[Limit]) -> list[str]:
    """Two limits of one workflow with one id: refused, unless both are declarations
    of one global limit that agree (two steps sharing a global warehouse limit)."""
    problems = []
    first: dict[str, Limit] = {}
    for limit in limits:
        seen = first.setdefault(limit.id, limit)
        if seen is limit:
            continue
        if limit.decl.scope == "global" and seen.decl.scope == "global":
            if _sameness(limit.decl) != _sameness(seen.decl):
                problems.append(
                    f"global limit {limit.id!r} is declared as {_says(seen.decl)} "
                    f"({_where(seen)}) and as {_says(limit.decl)} ({_where(limit)}): a global "
                    f"limit is one limit, declare it alike everywhere"
                )
        else:
            problems.append(
                f"two limits have the id {limit.id!r} ({seen.kind} on {_where(seen)}, "
                f"{limit.kind} on {_where(limit)}): give one of them another name="
            )
    return problems


class RegisteredLimits:
    """The limits of one registry, by id. A global name is declared alike by every
    workflow that declares it (one kind, one max or rate), since the engine keeps one
    limit; any other id belongs to one workflow (its versions share it), which the
    dots could otherwise break: step "c" of workflow "a.b" and step "b.c" of workflow
    "a" both spell "a.b.c/name"."""

    def __init__(self) -> None:
        self._first: dict[str, tuple[str, Limit]] = {}

    def conflicts(self, where: str, spec: FlowSpec) -> list[str]:
        """What in `spec` (of the workflow `where` names) disagrees with the limits
        registered before it."""
        problems = []
        for limit in spec.limits:
            if limit.id not in self._first:
                continue
            there, seen = self._first[limit.id]
            if limit.decl.scope == "global" and seen.decl.scope == "global":
                if there != where and _sameness(limit.decl) != _sameness(seen.decl):
                    problems.append(
                        f"global limit {limit.id!r} is declared as {_says(limit.decl)} "
                        f"({_where(limit)}) but as {_says(seen.decl)} in {there} "
                        f"({_where(seen)}): a global limit is one limit, declare it alike "
                        f"everywhere"
                    )
            elif seen.workflow != limit.workflow or seen.step != limit.step:
                problems.append(
                    f"limit id {limit.id!r} ({_where(limit)}) is already the id of a limit "
                    f"of {there} ({_where(seen)}): give it another name="
                )
        return problems

    def add(self, where: str, spec: FlowSpec) -> None:
        for limit in spec.limits:
            self._first.setdefault(limit.id, (where, limit))
