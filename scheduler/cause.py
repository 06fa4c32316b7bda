"""Why an attempt failed, as data: what crosses a worker's stream and lands in the log.

A step's exception cannot cross a process (a worker's, a step's child) or outlive one
(a replay reads the log years later), so what the retry rule (scheduler/retry.py)
matches is a record of it: the qualified names of the exception's classes, most
specific first (its MRO), its message, and the `retry_after` a `StepError` asked
for. Matching by names along the MRO is `isinstance` on the class that raised,
computed where the class is gone.

Names are `module.qualname` (`builtins.TimeoutError`, `httpx.ReadTimeout`): the same
on the worker that raised and on the primary that loaded the workflow's module.
A failure without the names (an older worker, a FAILED written before they were
recorded) has its short type name alone, and `legacy` says so: rules match it by
the class's short name.

Light on purpose: the worker process, the durable context and the CLI import it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


def qualified(cls: type) -> str:
    """`module.qualname` of a class: how a cause and a rule name it."""
    return f"{cls.__module__}.{cls.__qualname__}"


def short(name: str) -> str:
    """What a person reads, and a metric's label: the class's own name, `TimeoutError`
    for `builtins.TimeoutError`, `ReadTimeout` for `httpx.ReadTimeout` (the record
    keeps the qualified name)."""
    return name.rpartition(".")[2]


_MRO_KEPT = 1024  # classes whose names are kept (a workflow making classes on the fly)
_mro_kept: dict[type, tuple[str, ...]] = {}


def mro_names(cls: type) -> tuple[str, ...]:
    """The qualified names of `cls` and its bases, most specific first, without `object`
    (every class has it: matching it would match anything). Kept per class: a step
    raises the same few, and every failure asks."""
    names = _mro_kept.get(cls)
    if names is None:
        if len(_mro_kept) >= _MRO_KEPT:
            _mro_kept.clear()
        names = _mro_kept[cls] = tuple(qualified(c) for c in cls.__mro__ if c is not object)
    return names


def retry_after(value: Any) -> float | None:
    """A `StepError(..., retry_after=...)` as seconds: a finite number >= 0, else None
    (a step's bad value must not stop its failure from being recorded)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    seconds = float(value)
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


@dataclass(frozen=True, slots=True)
class Cause:
    """A failure's cause. `mro`: qualified class names, most specific first; empty when
    only `type` is known, a short name (`legacy`)."""

    type: str
    mro: tuple[str, ...] = ()
    message: str = ""
    retry_after_s: float | None = None

    @property
    def legacy(self) -> bool:
        return not self.mro

    @property
    def names(self) -> tuple[str, ...]:
        """What rules are matched against, most specific first."""
        return self.mro or (self.type,)

    def record(self) -> dict[str, Any]:
        """The FAILED payload's `cause`."""
        out: dict[str, Any] = {"type": self.type, "mro": list(self.mro), "message": self.message}
        if self.retry_after_s is not None:
            out["retry_after_s"] = self.retry_after_s
        return out

    @classmethod
    def from_record(cls, p: Mapping[str, Any]) -> Cause | None:
        """The `cause` of a FAILED payload; None when it records none (an old log)."""
        c = p.get("cause")
        # a dict and a list, the everyday case, without the ABCs' isinstance (dear, at
        # every failure); anything else as before
        if type(c) is not dict and not isinstance(c, Mapping):
            return None
        mro = c.get("mro")
        if type(mro) is list or type(mro) is tuple:
            names = tuple(map(str, mro))
        else:
            names = tuple(str(n) for n in mro) if isinstance(mro, Sequence) else ()
        return cls(
            str(c.get("type", "")),
            names,
            str(c.get("message", "")),
            retry_after(c.get("retry_after_s")),
        )


def of_class(cls: type, message: str = "", retry_after_s: float | None = None) -> Cause:
    return Cause(qualified(cls), mro_names(cls), message, retry_after_s)


def of_exception(e: BaseException) -> Cause:
    """The cause of an exception a step raised (a StepError's `retry_after` included)."""
    details = getattr(e, "details", None)
    after = retry_after(details.get("retry_after")) if isinstance(details, Mapping) else None
    return of_class(type(e), str(e), after)


def legacy(type_name: str, message: str = "", details: Mapping[str, Any] | None = None) -> Cause:
    """A failure known by its short type name alone (an older worker's)."""
    return Cause(type_name, (), message, retry_after((details or {}).get("retry_after")))


def _seconds(s: float) -> str:
    return f"{s:.0f}" if s >= 100 else f"{s:.3g}"


def verdict_line(p: Mapping[str, Any]) -> str | None:
    """A FAILED payload's cause and the retry rule's verdict, in a line for people:
    `TimeoutError → retry 3/10 in 0.5 s`, `ReadTimeout (as TimeoutError) → …`,
    `KeyError → final, 5/5 spent`, `… → final, 5/5 spent; task paused` (its
    `on_exhausted`), `TimeoutError → retry 2/3 in 14.2 s (12.9 s paced: 1,000 failing)`
    (the step's retry budget's share of the delay). None for what records no verdict
    (a failed compensation, a FAILED written before verdicts were)."""
    if p.get("compensation"):
        return None
    line = _verdict_line(p)
    then = p.get("exhausted")
    if line is not None and isinstance(then, str) and then in _THEN:
        line += f"; {_THEN[then]}"
    return line


# what a final failure's `exhausted` did to the task, as the line ends
_THEN = {"pause": "task paused", "compensate": "task compensated"}


def _paced(p: Mapping[str, Any]) -> str:
    """A lost attempt's retry paced by its step's retry budget: ` in 3.2 s (2.1 s paced:
    1,000 failing)`; "" when it was not (its FAILED records no delay)."""
    after, paced = p.get("retry_in_s"), p.get("paced_s")
    if not isinstance(after, int | float) or not isinstance(paced, int | float):
        return ""
    failing = p.get("failing")
    among = f": {failing:,} failing" if isinstance(failing, int) else ""
    return f" in {_seconds(float(after))} s ({_seconds(float(paced))} s paced{among})"


def _verdict_line(p: Mapping[str, Any]) -> str | None:
    final = bool(p.get("final"))
    if p.get("lost"):
        if final:
            return "lost (its node died) → final, max_lost reached"
        return "lost (its node died) → retry" + _paced(p)
    decision = p.get("decision")
    rule = p.get("rule")
    if not isinstance(decision, Mapping) or not isinstance(rule, str):
        return None
    c = Cause.from_record(p)
    name = short(c.type) if c is not None and c.type else "failure"
    if rule != "default" and short(rule) != name:
        name += f" (as {short(rule)})"
    n, of = decision.get("failures"), decision.get("attempts")
    if not final:
        after = p.get("retry_in_s")
        when = f" in {_seconds(float(after))} s" if isinstance(after, int | float) else ""
        paced = p.get("paced_s")
        if c is not None and c.retry_after_s is not None and isinstance(after, int | float):
            own = after - (paced if isinstance(paced, int | float) else 0)
            if abs(own - c.retry_after_s) < 1e-6:
                when += " (its retry_after)"
        if isinstance(paced, int | float) and paced > 0:  # the step's retry budget's share
            failing = p.get("failing")
            among = f": {failing:,} failing" if isinstance(failing, int) else ""
            when += f" ({_seconds(float(paced))} s paced{among})"
        return f"{name} → retry {n}/{of}{when}"
    if isinstance(n, int) and isinstance(of, int) and n >= of:
        return f"{name} → final, {n}/{of} spent" if of > 1 else f"{name} → final, never retried"
    return f"{name} → final (it said so)"
