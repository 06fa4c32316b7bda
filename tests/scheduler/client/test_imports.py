"""`import apollo11.scheduler.client` loads no server code and registers no metric.

An application that embeds the client has its own Prometheus registry and its own
import time: neither may pay for the engine, the store or the node. Checked in a
fresh interpreter, since this test process has long imported everything.
"""

from __future__ import annotations

import json
import subprocess
import sys

SERVER_MODULES = (
    "apollo11.scheduler.api.codec",
    "apollo11.scheduler.api.server",
    "apollo11.scheduler.config",
    "apollo11.scheduler.engine",
    "apollo11.scheduler.log",
    "apollo11.scheduler.metrics",
    "apollo11.scheduler.node",
    "apollo11.scheduler.state",
    "apollo11.scheduler.security.interceptor",
    "apollo11.scheduler.security.tokens",
)

PROBE = """
import json, sys
import apollo11.scheduler.client
import prometheus_client
print(json.dumps({
    "modules": sorted(sys.modules),
    "metrics": sorted(
        name for name in prometheus_client.REGISTRY._names_to_collectors
        if name.startswith("apollo11")
    ),
}))
"""


def _probe() -> dict[str, list[str]]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    result: dict[str, list[str]] = json.loads(out.stdout)
    return result


def test_the_client_loads_no_server_module_and_registers_no_metric() -> None:
    found = _probe()
    server = [
        m for m in found["modules"] if any(m == s or m.startswith(s + ".") for s in SERVER_MODULES)
    ]
    assert server == [], "apollo11.scheduler.client must not import server code"
    assert found["metrics"] == [], "apollo11.scheduler.client must not register a metric"


def test_the_client_still_exports_its_names() -> None:
    import apollo11.scheduler.client as client

    for name in (
        "ApiError",
        "Client",
        "DEFAULT_SERVER",
        "EventView",
        "Page",
        "StatusView",
        "Submission",
        "SyncClient",
        "TaskView",
        "UnavailableError",
        "channel_credentials_for",
        "endpoints_from",
    ):
        assert hasattr(client, name), name
