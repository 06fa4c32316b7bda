"""A step's retry policy as declared: attempts and backoff, and rules by cause.

    Retry(attempts=5, backoff_s=1, max_backoff_s=60,
          on={TimeoutError: Retry(attempts=10, backoff_s=0.5),
              ConnectionError: Retry(attempts=20, backoff_s=2),
              ValueError: FINAL},
          on_exhausted="fail")

A failure is matched to the rule of the most specific of its classes that `on`
names (its MRO, first match), else to the policy's own numbers, the default rule;
each rule has its own budget (scheduler/retry.py decides, from the log). `FINAL`: that
cause is never retried. Only the policy's own `max_lost` counts losses (a node dying
mid-attempt has no cause); a rule's own `max_lost` is not read.

`on_exhausted` says what a failure that is final does to the task: "fail" (the task
FAILED), "pause" (PAUSED until an operator retries it) or "compensate" (the steps that
succeeded are compensated, dependents first, and the task ends COMPENSATED). None:
inherited, a rule's from its policy, a policy's from its workflow
(`Workflow(on_exhausted=...)`), else "fail" (`exhausted_by`).

Nothing here raises when declared: `problems()` says what is wrong, and registration
(Workflow.validate) refuses the workflow naming it and the step, so a definition's
every fault is reported at once, in a sentence that says where.
"""

from __future__ import annotations

import hashlib
import math
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from apollo11.scheduler.cause import qualified

DEFAULT_RULE: Final = "default"  # the name of a policy's own numbers, as a FAILED records it
Exhausted = Literal["fail", "pause", "compensate"]
EXHAUSTED: tuple[Exhausted, ...] = ("fail", "pause", "compensate")


@dataclass(frozen=True, slots=True)
class Never:
    """The rule of a cause that is never retried: its first failure is final."""

    def __repr__(self) -> str:
        return "FINAL"


FINAL: Final = Never()


@dataclass(frozen=True, slots=True)
class Retry:
    """Attempts and exponential backoff with jitter, capped; rules by cause in `on`.

    An attempt interrupted because its node died (or lost the lease) does not
    use up `attempts`: that is not the step's fault. But a step that keeps
    killing its node (out of memory, say) must stop somewhere: after
    `max_lost` interruptions it fails for good.

    `on`: exception class -> its own `Retry` (its own budget and backoff) or `FINAL`.
    `on_exhausted`: what a final failure does to the task: "fail", "pause" or
    "compensate"; None (the default) inherits it (the module's docstring).
    """

    attempts: int = 3
    backoff_s: float = 1.0
    multiplier: float = 2.0
    max_backoff_s: float = 60.0
    jitter: float = 0.2  # +/- this fraction of the delay
    max_lost: int = 10
    # compare=True, hash=False: a frozen mapping is still not hashable
    on: Mapping[type[BaseException], Retry | Never] = field(
        default_factory=lambda: types.MappingProxyType({}), hash=False
    )
    on_exhausted: Exhausted | None = None

    def __post_init__(self) -> None:
        if isinstance(self.on, Mapping) and not isinstance(self.on, types.MappingProxyType):
            # a copy the caller cannot change behind the policy's back
            object.__setattr__(self, "on", types.MappingProxyType(dict(self.on)))

    def delay_s(self, attempt: int, seed: str) -> float:
        """Delay before attempt `attempt + 1`, after `attempt` failed.

        Jitter is derived from `seed` (task, step, attempt), not from a random
        source: a standby that takes over computes the same retry time.
        """
        base = min(self.max_backoff_s, self.backoff_s * self.multiplier ** max(0, attempt - 1))
        digest = hashlib.blake2b(f"{seed}:{attempt}".encode(), digest_size=4).digest()
        unit = int.from_bytes(digest, "little") / 0xFFFFFFFF  # [0, 1]
        return max(0.0, base * (1 + self.jitter * (2 * unit - 1)))

    def exhausted_by(self, rule: Retry | Never) -> Exhausted:
        """What a final failure judged by `rule` (one of `on`'s, or the policy itself)
        does to the task: the rule's own `on_exhausted`, else the policy's, else "fail"."""
        if isinstance(rule, Retry) and rule.on_exhausted is not None:
            return rule.on_exhausted
        return self.on_exhausted or "fail"

    def rules(self) -> dict[str, Retry | Never]:
        """`on` by the qualified names a FAILED records (`builtins.TimeoutError`)."""
        return {qualified(cls): rule for cls, rule in self.on.items() if isinstance(cls, type)}

    def problems(self) -> list[str]:
        """What is wrong with it, each a sentence (empty: nothing)."""
        out = _numbers(self)
        if self.on_exhausted is not None and self.on_exhausted not in EXHAUSTED:
            out.append(_unknown_mode(self.on_exhausted))
        if not isinstance(self.on, Mapping):
            out.append(f"on must be a dict of exception class -> Retry or FINAL, got {self.on!r}")
            return out
        for key, rule in self.on.items():
            name = key.__name__ if isinstance(key, type) else repr(key)
            if not isinstance(key, type) or not issubclass(key, BaseException):
                out.append(f"on key {key!r} is not an exception class (on={{TimeoutError: ...}})")
                continue
            if isinstance(rule, Never):
                continue
            if not isinstance(rule, Retry):
                out.append(f"on[{name}] must be a Retry or FINAL, got {rule!r}")
                continue
            if rule.on:
                out.append(f"on[{name}] has rules of its own (on=): one level only")
            out += [f"on[{name}]: {p}" for p in _numbers(rule)]
            if rule.on_exhausted is not None and rule.on_exhausted not in EXHAUSTED:
                out.append(f"on[{name}]: {_unknown_mode(rule.on_exhausted)}")
        return out


def _unknown_mode(mode: Any) -> str:
    return f"on_exhausted must be one of {', '.join(map(repr, EXHAUSTED))} or None, got {mode!r}"


def _numbers(r: Retry) -> list[str]:
    out: list[str] = []
    if not _number(r.attempts, integer=True) or r.attempts < 1:
        out.append(f"attempts must be a whole number, at least 1, got {r.attempts!r}")
    for name in ("backoff_s", "max_backoff_s"):
        value = getattr(r, name)
        if not _number(value) or value < 0:
            out.append(f"{name} must be seconds >= 0, got {value!r}")
    if not _number(r.multiplier) or r.multiplier < 1:
        out.append(f"multiplier must be >= 1, got {r.multiplier!r}")
    if not _number(r.jitter) or not 0 <= r.jitter < 1:
        out.append(f"jitter must be in [0, 1), got {r.jitter!r}")
    if not _number(r.max_lost, integer=True) or r.max_lost < 1:
        out.append(f"max_lost must be a whole number, at least 1, got {r.max_lost!r}")
    return out


def _number(value: Any, *, integer: bool = False) -> bool:
    if isinstance(value, bool) or not isinstance(value, int if integer else int | float):
        return False
    return math.isfinite(value)
