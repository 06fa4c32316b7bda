"""The examples' nightly schedule as declared, its etl's steps made instant: the
declaration says `step_seconds: 1`, and a step's asyncio.sleep is real time even
on the testing kit's clock (five seconds a night)."""

from __future__ import annotations

import copy

from apollo11.scheduler.examples import etl
from apollo11.scheduler.examples import nightly as declared  # a module: not loaded twice

nightly_etl = copy.copy(declared.nightly_etl)
nightly_etl.input = {**declared.nightly_etl.input, "step_seconds": 0}

__all__ = ["etl", "nightly_etl"]
