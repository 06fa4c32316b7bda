"""A secured node for tests: a cluster CA, node certificates, a foreign CA, and a
tokens file with one token per role; started as a real process on loopback."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

from apollo11.scheduler.security.certs import create_cluster_certs, make_ca, make_leaf
from apollo11.scheduler.security.roles import Role
from apollo11.scheduler.security.tokens import create_token
from tests.nodes import NodeProc, start_node


@dataclass
class Pki:
    dir: Path
    tokens_file: Path
    tokens: dict[str, str]  # role name -> token
    foreign_key: bytes
    foreign_cert: bytes

    def pem(self, name: str) -> bytes:
        return (self.dir / name).read_bytes()

    def node_files(self, node_id: str) -> list[str]:
        d = self.dir
        return [
            "--peer-ca",
            str(d / "ca.pem"),
            "--peer-cert",
            str(d / f"{node_id}.pem"),
            "--peer-key",
            str(d / f"{node_id}-key.pem"),
        ]

    def tls_args(self, node_id: str) -> list[str]:
        d = self.dir
        return ["--tls-cert", str(d / f"{node_id}.pem"), "--tls-key", str(d / f"{node_id}-key.pem")]

    def channel_creds(self, cert_of: str | None = None) -> grpc.ChannelCredentials:
        """TLS to a node, optionally presenting node `cert_of`'s certificate
        ("foreign": one signed by another CA)."""
        key = cert = None
        if cert_of == "foreign":
            key, cert = self.foreign_key, self.foreign_cert
        elif cert_of is not None:
            key, cert = self.pem(f"{cert_of}-key.pem"), self.pem(f"{cert_of}.pem")
        return grpc.ssl_channel_credentials(self.pem("ca.pem"), key, cert)


def make_pki(root: Path, nodes: tuple[str, ...] = ("n1", "n2", "n3")) -> Pki:
    d = root / "pki"
    create_cluster_certs(d, list(nodes), days=1)
    tokens_file = d / "tokens"
    tokens = {r.value: create_token(tokens_file, f"{r.value}-user", r) for r in _TOKEN_ROLES}
    ca_key, ca_cert = make_ca("somebody else's CA")
    fkey, fcert = make_leaf(ca_key, ca_cert, "n1", ["n1", "127.0.0.1"], client=True, server=True)
    return Pki(d, tokens_file, tokens, fkey, fcert)


_TOKEN_ROLES = (Role.READER, Role.SUBMITTER, Role.OPERATOR, Role.WORKER)


def start_secure_node(
    root: Path, pki: Pki, *extra: str, node_id: str = "n1", env: dict[str, str] | None = None
) -> NodeProc:
    return start_node(
        root / node_id,
        "--node-id",
        node_id,
        *pki.tls_args(node_id),
        "--tokens-file",
        str(pki.tokens_file),
        "--peer-listen",
        "127.0.0.1:0",
        *pki.node_files(node_id),
        *extra,
        env=env,
    )
