"""On a standby the pages are read-only views; actions go to the primary."""

from __future__ import annotations

import time

import httpx
import pytest

from scheduler.client import SyncClient
from tests.cluster import Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.etcd]


def test_an_action_on_a_standby_page_is_done_by_the_primary(web_cluster: Cluster) -> None:
    c = web_cluster
    primary = c.primary()
    standby = next(m for m in c.members if m.node_id != primary.node_id)
    with SyncClient(c.endpoints) as client:
        sub = client.submit("etl", {"step_seconds": 0, "fail_step": "clean", "fail_times": 4})
        assert client.wait(sub.task_id).state == "FAILED"
    base = f"http://127.0.0.1:{standby.http_port}"
    deadline = time.monotonic() + 15
    while True:
        try:
            if "FAILED" in httpx.get(f"{base}/tasks/{sub.task_id}").text:
                break
        except httpx.ConnectError:
            pass  # still starting
        assert time.monotonic() < deadline, "the standby never showed the task"
        time.sleep(0.1)
    page = httpx.get(f"{base}/tasks/{sub.task_id}").text
    assert "read-only view; actions go to the primary" in page
    r = httpx.post(
        f"{base}/tasks/{sub.task_id}/retry",
        data={"step": "clean", "operator": "carol", "reason": "db back", "confirm": "yes"},
    )
    assert r.status_code == 303 and "message=" in r.headers["location"], r.headers
    with SyncClient(c.endpoints) as client:
        t = client.wait(sub.task_id)
    assert t.state == "SUCCEEDED"
    clean = next(s for s in t.steps if s.name == "clean")
    assert clean.override is not None and clean.override["as"] == "carol"
    assert clean.override["operator"] == "anonymous", "no credential on a loopback cluster"
