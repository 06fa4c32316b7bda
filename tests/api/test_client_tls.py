"""The client against a node with TLS and tokens: the CA and a token get through,
a missing token is UNAUTHENTICATED, and the CLI takes the same credentials."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from apollo11.scheduler.client import ApiError, SyncClient
from apollo11.scheduler.security.certs import create_cluster_certs
from apollo11.scheduler.security.roles import Role
from apollo11.scheduler.security.tokens import create_token
from tests.nodes import NodeProc, cli, start_node


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NodeProc, Path, str]]:
    root = tmp_path_factory.mktemp("tls")
    secrets = root / "secrets"
    create_cluster_certs(secrets, ["n1"])
    token = create_token(secrets / "tokens", "alice", Role.OPERATOR)
    node = start_node(
        root / "d",
        "--node-id",
        "n1",
        "--tls-cert",
        str(secrets / "n1.pem"),
        "--tls-key",
        str(secrets / "n1-key.pem"),
        "--tokens-file",
        str(secrets / "tokens"),
    )
    yield node, secrets, token
    node.stop()


def test_ca_and_token_get_through(secure: tuple[NodeProc, Path, str]) -> None:
    node, secrets, token = secure
    with SyncClient(node.address, ca=secrets / "ca.pem", token=token, retries=0) as c:
        assert c.status().security.startswith("tls, tokens")


def test_no_token_is_unauthenticated(secure: tuple[NodeProc, Path, str]) -> None:
    node, secrets, _ = secure
    with (
        SyncClient(node.address, ca=secrets / "ca.pem", retries=0) as c,
        pytest.raises(ApiError) as e,
    ):
        c.status()
    assert e.value.code is grpc.StatusCode.UNAUTHENTICATED


def test_cli_takes_the_ca_and_token_file(secure: tuple[NodeProc, Path, str]) -> None:
    node, secrets, token = secure
    (secrets / "alice.token").write_text(token + "\n")
    r = cli(
        "--ca",
        str(secrets / "ca.pem"),
        "--token-file",
        str(secrets / "alice.token"),
        "status",
        "--json",
        server=node.address,
    )
    assert r.returncode == 0, r.stderr
    assert '"security": "tls, tokens' in r.stdout
    r = cli("--ca", str(secrets / "ca.pem"), "health", server=node.address)
    assert r.returncode == 0, r.stderr
