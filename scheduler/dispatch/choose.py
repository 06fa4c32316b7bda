"""Which worker takes a step's next attempt: a pure function of what is connected.

A worker qualifies when it registered the task's workflow at the task's version,
has a free slot, and carries every label the step requires (`labels=` on the
step; a worker's `--labels`). Among those, the one with the most free slots takes it (it
spreads load, and a worker that just connected fills first); ties go to the
name, so the answer is the same for the same inputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol


class Offering(Protocol):
    """What one connected worker offers now (a connection is one: choosing reads
    the connections themselves, with no copy per placement)."""

    @property
    def name(self) -> str: ...
    @property
    def free(self) -> int: ...
    @property
    def workflows(self) -> frozenset[tuple[str, int]]: ...
    @property
    def labels(self) -> Mapping[str, str]: ...


@dataclass(frozen=True, slots=True)
class Offer:
    """An offer as plain data (tests, and anything that is not a connection)."""

    name: str
    free: int
    workflows: frozenset[tuple[str, int]]
    labels: Mapping[str, str]


def _fits(o: Offering, labels: Mapping[str, str]) -> bool:
    return all(o.labels.get(k) == v for k, v in labels.items())


def choose(
    offers: Iterable[Offering], workflow: str, version: int, labels: Mapping[str, str]
) -> str | None:
    best: Offering | None = None
    want = (workflow, version)
    most = 0
    for o in offers:
        free = o.free
        if free <= 0 or want not in o.workflows or (labels and not _fits(o, labels)):
            continue
        if best is None or free > most or (free == most and o.name < best.name):
            best, most = o, free
    return None if best is None else best.name


def free_for(
    offers: Iterable[Offering], workflow: str, version: int, labels: Mapping[str, str]
) -> int:
    """The free slots of the workers that could take such an attempt."""
    # a loop, not sum() over a generator: asked each time a slot frees (docs/benchmarks.md)
    want = (workflow, version)
    n = 0
    for o in offers:
        if want in o.workflows and (not labels or _fits(o, labels)):
            free = o.free
            if free > 0:
                n += free
    return n


def why_none(
    offers: Iterable[Offering], workflow: str, version: int, labels: Mapping[str, str]
) -> str | None:
    """Why `choose` found nobody, in a sentence for operators; None when every worker
    that could take it is merely busy."""
    offers = list(offers)
    if not offers:
        return "no worker is connected"
    able = [o for o in offers if (workflow, version) in o.workflows]
    if not able:
        names = ", ".join(sorted(o.name for o in offers))
        return f"no connected worker ({names}) registered {workflow} v{version}"
    fitting = [o for o in able if _fits(o, labels)]
    if not fitting:
        wanted = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        return f"no worker with {workflow} v{version} has the labels {wanted}"
    return None  # busy: the attempt waits for a slot, as an embedded one does
