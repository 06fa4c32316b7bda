"""Durable mains run on workers, which load no server module: neither may the durable
API nor the retry rule its ctx.step asks (scheduler/retry.py)."""

from __future__ import annotations

import json
import subprocess
import sys

SERVER = ("node", "engine", "store", "log", "replay", "metrics", "api.server", "api.codec")


def test_a_durable_workflow_loads_no_server_module() -> None:
    probe = (
        "import sys, json, apollo11.scheduler.worker, apollo11.scheduler.durable, "
        "apollo11.scheduler.retry; print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    modules = json.loads(out.stdout)
    assert "apollo11.scheduler.retry" in modules
    loaded = [
        m
        for m in modules
        if any(
            m == f"apollo11.scheduler.{s}" or m.startswith(f"apollo11.scheduler.{s}.")
            for s in SERVER
        )
        or m.startswith(("apollo11.replicator", "apollo11.lease"))
    ]
    assert loaded == []
