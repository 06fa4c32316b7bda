"""The cyclic garbage collector, set for a long-running server process.

Almost everything a node allocates per step (events, futures, dicts of a task's
state) is freed by reference counting; the cyclic collector runs because the
count of objects allocated and not yet freed passes its young threshold. At
Python's default of 700, under a backlog a node collected its young generation
about 200 times a second, its middle one 20 times (4–5 ms each) and the whole
heap twice (30 ms each): a fifth of the node's time went to collections that
found next to nothing, and more of it when steps run on workers, where each
step allocates more (docs/bench-history/workers.md, "Dec 2: the cyclic GC"). A young
threshold of 5,000 cut the collections' time by half and the full ones to
almost none; each young pass then takes about 3 ms, under the dispatch and
replication targets.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 5000


def settle() -> None:
    """Once the process has loaded what lives as long as it (modules, recovered
    state): freeze that out of the collector's scans, and raise the young threshold."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
