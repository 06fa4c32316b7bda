from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from apollo11.lease.local_etcd import LocalEtcd, free_port
from apollo11.scheduler.security.roles import Role
from apollo11.scheduler.security.tokens import create_token
from tests.cluster import Cluster
from tests.secure import Pki, make_pki
from tests.workerprocs import HEARTBEAT_TIMEOUT, WorkerProc

_REMOTE = (
    "--execution",
    "remote",
    "--worker-heartbeat-timeout",
    str(HEARTBEAT_TIMEOUT),
    "--worker-heartbeat-interval",
    "0.5",
)


@pytest.fixture
def web_cluster(tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str) -> Iterator[Cluster]:
    """Three nodes, each serving its web pages and /metrics."""
    c = Cluster.create(tmp_path, etcd_server.url, cluster_name, http=True)
    c.start()
    yield c
    c.stop()


@pytest.fixture
def remote(tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str) -> Iterator[Cluster]:
    c = Cluster.create(tmp_path, etcd_server.url, cluster_name, 3, *_REMOTE)
    c.start()
    yield c
    c.stop()


@dataclass
class Secured:
    cluster: Cluster
    pki: Pki
    workers: dict[str, str]  # worker tokens by their name: w1 and mallory


@pytest.fixture
def secure_remote(
    tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Secured]:
    """`remote` secured: TLS on the public ports, a tokens file, mutual TLS between the
    nodes. The test's own clients go with the CA and the operator's token."""
    pki = make_pki(tmp_path)
    tokens = {n: create_token(pki.tokens_file, n, Role.WORKER) for n in ("w1", "mallory")}
    c = Cluster.create(
        tmp_path, etcd_server.url, cluster_name, 3, *_REMOTE, "--tokens-file", str(pki.tokens_file)
    )
    for m in c.members:
        m.args += pki.tls_args(m.node_id)
        m.env.update(
            APOLLO11_PEER_LISTEN=f"127.0.0.1:{free_port()}",
            APOLLO11_PEER_CA=str(pki.dir / "ca.pem"),
            APOLLO11_PEER_CERT=str(pki.dir / f"{m.node_id}.pem"),
            APOLLO11_PEER_KEY=str(pki.dir / f"{m.node_id}-key.pem"),
        )
    c.start()
    monkeypatch.setenv("APOLLO11_CA", str(pki.dir / "ca.pem"))
    monkeypatch.setenv("APOLLO11_TOKEN", pki.tokens["operator"])
    yield Secured(c, pki, tokens)
    c.stop()


@pytest.fixture
def workers(tmp_path: Path, remote: Cluster) -> Iterator[Callable[..., WorkerProc]]:
    started: list[WorkerProc] = []

    def start(name: str, *extra: str, servers: str | None = None) -> WorkerProc:
        w = WorkerProc(tmp_path, name, servers or remote.endpoints, *extra)
        started.append(w)
        return w

    yield start
    for w in started:
        w.stop()
