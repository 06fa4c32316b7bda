from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from apollo11.lease.local_etcd import LocalEtcd
from tests.cluster import Cluster
from tests.workerprocs import HEARTBEAT_TIMEOUT, WorkerProc


@pytest.fixture
def web_cluster(tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str) -> Iterator[Cluster]:
    """Three nodes, each serving its web pages and /metrics."""
    c = Cluster.create(tmp_path, etcd_server.url, cluster_name, http=True)
    c.start()
    yield c
    c.stop()


@pytest.fixture
def remote(tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str) -> Iterator[Cluster]:
    c = Cluster.create(
        tmp_path,
        etcd_server.url,
        cluster_name,
        3,
        "--execution",
        "remote",
        "--worker-heartbeat-timeout",
        str(HEARTBEAT_TIMEOUT),
        "--worker-heartbeat-interval",
        "0.5",
    )
    c.start()
    yield c
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
