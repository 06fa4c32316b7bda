"""The Host allowlist against DNS rebinding, in process."""

from __future__ import annotations

from pathlib import Path

import pytest

from apollo11.scheduler.config import load_settings
from apollo11.scheduler.security import Principal, Role
from apollo11.scheduler.web.guard import Gate, allowed_hosts, host_name, sign_in_refusal


def test_host_names_without_port_brackets_or_case() -> None:
    assert host_name("Evil.Example:7412") == "evil.example"
    assert host_name("[::1]:7412") == "::1"
    assert host_name("localhost.") == "localhost"
    assert host_name("node1") == "node1"


def test_the_allowed_hosts_of_a_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APOLLO11_HTTP_ALLOWED_HOSTS", "ui.example, Ops.Example:443")
    s = load_settings(
        data_dir=tmp_path, node_id="node1", http="0.0.0.0:7412", advertise="apollo-a:7411"
    )
    assert s.http_allowed_hosts == ["ui.example", "Ops.Example:443"]
    hosts = allowed_hosts(
        node_id=s.node_id, http=s.http, advertise=s.advertise, extra=s.http_allowed_hosts
    )
    gate = Gate(None, node_id="node1", tls=False, metrics_open=False, hosts=hosts)
    # Prometheus in docker compose scrapes nodeN:7412; a browser on the host, 127.0.0.1
    for ok in (
        "node1:7412",
        "apollo-a:7412",
        "ui.example",
        "ops.example:7412",
        "localhost:1",
        "127.0.0.1:7412",
        "[::1]:7412",
        "192.168.1.20:7412",
        "[fe80::1]:7412",
    ):
        assert gate.host_allowed(ok), ok
    for bad in ("evil.example:7412", "", "node1.evil.example", "localhost.evil.example:7412"):
        assert not gate.host_allowed(bad), bad


def test_only_roles_that_read_the_pages_may_sign_in() -> None:
    for role in (Role.READER, Role.SUBMITTER, Role.OPERATOR):
        assert sign_in_refusal(Principal("p", role, "token")) is None, role
    for role in (Role.WORKER, Role.NODE):  # node: a peer certificate, never a token
        why = sign_in_refusal(Principal("p", role, "token"))
        assert why == (
            f"that token (p, role {role.value}) cannot read these pages: sign in with a "
            f"token of role reader, submitter or operator"
        )
