"""On a standby the pages are read-only views; actions go to the primary."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest

from apollo11.lease.local_etcd import LocalEtcd, free_port
from apollo11.scheduler.client import SyncClient
from apollo11.scheduler.security import Role, create_token
from apollo11.scheduler.security.certs import create_cluster_certs
from tests.cluster import Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.etcd]


def test_an_action_on_a_standby_page_is_done_by_the_primary(web_cluster: Cluster) -> None:
    c = web_cluster
    primary = c.primary()
    standby = next(m for m in c.members if m.node_id != primary.node_id)
    with SyncClient(c.endpoints) as client:
        sub = client.submit("etl", {"step_seconds": 0, "fail_step": "clean", "fail_times": 4})
        assert client.wait(sub.task_id, check=False).state == "FAILED"
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
        data={
            "step": "clean",
            "display": "carol",
            "reason": "db back",
            "confirm": "yes",
            "csrf": _csrf(page),
        },
    )
    assert r.status_code == 303 and r.headers["location"] == f"/tasks/{sub.task_id}", r.text
    assert "apollo11-flash-" in r.headers["set-cookie"], "the notice travels in a signed cookie"
    with SyncClient(c.endpoints) as client:
        t = client.wait(sub.task_id)
    assert t.state == "SUCCEEDED"
    clean = next(s for s in t.steps if s.name == "clean")
    # the nodes run open (loopback): the primary records its anonymous principal,
    # and the display name typed on the standby's page beside it
    assert clean.override is not None
    assert (clean.override["operator"], clean.override["as"]) == ("anonymous", "carol")


def test_a_standby_forwards_an_action_with_the_sessions_token(
    tmp_path: Path,
    etcd_server: LocalEtcd,
    cluster_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a tokens file, the primary records the principal who signed in on the
    standby's page: the standby forwards with that session's own token."""
    tokens = tmp_path / "tokens"
    olga = create_token(tokens, "olga", Role.OPERATOR)
    ci = create_token(tokens, "ci", Role.OPERATOR)
    certs = tmp_path / "certs"
    create_cluster_certs(certs, ["n1", "n2", "n3"])
    c = Cluster.create(
        tmp_path, etcd_server.url, cluster_name, 3, "--tokens-file", str(tokens), http=True
    )
    for m in c.members:
        m.env.update(
            APOLLO11_PEER_LISTEN=f"127.0.0.1:{free_port()}",
            APOLLO11_PEER_CA=str(certs / "ca.pem"),
            APOLLO11_PEER_CERT=str(certs / f"{m.node_id}.pem"),
            APOLLO11_PEER_KEY=str(certs / f"{m.node_id}-key.pem"),
        )
    c.start()
    # The test's own clients (and Cluster's status probes) sign with another token,
    # set only now that the nodes run, so no node process can have it.
    monkeypatch.setenv("APOLLO11_TOKEN", ci)
    try:
        primary = c.primary()
        standby = next(m for m in c.members if m.node_id != primary.node_id)
        with SyncClient(c.endpoints) as client:
            sub = client.submit("etl", {"step_seconds": 0, "fail_step": "clean", "fail_times": 4})
            assert client.wait(sub.task_id, check=False).state == "FAILED"
        with httpx.Client(base_url=f"http://127.0.0.1:{standby.http_port}") as browser:
            deadline = time.monotonic() + 15
            while True:
                try:
                    form = browser.get("/login")
                    break
                except httpx.ConnectError:
                    assert time.monotonic() < deadline, "the standby's pages never came up"
                    time.sleep(0.1)
            r = browser.post("/login", data={"token": olga, "csrf": _csrf(form.text)})
            assert r.status_code == 303
            while "FAILED" not in (page := browser.get(f"/tasks/{sub.task_id}").text):
                assert time.monotonic() < deadline, "the standby never showed the task"
                time.sleep(0.1)
            r = browser.post(
                f"/tasks/{sub.task_id}/retry",
                data={
                    "step": "clean",
                    "display": "Olga",
                    "reason": "db back",
                    "confirm": "yes",
                    "csrf": _csrf(page),
                },
            )
            assert r.status_code == 303, r.text
            assert "retry of clean recorded as event" in browser.get(r.headers["location"]).text
        with SyncClient(c.endpoints) as client:
            t = client.wait(sub.task_id)
        clean = next(s for s in t.steps if s.name == "clean")
        assert clean.override is not None
        assert (clean.override["operator"], clean.override["as"]) == ("olga", "Olga")
    finally:
        c.stop()


def _csrf(page: str) -> str:
    m = re.search(r'name="csrf" value="([^"]+)"', page)
    assert m is not None
    return m.group(1)
