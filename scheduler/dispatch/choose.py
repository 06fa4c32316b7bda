"""Which worker takes a step's next attempt: a pure function of what is connected.

A worker qualifies when it registered the task's workflow at the task's version
and has a free slot. Among those, the one with the most free slots takes it (it
spreads load, and a worker that just connected fills first); ties go to the
name, so the answer is the same for the same inputs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Offer:
    """What one connected worker offers now."""

    name: str
    free: int
    workflows: frozenset[tuple[str, int]]


def choose(offers: Iterable[Offer], workflow: str, version: int) -> str | None:
    best: Offer | None = None
    want = (workflow, version)
    for o in offers:
        if o.free <= 0 or want not in o.workflows:
            continue
        if best is None or o.free > best.free or (o.free == best.free and o.name < best.name):
            best = o
    return None if best is None else best.name


def why_none(offers: Iterable[Offer], workflow: str, version: int) -> str:
    """Why `choose` found nobody, in a sentence for operators."""
    offers = list(offers)
    if not offers:
        return "no worker is connected"
    able = [o for o in offers if (workflow, version) in o.workflows]
    if not able:
        names = ", ".join(sorted(o.name for o in offers))
        return f"no connected worker ({names}) registered {workflow} v{version}"
    return f"every worker with {workflow} v{version} is busy ({len(able)} of them)"
