"""The CLI's start-up stays light: `apollo11 --help` and a client command load no
server module (the node's flags, made from its settings model, only for `node`).

Checked in a fresh interpreter, since this test process has long imported everything.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SERVER_MODULES = (
    "apollo11.lease",
    "apollo11.replicator",
    "apollo11.scheduler.api.codec",
    "apollo11.scheduler.api.server",
    "apollo11.scheduler.config",
    "apollo11.scheduler.engine",
    "apollo11.scheduler.log",
    "apollo11.scheduler.metrics",
    "apollo11.scheduler.node",
    "apollo11.scheduler.state",
    "apollo11.scheduler.web",
    "pydantic_settings",
)

PROBE = """
import atexit, json, sys
atexit.register(lambda: print("MODULES", json.dumps(sorted(sys.modules)), file=sys.stderr))
sys.argv = ["apollo11", *json.loads(sys.argv[1])]
from apollo11.scheduler.cli import main
main()
"""


def _loaded(*args: str) -> list[str]:
    res = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    line = next(x for x in res.stderr.splitlines() if x.startswith("MODULES "))
    modules: list[str] = json.loads(line.removeprefix("MODULES "))
    return modules


def _server(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == s or m.startswith(s + ".") for s in SERVER_MODULES)]


@pytest.mark.parametrize("args", [("--help",), ("status", "--help"), ("bench", "--help")])
def test_help_loads_no_server_module_nor_grpc(args: tuple[str, ...]) -> None:
    modules = _loaded(*args)
    assert _server(modules) == []
    assert "grpc" not in modules


def test_a_client_command_loads_no_server_module() -> None:
    modules = _loaded("status", "--server", "127.0.0.1:1")  # nothing listens on port 1
    assert "apollo11.scheduler.client" in modules, "the command did not get to its call"
    assert _server(modules) == []


def test_node_help_loads_the_settings_model_but_no_node() -> None:
    modules = _loaded("node", "--help")
    assert "apollo11.scheduler.config" in modules
    assert [m for m in modules if m.startswith("apollo11.scheduler.node")] == []
