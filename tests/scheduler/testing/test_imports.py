"""Importing the kit loads the engine but starts no thread and binds no port; pytest
loads its plugin without the engine."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys, threading
import apollo11.testing
import apollo11.scheduler.pytest_plugin
print(json.dumps({"threads": threading.active_count(),
                  "engine": "apollo11.scheduler.engine" in sys.modules}))
"""

PLUGIN = """
import json, sys
import apollo11.scheduler.pytest_plugin
print(json.dumps(sorted(m for m in sys.modules if m.startswith("apollo11"))))
"""


def _run(code: str) -> object:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_the_kit_starts_no_thread() -> None:
    assert _run(PROBE) == {"threads": 1, "engine": True}


def test_the_plugin_loads_nothing_of_the_engine() -> None:
    assert _run(PLUGIN) == ["apollo11", "apollo11.scheduler", "apollo11.scheduler.pytest_plugin"]
