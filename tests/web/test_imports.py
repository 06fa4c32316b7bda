"""The two servers share scheduler/nodeview/ and nothing else: the web pages load no
module of the gRPC API (api/'s face is its server), and the API none of the pages.

Checked in a fresh interpreter, since this test process has long imported everything.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = "import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"


def _loaded(module: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    modules: list[str] = json.loads(out.stdout)
    return modules


def _of(modules: list[str], package: str) -> list[str]:
    return [m for m in modules if m == package or m.startswith(package + ".")]


@pytest.mark.parametrize(
    ("module", "loads", "not_loaded"),
    [
        ("apollo11.scheduler.web", "apollo11.scheduler.web.pages", "apollo11.scheduler.api"),
        ("apollo11.scheduler.api", "apollo11.scheduler.api.server", "apollo11.scheduler.web"),
    ],
)
def test_one_server_loads_none_of_the_other(module: str, loads: str, not_loaded: str) -> None:
    modules = _loaded(module)
    assert loads in modules, "the probe did not load the server it checks"
    assert "apollo11.scheduler.nodeview" in modules
    assert _of(modules, not_loaded) == []
    assert _of(modules, "apollo11.scheduler.node") == []
