from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from apollo11.lease.local_etcd import LocalEtcd
from tests.cluster import Cluster


@pytest.fixture
def web_cluster(tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str) -> Iterator[Cluster]:
    """Three nodes, each serving its web pages and /metrics."""
    c = Cluster.create(tmp_path, etcd_server.url, cluster_name, http=True)
    c.start()
    yield c
    c.stop()
