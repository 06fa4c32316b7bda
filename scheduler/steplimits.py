"""A step's resource limits as declared, and what a step stopped at one fails with.

    @wf.step(idempotency=Idempotent(), limits=Limits(memory="512MiB", cpu_s=600),
             retry=Retry(on={MemoryLimitExceeded: FINAL}))

A step with limits runs on a worker in a child process of its own, fenced in there
(scheduler/worker/_fence.py says how); a node that runs steps itself refuses them
(docs/workers.md, "Step limits"). Stopped at its memory limit, the step fails with
`MemoryLimitExceeded`; at its CPU seconds, with `CpuLimitExceeded`. Both are causes
like any other: the retry rules match them by their MRO (scheduler/cause.py).

Sizes are strict: a whole or decimal number and a unit, binary (`KiB`, `MiB`, `GiB`,
`TiB`, powers of 1024) or decimal (`KB`, `MB`, `GB`, `TB`, powers of 1000), or a
whole number of bytes as an int. `"100M"`, `"1Gi"`, `"512m"` are refused: tools read
them differently (Docker's `m` is MiB, Kubernetes' `M` is 10^6), and a limit off by
5 % one way or the other is a limit nobody chose.

Nothing here raises when declared: `problems()` says what is wrong, and registration
(Workflow.validate) refuses the workflow naming it and the step, as retrypolicy.py
does. Light on purpose: the worker's child process imports it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Final

UNITS: Final[dict[str, int]] = {
    "B": 1,
    "KiB": 1 << 10,
    "MiB": 1 << 20,
    "GiB": 1 << 30,
    "TiB": 1 << 40,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
}
_SIZE = re.compile(r"(\d+(?:\.\d+)?) ?([A-Za-z]+)")
# Below this the child's own interpreter (28 MiB of data with the worker's modules
# loaded: docs/workers.md) leaves a step next to nothing: a typo, not a limit.
MIN_MEMORY: Final = 64 << 20


class StepLimitExceeded(Exception):
    """A step was stopped at one of its declared limits (`Limits`)."""


class MemoryLimitExceeded(StepLimitExceeded, MemoryError):
    """The step's process went past its memory limit. A MemoryError too: a rule for
    MemoryError matches it, unless a rule names this class."""


class CpuLimitExceeded(StepLimitExceeded):
    """The step's process used its CPU seconds (`Limits.cpu_s`)."""


# Named by the public face, `apollo11.MemoryLimitExceeded`, in every FAILED's cause and
# rule: the log keeps the name, and the internal module it is defined in may move.
for _cls in (StepLimitExceeded, MemoryLimitExceeded, CpuLimitExceeded):
    _cls.__module__ = "apollo11"


def parse_size(value: Any) -> int:
    """Bytes, from `"512MiB"`, `"1.5 GiB"`, `"100MB"` or an int; ValueError saying what
    was wrong and what to write instead."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"must be a size such as '512MiB' or a number of bytes, got {value!r}")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"must be more than 0 bytes, got {value}")
        return value
    m = _SIZE.fullmatch(value.strip())
    if m is None:
        raise ValueError(f"{value!r} is not a size: write a number and a unit, such as '512MiB'")
    number, unit = m.groups()
    if unit not in UNITS:
        known = {u.lower(): u for u in UNITS}
        near = [
            known[k] for k in (unit.lower(), unit.lower() + "b", unit.lower() + "ib") if k in known
        ]
        hint = f"; did you mean {' or '.join(number + u for u in near)}?" if near else ""
        raise ValueError(f"{value!r}: unknown unit {unit!r} (units: {', '.join(UNITS)}{hint})")
    size = math.floor(float(number) * UNITS[unit])
    if size <= 0:
        raise ValueError(f"{value!r} is no memory at all")
    return size


def format_size(n: int) -> str:
    """`536870912` -> `512 MiB`: how messages say a limit."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        if n >= UNITS[unit]:
            return f"{n / UNITS[unit]:.4g} {unit}"
    return f"{n} B"


@dataclass(frozen=True, slots=True)
class Limits:
    """What one attempt of the step may use, in its own process.

    `memory`: a size (`"512MiB"`, `"2GiB"`, bytes as an int); `cpu_s`: CPU seconds
    (user + system, counted by the kernel, not wall time; rounded up to a whole
    second, which is what the kernel counts in). Either may be left out."""

    memory: str | int | None = None
    cpu_s: float | None = None

    @property
    def memory_bytes(self) -> int | None:
        """The memory limit in bytes (the declaration must be valid: `problems()`)."""
        return None if self.memory is None else parse_size(self.memory)

    @property
    def cpu_seconds(self) -> int | None:
        """The CPU limit as the kernel counts it: whole seconds, rounded up."""
        return None if self.cpu_s is None else max(1, math.ceil(self.cpu_s))

    def problems(self) -> list[str]:
        """What is wrong with it, each a sentence (empty: nothing)."""
        out: list[str] = []
        if self.memory is None and self.cpu_s is None:
            out.append("limits declare nothing: give memory=, cpu_s= or both")
        if self.memory is not None:
            try:
                size = parse_size(self.memory)
            except ValueError as e:
                out.append(f"limits memory {e}")
            else:
                if size < MIN_MEMORY:
                    out.append(
                        f"limits memory {format_size(size)} is less than the "
                        f"{format_size(MIN_MEMORY)} a step's process needs to start"
                    )
        cpu = self.cpu_s
        if cpu is not None and not (
            not isinstance(cpu, bool)
            and isinstance(cpu, int | float)
            and math.isfinite(cpu)
            and cpu > 0
        ):
            out.append(f"limits cpu_s must be seconds > 0, got {cpu!r}")
        return out

    def describe(self) -> str:
        """`memory 512 MiB, 600 CPU s`: how log lines and messages name it."""
        parts = []
        if self.memory is not None:
            parts.append(f"memory {format_size(parse_size(self.memory))}")
        if self.cpu_s is not None:
            parts.append(f"{self.cpu_seconds} CPU s")
        return ", ".join(parts)


def effective(declared: Limits | None, default_memory: int | None) -> Limits | None:
    """The limits an attempt runs under: the step's, its memory defaulting to the
    worker's `--step-memory` when it declares none. None: no limit at all."""
    if declared is None:
        return None if default_memory is None else Limits(memory=default_memory)
    if declared.memory is None and default_memory is not None:
        return Limits(memory=default_memory, cpu_s=declared.cpu_s)
    return declared
