"""gctune.settle: what a node and a worker do to the collector once started."""

from __future__ import annotations

import subprocess
import sys

from apollo11.scheduler import gctune


def test_settle_freezes_what_exists_and_raises_the_young_threshold() -> None:
    # in a fresh interpreter: the test process's own collector is left as it is
    code = (
        "import gc\n"
        "from apollo11.scheduler import gctune\n"
        "before = gc.get_threshold()\n"
        "gctune.settle()\n"
        "print(before, gc.get_threshold(), gc.get_freeze_count() > 1000)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split(")")
    before = tuple(int(x) for x in out[0].strip(" (").split(","))
    after = tuple(int(x) for x in out[1].strip(" (").split(","))
    assert after == (gctune.YOUNG_THRESHOLD, before[1], before[2])
    assert out[2].strip() == "True"  # the modules loaded so far are out of its scans
